"""BM25 queries/second: weir's first stage against pyserini's LuceneSearcher.batch_search, side by side.

Both run in one process on the same index, topics, k, threads and JVM, alternating A B A B; pyserini's hits are read
out to (docid, score) pairs as any run writer must. Prints the median [min-max] queries/s of each and the median of
the per-pair ratios.  Usage: python bench/bm25_throughput.py [--collection beir-scifact] [--k 1000] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import COLLECTIONS, summary

from indexer.build import build_index
from indexer.index_dir import Index
from ranker.retrievers.bm25 import BM25
from weir.trec import read_topics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collection", default="beir-scifact")
    ap.add_argument("--index", help="an existing weir index (default: build one in a temporary directory)")
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    coll = COLLECTIONS / args.collection
    with tempfile.TemporaryDirectory() as tmp:
        index_dir = Path(args.index) if args.index else Path(tmp) / "index"
        if not args.index:
            build_index(coll, index_dir)
        topics = read_topics(coll / "queries.tsv")
        index = Index(index_dir)
        weir_bm25 = BM25(index)
        from pyserini.search.lucene import LuceneSearcher

        pyserini = LuceneSearcher(str(index.component_path("bm25")))
        pyserini.set_bm25(0.9, 0.4)
        texts, qids = [q.text for q in topics], [q.id for q in topics]

        def run_weir():
            run = weir_bm25.retrieve(topics, args.k)
            return {qid: [(h.doc_id, h.score) for h in hits] for qid, hits in run.items()}

        def run_pyserini():
            results = pyserini.batch_search(texts, qids, k=args.k, threads=args.threads)
            return {qid: [(h.docid, h.score) for h in hits] for qid, hits in results.items()}

        a, b = run_weir(), run_pyserini()  # warm-up, and the check that both rank the same
        same = sum(1 for qid in qids if [d for d, _ in a[qid]] == [d for d, _ in b[qid]])
        rates: dict[str, list[float]] = {"weir": [], "pyserini": []}
        for _ in range(args.reps):
            for name, fn in (("weir", run_weir), ("pyserini", run_pyserini)):
                start = time.perf_counter()
                fn()
                rates[name].append(len(topics) / (time.perf_counter() - start))
        ratios = [w / p for w, p in zip(rates["weir"], rates["pyserini"])]
        print(f"{args.collection}: {len(topics)} queries, k={args.k}, threads={args.threads}, {args.reps} reps "
              f"(identical rankings on {same}/{len(qids)} queries)")
        print(f"  weir BM25                        {summary(rates['weir'])} queries/s")
        print(f"  pyserini LuceneSearcher.batch_search {summary(rates['pyserini'])} queries/s")
        print(f"  ratio weir/pyserini (median of pairs) {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
