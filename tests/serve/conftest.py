"""The server: routes, WebSockets, browser runs, the page's tuning exchange, and schemathesis fuzzing
of the REST API (test_api_fuzz.py: slow throughout)."""

from tiers import Tier

tier = Tier(__file__, slow_files=["test_api_fuzz.py"])
pytest_collection_modifyitems, pytest_ignore_collect = tier.mark, tier.ignore
