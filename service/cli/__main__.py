"""``python -m service.cli``: the `weir` command without the installed script."""

import sys

from service.cli import main

sys.exit(main())
