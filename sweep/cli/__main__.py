"""`python -m sweep.cli`, the same as `rapid`."""
import sys

from . import main

sys.exit(main())
