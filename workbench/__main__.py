"""`python -m workbench ...` is the same as the `workbench` console script."""

import sys

from .cli import main

sys.exit(main())
