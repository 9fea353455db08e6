"""``python -m aioloader``."""

import sys

from .cli import main

sys.exit(main())
