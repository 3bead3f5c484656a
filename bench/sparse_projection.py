"""Projection of the in-process BM25 first stage to a larger collection, by measurement on synthetic postings.

Every term of the topics gets its document frequency in a real index (e.g. the DL pool, 39,610 MS MARCO passages)
scaled up to ``--docs`` documents (capped there), random doc numbers, frequencies 1-3 and length norms; the engine then
scores the topics exactly as it scores a real index. What it measures is the per-query cost at that size (postings
touched, accumulator and selection passes over every document); rankings on random postings mean nothing.

Usage: python bench/sparse_projection.py --index INDEX_OF_THE_DL_POOL [--collection msmarco-passage-trec-dl-pool]
       [--docs 8841823] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _common import COLLECTIONS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True, help="a weir index with a bm25 component")
    ap.add_argument("--collection", default="msmarco-passage-trec-dl-pool", help="whose queries.tsv is asked")
    ap.add_argument("--docs", type=int, default=8_841_823, help="documents of the projected collection (MS MARCO)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from weir.indexer.index_dir import Index
    from weir.indexer.postings import Postings
    from weir.ranker.retrievers.bm25 import BM25
    from weir.ranker.retrievers.inverted import BM25Scores, InvertedIndex
    from weir.core.trec import read_topics

    real = BM25(Index(args.index))
    source, n = real.engine.postings, args.docs
    weights = real.weights([q.text for q in read_topics(COLLECTIONS / args.collection / "queries.tsv")])
    terms = sorted({t for w in weights for t in w if t in source.term_ids})
    rng = np.random.default_rng(0)
    offsets, docs = [0], []
    for term in terms:
        i = source.term_ids[term]
        df = min(n, int((source.offsets[i + 1] - source.offsets[i]) * n / source.max_doc))
        docs.append(np.sort(rng.choice(n, df, replace=False)).astype(np.int32))
        offsets.append(offsets[-1] + df)
    all_docs = np.concatenate(docs)
    postings = Postings("contents", terms, np.array(offsets, dtype=np.int64), all_docs,
                        rng.integers(1, 4, len(all_docs)).astype(np.uint8), rng.integers(20, 60, n).astype(np.uint8),
                        n, n, n * 35, [f"d{i}" for i in range(n)])
    engine = InvertedIndex(BM25Scores(postings, 0.9, 0.4))
    touched = [sum(int(np.diff(postings.offsets[[postings.term_ids[t], postings.term_ids[t] + 1]])[0])
                   for t in w if t in postings.term_ids) for w in weights]
    print(f"{n:,} documents; {len(weights)} topics, {len(terms)} terms; postings touched a query: median "
          f"{statistics.median(touched):,.0f}, mean {statistics.mean(touched):,.0f}")
    for k in (10, 1000):
        times = []
        for _ in range(args.repeats):
            for w in weights:
                start = time.perf_counter()
                engine.search(w, k)
                times.append(time.perf_counter() - start)
        print(f"k={k}: median {statistics.median(times) * 1000:.1f} ms a query, p99 "
              f"{np.percentile(times, 99) * 1000:.1f} ms, {1 / statistics.mean(times):.1f} queries/s (one thread)")


if __name__ == "__main__":
    main()
