"""``python -m windtunnel ...`` — the command line (also ``torchrun -m windtunnel train ...``)."""

import sys

from .cli import main

sys.exit(main())
