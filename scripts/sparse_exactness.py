"""Check that weir's in-process sparse first stages rank exactly as Lucene does, on any weir index and topics.

For each of ``bm25``, ``deepct`` and ``deepimpact`` the index has, every query is searched by weir's stage
(:mod:`ranker.retrievers.inverted`) and by Lucene itself (the query Anserini builds, weir's tie-break), and the two
top-k lists of (collection id, score) are compared, every rank and every score bit. Prints one line per stage;
exits 1 if any query differs.

Usage: python scripts/sparse_exactness.py --index I --topics queries.tsv [-k 1000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--topics", required=True)
    ap.add_argument("-k", type=int, default=1000)
    args = ap.parse_args()

    from indexer.index_dir import Index
    from ranker.retrievers.bm25 import BM25
    from ranker.retrievers.learned_sparse import DeepCTRetriever, ImpactRetriever
    from ranker.retrievers.lucene import LuceneBM25Searcher, LuceneTermSearcher, bm25_similarity
    from weir import jvm
    from weir.trec import read_topics

    index = Index(args.index)
    topics = read_topics(args.topics)
    texts = [q.text for q in topics]
    failed = False
    for name in ("bm25", "deepct", "deepimpact"):
        if name not in index.components:
            continue
        path = index.component_path(name)
        if name == "bm25":
            stage, reference = BM25(index), LuceneBM25Searcher(path)
            queries = texts
        elif name == "deepct":
            stage = DeepCTRetriever(index)
            reference = LuceneTermSearcher(path, bm25_similarity(stage.k1, stage.b))
            queries = [stage.query(t) for t in texts]
        else:
            stage = ImpactRetriever(index)
            reference = LuceneTermSearcher(path, jvm.autoclass("io.anserini.search.similarity.ImpactSimilarity")())
            queries = [stage.query(t) for t in texts]
        ours = stage.search(texts, args.k)
        theirs = reference.search_many(queries, args.k)
        same = sum(1 for a, b in zip(ours, theirs) if a == b)
        hits = sum(len(a) for a in ours)
        print(f"{name:<11} {same}/{len(topics)} queries identical to Lucene at k={args.k} "
              f"({hits:,} hits compared, ids and scores)")
        failed |= same != len(topics)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
