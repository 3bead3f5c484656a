"""Distributed index builds on Ray (``weir index build --ray``): the per-document steps run in a Ray Data actor pool.

What costs a build its time is per document: the transformer passes of quality scoring (static pruning), of term
weighting (DeepCT, DeepImpact) and of dense encoding. Here those steps run on Ray workers, block by block, and write
one block file per block; then :func:`weir.indexer.build.build_index` builds every component from the block files
with the code of a single-process build (Anserini's multi-threaded indexer for the Lucene components, faiss for the
dense one). The result is an ordinary index directory with its manifest; the manifest's ``distributed`` entry says
how it was computed. (Blocks are the build's units of work; the index *shards* of ``--shard`` and ``--shard-set`` are
another thing, :mod:`weir.indexer.shards`.)

- **Two phases.** With ``--prune``, a first pass scores every document's quality on the workers
  (:func:`score_quality`); the driver gathers the scores and chooses the pruned documents exactly as one process does
  (:mod:`weir.indexer.quality.prune`). The second pass (:func:`compute_blocks`) weighs and encodes the documents kept.
  Each phase has its own plan and block files, so an interrupted build resumes in the phase it was in. An estimator
  that compares documents with each other (``duplicates``) scores on the driver.
- **Blocks** (:mod:`.plan`). The driver reads the corpus once (validating it as every build does) and cuts the
  documents to be indexed into blocks of ``block_size`` consecutive documents, each located by the byte offset of its
  first line. ``block_size`` is a multiple of the term weighting batch (256 documents), of the dense chunk (1024 by
  default) and of the quality estimator's chunk (1024 for ``learned``): a worker runs exactly the forward passes a
  single process runs, over the same documents, so scores, weights and vectors are the same bits (a transformer's
  output for a row changes in its last bits with the other rows of its batch).
- **Statistics.** A BM25-shaped head needs the whole collection's document frequencies and mean length. The
  workers count them first, block by block, into ``statistics/`` (tokenizing is nine tenths of a serial reading
  pass: measured 3.8 s against 0.4 s for the 39,610 DL pool passages); the counts are summed and handed to every
  worker once (``ray.put``) before any block is weighed.
- **Workers** (:mod:`.workers`, :mod:`.pool`). Ray Data ``map_batches`` over the blocks with an actor pool of
  ``workers`` actors: one GPU each when the cluster has GPUs, else ``cpus_per_worker`` CPUs and as many torch threads.
  Each actor loads its models once and reads its blocks from the corpus file, so the corpus must be on a filesystem
  every node sees. Ray runs in a child process of the build (``python -m weir.indexer.distributed JOB``).
- **Block files** (:mod:`.blocks`). One file per block under the work directory (default: ``<out>.blocks`` beside
  the index), written atomically. ``plan.json`` fingerprints what the block files depend on (corpus checksum,
  components, model checksums, encoder settings, block size, the documents kept). A rerun with the same plan computes
  only the blocks that have no file yet, so an interrupted build resumes; a changed plan starts afresh, and so does a
  work directory of a weir before the block files were named so (``<out>.shards``, plan version 1). A worker that
  dies has its block retried on a restarted actor (Ray actor restarts and task retries). The work directory is
  removed once the index is in place, unless kept (``--keep-blocks``).
- **The driver** (:mod:`.driver`) runs each phase and records it for the manifest.

Written here, not taken from a library: Ray Data gives the pool, the scheduling and the retries. What no library
gives is the block plan that keeps the single-process build's batches, and the block files that make a build resume.
"""

from weir.indexer.distributed.blocks import (BlockColumn, BlockVectors, block_path, collection_statistics, open_work,
                                             read_block, write_block)
from weir.indexer.distributed.driver import compute_blocks, finish, score_quality
from weir.indexer.distributed.plan import (ENCODING, PHASES, QUALITY, Block, Phase, RayOptions, block_size,
                                           plan_blocks, work_directory)
from weir.indexer.distributed.workers import BlockWorker, StatisticsWorker

__all__ = ["ENCODING", "PHASES", "QUALITY", "Block", "BlockColumn", "BlockVectors", "BlockWorker",
           "Phase", "RayOptions", "StatisticsWorker", "block_path", "block_size", "collection_statistics",
           "compute_blocks", "finish", "open_work", "plan_blocks", "read_block", "score_quality", "work_directory",
           "write_block"]
