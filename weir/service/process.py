"""What a serving process sets up for its own memory: the JVM's heap, sized to the index it serves
(:func:`jvm_heap_for`), and the garbage collector's view of what it holds for its lifetime
(:func:`freeze_long_lived`). A single server, the sharded front and every Ray Serve replica call both."""

from __future__ import annotations

import gc

from weir.indexer.index_dir import Index


def freeze_long_lived() -> None:
    """Collect once, then move every object alive into the garbage collector's permanent generation (``gc.freeze``):
    what a warm server holds for its lifetime (models, vocabularies, postings tables, pyserini's and grpc's objects,
    about 130,000 tracked objects over SciFact) is no longer walked by each full collection. Before, under one
    caller of bm25 k=1000 with text, a full collection ran about 4 times a second and took up to 48 ms, 15% of the
    wall time, and made the tail: in process, 688 calls in 10 s, p99 59.9 ms, against 845 calls, p99 15.6 ms once
    frozen. Through gRPC (``bench/load.py --compare``, bm25 k=1000 with text, 200 ms deadlines, side by side): one
    caller 1.44x the answers in time (p99 15.4-15.9 ms against 72-74; the 9 calls in 10 s that expired, none); 32
    callers 1.66x, and 0.6-1.1% of the admitted calls expired against 21%. Objects made later (a pipeline built on
    its first call) are frozen when they are made."""
    gc.collect()
    gc.freeze()


def jvm_heap_for(index: Index) -> str:
    """A JVM heap for serving ``index`` when WEIR_JVM_HEAP is not set: Lucene reads the index through memory maps
    (outside the heap); the heap holds per-query state and stored documents being read, so 512 MiB plus half the
    size of the Lucene components, at most 8 GiB."""
    lucene = sum(int(c.get("bytes", 0)) for n, c in index.manifest["components"].items() if n != "dense")
    return f"{min(8192, 512 + lucene // 2**21)}m"
