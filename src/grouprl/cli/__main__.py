"""``python -m grouprl.cli ...``: the ``grouprl`` command (what launchers such as torchrun and accelerate start)."""

import sys

from grouprl.cli import main

sys.exit(main())
