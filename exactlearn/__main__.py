"""``python -m exactlearn``: the ``exactlearn`` command (docs/reference/cli.md)."""
import sys

from exactlearn.cli import main

if __name__ == "__main__":
    sys.exit(main())
