"""``python -m ratchet`` is the same as the ``ratchet`` command."""

import sys

from ratchet.cli import main

sys.exit(main())
