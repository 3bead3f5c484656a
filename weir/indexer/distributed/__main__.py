"""``python -m weir.indexer.distributed JOB``: the Ray part of a distributed build, run by the build in a child
process (:mod:`weir.indexer.distributed.pool`)."""

import sys

from weir.indexer.distributed.pool import main

if __name__ == "__main__":
    sys.exit(main(sys.argv))
