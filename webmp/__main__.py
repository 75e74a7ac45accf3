"""`python -m webmp ...`: the same as the `webmp` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
