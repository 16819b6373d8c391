"""``python -m orchenv`` runs the ``orchenv`` command."""

import sys

from orchenv.cli import console_main

sys.exit(console_main())
