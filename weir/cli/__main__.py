"""``python -m weir.cli``: the `weir` command without the installed script."""

import sys

from weir.cli import main

sys.exit(main())
