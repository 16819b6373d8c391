"""``python -m orchenv`` runs the ``orchenv`` command."""

import sys

from orchenv.cli import main

sys.exit(main())
