"""DeepImpact over shards: a shard set (``--shard-set N``, weighed in one pass, one impact scale) against N shards
built one by one (``--shard I/N``, each on its own statistics and scale), both against one index of the whole
collection, on the collection's test topics.

Builds the three (bm25 and deepimpact; in --work, reused when there) and prints each build's wall time and peak
RSS (a child process each, measured with ``resource.getrusage``), then per layout: the impact scales, on how many
topics the merged top 10 (by score, then id, as the sharded front merges) is the whole index's (ids and scores; ids
in order), and nDCG@10, for ``deepimpact`` and for ``deepimpact+bm25`` fused from the merged lists with the whole
index's settings (what the sharded front does). Prints figures only; nothing is asserted.

    python bench/shard_set.py --collection beir-scifact --shards 2 --work /tmp/shard-set
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from _common import COLLECTIONS, ROOT

COMPONENTS = "bm25,deepimpact"


def build(collection: Path, out: Path, extra: list[str]) -> str:
    """Build with `weir index build` in a child process (unless ``out`` exists); its wall time and peak RSS."""
    if out.exists():
        return "reused"
    script = ("import resource, sys, time; from weir.cli import main; t = time.perf_counter(); "
              "code = main(sys.argv[1:]); print('BENCH', time.perf_counter() - t, "
              "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script, "index", "build", "--collection", str(collection),
                           "--out", str(out), "--with", COMPONENTS, *extra], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit(f"build of {out} failed:\n{done.stderr[-3000:]}")
    seconds, rss = next(line.split()[1:] for line in done.stderr.splitlines() if line.startswith("BENCH"))
    return f"{float(seconds):.1f} s, peak RSS {int(rss) / 2**20:.2f} GiB"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collection", default="beir-scifact")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--work", default="/tmp/weir-shard-set", help="where the indexes are built (reused when there)")
    ap.add_argument("--depth", type=int, default=1000, help="hits per stage merged and fused (default 1000)")
    return ap.parse_args()


def build_layouts(args: argparse.Namespace) -> list[tuple[str, list[Path]]]:
    """Build the whole index, the shard set and the shards built one by one (printing each build); the two
    layouts of shards, each with its label."""
    root = COLLECTIONS / args.collection
    work, n = Path(args.work), args.shards
    work.mkdir(parents=True, exist_ok=True)
    print(f"{args.collection}: whole index {build(root, work / 'whole', [])}")
    print(f"shard set of {n}: {build(root, work / f'set-{n}', ['--shard-set', str(n)])}")
    for i in range(n):
        print(f"shard {i}/{n} built alone: {build(root, work / f'alone-{i}-of-{n}', ['--shard', f'{i}/{n}'])}")
    return [(f"shard set (--shard-set {n})", [work / f"set-{n}" / f"shard-{i}-of-{n}" for i in range(n)]),
            (f"built one by one (--shard I/{n})", [work / f"alone-{i}-of-{n}" for i in range(n)])]


def impact_scale(index) -> float:
    return index.manifest["components"]["deepimpact"]["parameters"]["quantization"]["scale"]


class Comparison:
    """The whole index's deepimpact and deepimpact+bm25 answers on the test topics, and a layout of shards compared
    with them (merged by score, then id, and fused with the whole index's settings, as the sharded front does)."""

    def __init__(self, collection: str, whole: Path, depth: int):
        from weir.core.trec import read_qrels
        from weir.indexer.collections import Collection
        from weir.indexer.index_dir import Index
        from weir.ranker.options import PipelineOptions
        from weir.ranker.retrievers.bm25 import BM25
        from weir.ranker.retrievers.hybrid import impact_fusion_settings
        from weir.ranker.retrievers.learned_sparse import ImpactRetriever

        root = COLLECTIONS / collection
        self.topics = Collection.open(root).topics("test")
        self.qrels = read_qrels(root / "qrels.txt")
        self.texts = [q.text for q in self.topics]
        self.depth = depth
        self.whole = Index(whole)
        self.settings = impact_fusion_settings(self.whole, PipelineOptions().deepimpact_bm25)
        self.impact = ImpactRetriever(self.whole).search(self.texts, depth)
        self.fusion = self.fused(self.impact, BM25(self.whole).search(self.texts, depth))

    def run_of(self, lists, name: str):
        from weir.core.types import Hit, Run

        return Run({q.id: [Hit(d, s, r, {name: s}) for r, (d, s) in enumerate(hits, start=1)]
                    for q, hits in zip(self.topics, lists)})

    def merged(self, per_shard) -> list[list[tuple[str, float]]]:
        return [sorted((h for found in per_shard for h in found[row]), key=lambda h: (-h[1], h[0]))[:self.depth]
                for row in range(len(self.texts))]

    def fused(self, impact, bm25):
        from weir.ranker.retrievers.hybrid import fuse_runs

        return fuse_runs([self.run_of(impact, "deepimpact"), self.run_of(bm25, "bm25")],
                         method=self.settings["method"], weights=self.settings["weights"], depth=10,
                         name="deepimpact+bm25")

    def ndcg(self, run) -> float:
        from weir.evaluation.measures import evaluate

        return evaluate(run, self.qrels, ["nDCG@10"])["nDCG@10"]

    def print_header(self) -> None:
        print(f"\n{len(self.texts)} test topics; deepimpact+bm25 fused by {self.settings['method']} "
              f"{self.settings['weights']}\n")
        print("| layout | impact scales | deepimpact: top 10 = whole (ids, scores / ids in order) | nDCG@10 | "
              "deepimpact+bm25: top 10 = whole | nDCG@10 |")
        print("|---|---|---|---:|---|---:|")
        print(f"| whole index | {impact_scale(self.whole):.4f} | - | "
              f"{self.ndcg(self.run_of([h[:10] for h in self.impact], 'd')):.4f} | - | {self.ndcg(self.fusion):.4f} |")

    def print_layout(self, label: str, parts: list[Path]) -> None:
        from weir.indexer.index_dir import Index
        from weir.indexer.shards import global_statistics
        from weir.ranker.retrievers.bm25 import BM25
        from weir.ranker.retrievers.learned_sparse import ImpactRetriever

        shards = [Index(p) for p in parts]
        impact = self.merged([ImpactRetriever(s).search(self.texts, self.depth) for s in shards])
        bm25 = self.merged([BM25(s, statistics=t).search(self.texts, self.depth)
                            for s, t in zip(shards, global_statistics(parts))])
        fusion = self.fused(impact, bm25)
        same = sum(a[:10] == b[:10] for a, b in zip(impact, self.impact))
        order = sum([d for d, _ in a[:10]] == [d for d, _ in b[:10]] for a, b in zip(impact, self.impact))
        same_f = sum([(h.doc_id, h.score) for h in fusion[q.id]] == [(h.doc_id, h.score) for h in self.fusion[q.id]]
                     for q in self.topics)
        order_f = sum([h.doc_id for h in fusion[q.id]] == [h.doc_id for h in self.fusion[q.id]] for q in self.topics)
        print(f"| {label} | {', '.join(f'{impact_scale(s):.4f}' for s in shards)} | {same} / {order} | "
              f"{self.ndcg(self.run_of([h[:10] for h in impact], 'd')):.4f} | {same_f} / {order_f} | "
              f"{self.ndcg(fusion):.4f} |")


def main() -> int:
    args = parse_args()
    layouts = build_layouts(args)
    comparison = Comparison(args.collection, Path(args.work) / "whole", args.depth)
    comparison.print_header()
    for label, parts in layouts:
        comparison.print_layout(label, parts)
    return 0


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"\n({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    sys.exit(code)
