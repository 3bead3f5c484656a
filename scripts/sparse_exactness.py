"""Check that weir's in-process sparse first stages rank exactly as Lucene does, on any weir index and topics.

For each of ``bm25``, ``deepct`` and ``deepimpact`` the index has, every query is searched by weir's stage
(:mod:`weir.ranker.retrievers.inverted`) and by Lucene itself (the query Anserini builds, weir's tie-break), and the two
top-k lists of (collection id, score) are compared, every rank and every score bit. Prints one line per stage;
exits 1 if any query differs.

With ``--formats``, the learned indexes are not needed: the collection's own terms are written in both learned
index formats (``-pretokenized``, searched with BM25 k1=10 b=0.9 as DeepCT is; ``-impact -pretokenized``, searched
with impact sums as DeepImpact is), each (document, term) given a frequency or impact from a fixed hash over 1..300,
and those are compared the same way: the encoder that makes real weights is not what the check is about.

Usage: python scripts/sparse_exactness.py --index I --topics queries.tsv [-k 1000] [--formats COLLECTION]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--topics", required=True)
    ap.add_argument("-k", type=int, default=1000)
    ap.add_argument("--formats", metavar="COLLECTION", help="also check both learned index formats, written with "
                    "hashed weights from this collection's corpus")
    return ap.parse_args()


def stage_and_reference(name: str, index, texts: list[str]) -> tuple:
    """weir's first stage ``name`` over ``index``, Lucene searching its component, and the queries Lucene gets."""
    from weir.core import jvm
    from weir.ranker.retrievers.bm25 import BM25
    from weir.ranker.retrievers.learned_sparse import DeepCTRetriever, ImpactRetriever
    from weir.ranker.retrievers.lucene import LuceneBM25Searcher, LuceneTermSearcher, bm25_similarity

    path = index.component_path(name)
    if name == "bm25":
        return BM25(index), LuceneBM25Searcher(path), texts
    if name == "deepct":
        stage = DeepCTRetriever(index)
        return stage, LuceneTermSearcher(path, bm25_similarity(stage.k1, stage.b)), [stage.query(t) for t in texts]
    stage = ImpactRetriever(index)
    reference = LuceneTermSearcher(path, jvm.autoclass("io.anserini.search.similarity.ImpactSimilarity")())
    return stage, reference, [stage.query(t) for t in texts]


def check_stages(index, texts: list[str], k: int) -> bool:
    """Compare each sparse first stage the index has with Lucene, a line each; whether all were identical."""
    same_everywhere = True
    for name in ("bm25", "deepct", "deepimpact"):
        if name not in index.components:
            continue
        stage, reference, queries = stage_and_reference(name, index, texts)
        theirs = reference.search_many(queries, k)
        for scorer, ours in answers(stage.engine, stage.weights(texts), k).items():
            same = sum(1 for a, b in zip(ours, theirs) if a == b)
            print(f"{name:<11} {scorer:<10} {same}/{len(texts)} queries identical to Lucene at k={k} "
                  f"({sum(len(a) for a in ours):,} hits compared, ids and scores)")
            same_everywhere &= same == len(texts)
    return same_everywhere


def answers(engine, weights: list[dict], k: int) -> dict[str, list[list[tuple[str, float]]]]:
    """Each query's top k (collection id, score) by the engine's pruned search and by its exhaustive scorer."""
    return {scorer: [list(zip(engine.docids_of(docs), scores.tolist()))
                     for docs, scores in (engine.top(w, k, exhaustive=scorer == "exhaustive") for w in weights)]
            for scorer in ("pruned", "exhaustive")}


def weight(doc_id: str, term: str) -> int:
    """A fixed hashed weight of ``term`` in ``doc_id``, 1..300."""
    digest = hashlib.blake2b(f"{doc_id}\0{term}".encode(), digest_size=4).digest()
    return 1 + int.from_bytes(digest, "big") % 300


def hashed_contents(collection: str):
    """Each document of ``collection`` as pretokenized text: its terms, each repeated its hashed weight."""
    from weir.indexer.collections import Collection
    from weir.indexer.weighting.terms import terms as text_terms

    for doc in Collection.open(collection).corpus():
        terms = dict.fromkeys(text_terms(doc.contents))
        yield doc.id, " ".join(" ".join([t] * weight(doc.id, t)) for t in terms)


def check_formats(collection: str, texts: list[str], k: int) -> bool:
    """Compare both learned index formats, written with hashed weights, with Lucene, a line each; whether both were
    identical."""
    from weir.core import jvm
    from weir.indexer.lucene import index_pretokenized
    from weir.indexer.postings import export
    from weir.ranker.retrievers.inverted import BM25Scores, ImpactScores, InvertedIndex
    from weir.ranker.retrievers.learned_sparse import deepct_query, impact_query
    from weir.ranker.retrievers.lucene import LuceneTermSearcher, bm25_similarity

    same_everywhere = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in (("deepct format", []), ("impact format", ["-impact"])):
            path = Path(tmp) / name.split()[0]
            index_pretokenized(path, hashed_contents(collection), flags, 2)
            if flags:
                engine = InvertedIndex(ImpactScores(export(path, progress=False)))
                similarity = jvm.autoclass("io.anserini.search.similarity.ImpactSimilarity")()
                queries = [impact_query(t) for t in texts]
            else:
                engine = InvertedIndex(BM25Scores(export(path, progress=False), 10.0, 0.9))
                similarity = bm25_similarity(10.0, 0.9)
                queries = [deepct_query(t) for t in texts]
            reference = LuceneTermSearcher(path, similarity)
            theirs = reference.search_many(queries, k)
            for scorer, ours in answers(engine, queries, k).items():
                same = sum(1 for a, b in zip(ours, theirs) if a == b)
                print(f"{name:<14} {scorer:<10} {same}/{len(texts)} queries identical to Lucene at k={k} "
                      f"({sum(len(a) for a in ours):,} hits compared; hashed weights 1..300)")
                same_everywhere &= same == len(texts)
    return same_everywhere


def main() -> int:
    args = parse_args()

    from weir.core.trec import read_topics
    from weir.indexer.index_dir import Index

    index = Index(args.index)
    texts = [q.text for q in read_topics(args.topics)]
    identical = check_stages(index, texts, args.k)
    if args.formats:
        identical &= check_formats(args.formats, texts, args.k)
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
