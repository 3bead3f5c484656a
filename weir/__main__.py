"""``python -m weir``: the `weir` command without the installed script."""

import sys

from weir.cli import main

sys.exit(main())
