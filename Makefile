# The two commands of the README. Each installs what it needs first (scripts/setup.sh).
.PHONY: train test setup

train:
	@bash scripts/setup.sh train && . scripts/env.sh && webmp train $(ARGS)

test:
	@bash scripts/setup.sh test && . scripts/env.sh && python3 -m pytest $(ARGS)

setup:
	@bash scripts/setup.sh test
