"""``python -m exactlearn.cli``: the ``exactlearn`` command."""

import sys

from exactlearn.cli.main import main

sys.exit(main())
