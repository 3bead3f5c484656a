"""Sparse first-stage throughput: weir's BM25 against bm25s and pyserini, side by side, in alternating rounds.

Each engine answers the same topics at the same k and turns its answer into what a run writer needs, a ranked list
of (collection id, score) per query; query analysis is inside the timing for all three. Engines:

- ``weir``: ``BM25.search`` (Anserini's analyzer, Lucene's BM25 scored in process, :mod:`weir.ranker.retrievers.inverted`);
- ``weir Run``: ``BM25.retrieve``, the same hits as the ``Run`` of ``Hit`` objects a pipeline passes on (context);
- ``weir before``: the first stage before in-process scoring: Lucene searched through pyjnius per query, hits read
  back per hit (``weir.ranker.retrievers.lucene.LuceneBM25Searcher``), as a ``Run``;
- ``bm25s``: bm25s ``method="lucene"``, k1 0.9, b 0.4, PyStemmer English stemmer, English stopwords, over title +
  text, its numpy backend, ``n_threads=--threads``;
- ``pyserini``: ``LuceneSearcher.batch_search`` with ``--threads`` threads over weir's own BM25 index.

Rounds alternate the engines (A B C D E, A B C D E ...); each round runs ``--passes`` passes over at least
``--min-queries`` queries (the topics repeated). Printed: median [min-max] queries/s over every pass, the median of
the per-round ratios weir / bm25s, nDCG@10, how many queries weir ranks exactly as Lucene (ids and scores) and as
pyserini (ids; pyserini rounds its scores), then single-query latency at k=10 (median, p99) before and after, and the
load time and resident memory of an opened index (measured in a fresh process). weir runs on one thread: a second
gave it nothing (the per-query Python work holds the GIL).

Usage: python bench/sparse_throughput.py [--collections beir-scifact,msmarco-passage-trec-dl-pool] [--k 10,100,1000]
       [--rounds 3] [--passes 3] [--threads 2] [--indexes DIR]   (DIR keeps built indexes between runs)
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import COLLECTIONS, ROOT, corpus, percentile, summary


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def memory_child(index_path: str) -> None:
    """In a fresh process: RSS with the JVM started, then the load time and RSS of an opened BM25 first stage."""
    from weir.core import jvm

    jvm.ensure()
    from weir.indexer.index_dir import Index
    from weir.ranker.retrievers.bm25 import BM25
    from weir.ranker.retrievers.lucene import EnglishAnalyzer

    EnglishAnalyzer().analyze("warm up the analyzer")
    gc.collect()
    before = rss_mib()
    start = time.perf_counter()
    bm25 = BM25(Index(index_path))
    seconds = time.perf_counter() - start
    gc.collect()
    print(json.dumps({"load_s": seconds, "rss_mib": rss_mib() - before, "arrays_mib": bm25.engine.nbytes / 2**20,
                      "documents": bm25.engine.postings.max_doc, "postings": len(bm25.engine.postings.docs)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collections", default="beir-scifact,msmarco-passage-trec-dl-pool")
    ap.add_argument("--k", default="10,100,1000", help="depths, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--min-queries", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2, help="bm25s n_threads and pyserini threads")
    ap.add_argument("--latency-queries", type=int, default=300)
    ap.add_argument("--indexes", help="directory keeping the weir indexes built here between runs")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child)
        return

    depths = [int(k) for k in args.k.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.collections.split(","):
            bench_collection(name, args, depths, Path(args.indexes or tmp))


class Engines:
    """The engines over one collection, each answering a batch of query texts at depth ``k`` with what a run writer
    needs; ``bm25s_build``: the seconds bm25s took to index the corpus."""

    def __init__(self, coll: Path, index, threads: int):
        import bm25s
        import numpy as np
        import Stemmer

        from weir.core import jvm
        from weir.ranker.retrievers.bm25 import BM25
        from weir.ranker.retrievers.lucene import LuceneBM25Searcher

        jvm.ensure()
        from pyserini.search.lucene import LuceneSearcher

        self.threads = threads
        self.bm25 = BM25(index)
        self.lucene = LuceneBM25Searcher(index.component_path("bm25"))
        self.pyserini_searcher = LuceneSearcher(str(index.component_path("bm25")))
        self.pyserini_searcher.set_bm25(0.9, 0.4)
        self.ids, docs = corpus(coll)
        self.stemmer = Stemmer.Stemmer("english")
        start = time.perf_counter()
        self.peer = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
        self.peer.index(bm25s.tokenize(docs, stopwords="en", stemmer=self.stemmer, show_progress=False),
                        show_progress=False)
        self.bm25s_build = time.perf_counter() - start
        self.id_array = np.asarray(self.ids, dtype=object)

    def weir(self, batch, k):
        return self.bm25.search(batch, k)

    def weir_run(self, batch, k):
        from weir.core.types import Query

        return self.bm25.retrieve([Query(str(i), t) for i, t in enumerate(batch)], k)

    def before(self, batch, k):  # the Lucene first stage as weir ran it before: hits read back one by one
        from weir.core.types import Hit, Run

        return Run({str(i): [Hit(d, s, r, {"bm25": s}) for r, (d, s) in enumerate(hits, start=1)]
                    for i, hits in enumerate(self.lucene.search_many(batch, k))})

    def bm25s(self, batch, k):
        import bm25s

        tokens = bm25s.tokenize(batch, stopwords="en", stemmer=self.stemmer, show_progress=False)
        found, scores = self.peer.retrieve(tokens, k=min(k, len(self.ids)), n_threads=self.threads,
                                           show_progress=False)
        return [list(zip(self.id_array[row].tolist(), s.tolist())) for row, s in zip(found, scores)]

    def pyserini(self, batch, k):
        keys = [str(i) for i in range(len(batch))]
        results = self.pyserini_searcher.batch_search(batch, keys, k=k, threads=self.threads)
        return [[(h.docid, h.score) for h in results[key]] for key in keys]

    def by_name(self) -> dict:
        return {"weir": self.weir, "weir Run": self.weir_run, "weir before": self.before, "bm25s": self.bm25s,
                "pyserini": self.pyserini}


def throughput(engines: dict, pass_texts: list[str], k: int, rounds: int,
               passes: int) -> tuple[dict[str, list[float]], list[float]]:
    """Queries/s of every pass of every engine, the engines alternating round by round; the per-round ratios weir /
    bm25s."""
    rates: dict[str, list[float]] = {e: [] for e in engines}
    ratios = []
    for _ in range(rounds):
        round_rates = {}
        for engine, fn in engines.items():
            timed = []
            for _ in range(passes):
                gc.collect()
                start = time.perf_counter()
                fn(pass_texts, k)
                timed.append(len(pass_texts) / (time.perf_counter() - start))
            rates[engine] += timed
            round_rates[engine] = statistics.median(timed)
        ratios.append(round_rates["weir"] / round_rates["bm25s"])
    return rates, ratios


def print_depth(e: Engines, k: int, texts: list[str], qids: list[str], qrels, pass_texts: list[str],
                args: argparse.Namespace) -> None:
    """At depth ``k``: how many queries weir ranks as Lucene and as pyserini, each engine's queries/s and nDCG@10."""
    from weir.evaluation.measures import evaluate

    engines = e.by_name()
    ours = e.weir(texts, k)
    same_lucene = sum(1 for a, b in zip(ours, e.lucene.search_many(texts, k)) if a == b)
    same_ids = sum(1 for a, b in zip(ours, e.pyserini(texts, k)) if [d for d, _ in a] == [d for d, _ in b])
    ndcg = {}
    for engine in ("weir", "bm25s", "pyserini"):
        hits = engines[engine](texts, k)
        ndcg[engine] = evaluate({q: {d: s for d, s in h} for q, h in zip(qids, hits)}, qrels, ["nDCG@10"])["nDCG@10"]
    rates, ratios = throughput(engines, pass_texts, k, args.rounds, args.passes)
    print(f"\nk={k}: weir ranks {same_lucene}/{len(texts)} queries exactly as Lucene (ids and scores), "
          f"{same_ids}/{len(texts)} as pyserini (ids; pyserini rounds its scores to 4 decimals)")
    print("| engine | queries/s, median [min-max] | nDCG@10 |\n|---|---|---|")
    for engine in engines:
        print(f"| {engine} | {summary(rates[engine])} | {ndcg.get(engine, ndcg['weir']):.4f} |")
    print(f"weir / bm25s: {statistics.median(ratios):.2f}x (median of per-round ratios "
          f"{', '.join(f'{r:.2f}' for r in ratios)})")


def print_latency(e: Engines, texts: list[str], n: int) -> None:
    """Single-query latency at k=10 before and after in-process scoring, query by query alternating."""
    lat_texts = (texts * -(-n // len(texts)))[:n]
    latency = {"weir before": [], "weir": []}
    for text in lat_texts:  # alternate query by query
        for engine, fn in (("weir before", e.before), ("weir", e.weir_run)):
            start = time.perf_counter()
            fn([text], 10)
            latency[engine].append((time.perf_counter() - start) * 1000)
    print(f"\nsingle-query latency, k=10, {len(lat_texts)} queries alternating (ms):")
    for engine, values in latency.items():
        print(f"  {engine:<12} median {statistics.median(values):.3f}  p99 {percentile(values, 99):.3f}")


def print_memory(index_dir: Path) -> None:
    """The load time and resident memory of the opened index, measured in a fresh process."""
    out = subprocess.run([sys.executable, __file__, "--memory-child", str(index_dir)], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    mem = json.loads(out.stdout.strip().splitlines()[-1])
    per_million = mem["rss_mib"] / mem["documents"] * 1e6
    print(f"\nopened index (fresh process): load {mem['load_s']:.2f} s, RSS +{mem['rss_mib']:.1f} MiB "
          f"({per_million:,.0f} MiB per million documents; arrays {mem['arrays_mib']:.1f} MiB for "
          f"{mem['postings']:,} postings, {mem['arrays_mib'] * 2**20 / mem['postings']:.1f} bytes a posting)")


def bench_collection(name: str, args: argparse.Namespace, depths: list[int], index_root: Path) -> None:
    from weir.core.trec import read_qrels, read_topics
    from weir.indexer.build import build_index
    from weir.indexer.index_dir import Index

    coll = COLLECTIONS / name
    index_dir = index_root / name
    if not (index_dir / "manifest.json").is_file():
        build_index(coll, index_dir)
    index = Index(index_dir)
    topics = read_topics(coll / "queries.tsv")
    qrels = read_qrels(coll / "qrels.txt")
    texts, qids = [q.text for q in topics], [q.id for q in topics]
    pass_texts = texts * -(-args.min_queries // len(texts))
    engines = Engines(coll, index, args.threads)
    print(f"\n## {name}: {len(engines.ids):,} documents, {len(texts)} topics ({len(pass_texts)} queries a pass), "
          f"threads {args.threads}, {args.rounds} rounds x {args.passes} passes; bm25s index built in "
          f"{engines.bm25s_build:.1f} s")
    for k in depths:
        print_depth(engines, k, texts, qids, qrels, pass_texts, args)
    print_latency(engines, texts, args.latency_queries)
    print_memory(index_dir)
    engines.pyserini_searcher.close()


if __name__ == "__main__":
    main()
