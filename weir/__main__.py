import sys

from weir.cli import main

sys.exit(main())
