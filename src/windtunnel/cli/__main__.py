"""``python -m windtunnel.cli ...`` — the command line, as ``windtunnel ...``."""

import sys

from . import main

sys.exit(main())
