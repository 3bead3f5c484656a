"""A distributed index build (``weir index build --ray``) against the single-process build of the same collection.

``compare``: the runs of both indexes for every sparse pipeline over the collection's topics (ids, ranks and scores,
top ``--k``), nDCG@10 of each, and for ``dense`` nDCG@10 of both and the largest difference between their stored
vectors. ``scaling``: builds the first ``--documents`` documents of a collection with 1 and then 2 local workers
(alternating rounds) and prints each step's throughput from the manifests (passages per second of wall time and per
worker-second), plus the serial remainder (planning, Lucene, faiss) in the driver.

Usage: python bench/distributed_build.py compare --collection DIR --single INDEX --distributed INDEX [--topics F
       --qrels F] [--k 1000]
       python bench/distributed_build.py scaling --collection DIR [--documents 2048] [--rounds 1] [--with ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def compare_indexes(single: Path, distributed: Path, queries, qrels, k: int = 1000) -> dict:
    """Per pipeline both indexes have: identical runs (ids, order, scores) and nDCG@10 of each."""
    import numpy as np

    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.evaluation.measures import evaluate

    a, b = Index(single), Index(distributed)
    report = {}
    for name in ("bm25", "deepct", "deepimpact", "dense"):
        if name not in a.manifest["components"] or name not in b.manifest["components"]:
            continue
        ra, rb = registry.build(name, a)(queries, k=k), registry.build(name, b)(queries, k=k)
        da, db = ra.to_dict(), rb.to_dict()
        same = sum(1 for q in da if [(h.doc_id, h.score) for h in ra[q]] == [(h.doc_id, h.score) for h in rb[q]])
        entry = {"queries": len(da), "identical_queries": same,
                 "ndcg@10": [evaluate(da, qrels, ["nDCG@10"])["nDCG@10"], evaluate(db, qrels, ["nDCG@10"])["nDCG@10"]]}
        if name == "dense":
            va = np.load(a.component_path("dense") / "vectors.npy")
            vb = np.load(b.component_path("dense") / "vectors.npy")
            entry["vectors_max_abs_difference"] = float(np.abs(va.astype(np.float32) - vb.astype(np.float32)).max())
        report[name] = entry
    return report


def cmd_compare(args) -> None:
    from weir.indexer.collections import Collection
    from weir.core.trec import read_qrels, read_topics

    coll = Collection.open(args.collection)
    queries = read_topics(args.topics) if args.topics else coll.topics()
    qrels = read_qrels(args.qrels or coll.qrels_path())
    report = compare_indexes(Path(args.single), Path(args.distributed), queries, qrels, args.k)
    for name, e in report.items():
        extra = f", vectors differ by at most {e['vectors_max_abs_difference']:.3g}" if "vectors_max_abs_difference" in e else ""
        print(f"{name:11s} identical top-{args.k} for {e['identical_queries']}/{e['queries']} queries; nDCG@10 single "
              f"{e['ndcg@10'][0]:.4f}, distributed {e['ndcg@10'][1]:.4f}{extra}")


def _loopback(cmd: list[str]) -> list[str]:
    """Run in a loopback-only network namespace where one can be made (root and unshare): Ray binds 127.0.0.1."""
    import shlex
    import shutil

    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode == 0:
        return ["unshare", "-n", "bash", "-c", "ip link set lo up && exec " + shlex.join(cmd)]
    return cmd


def cmd_scaling(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        coll = tmp / "coll"
        coll.mkdir()
        with open(Path(args.collection) / "corpus.jsonl", encoding="utf-8") as f, \
                open(coll / "corpus.jsonl", "w", encoding="utf-8") as out:
            for i, line in enumerate(f):
                if i == args.documents:
                    break
                out.write(line)
        results: dict[int, list[dict]] = {0: [], 1: [], 2: []}
        for r in range(args.rounds):
            for workers in (0, 1, 2):  # 0: the single-process build, no Ray
                out = tmp / f"w{workers}-{r}"
                cmd = [sys.executable, "-m", "weir.cli", "index", "build", "--collection", str(coll), "--out",
                       str(out), "--with", args.with_, "--skip-empty"]
                if workers:
                    cmd += ["--ray", "--ray-workers", str(workers)]
                env = {**os.environ, "WEIR_CACHE": str(tmp / "no-cache")}  # every build encodes
                subprocess.run(_loopback(cmd), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               cwd=ROOT, env=env)
                m = json.loads((out / "manifest.json").read_text())
                results[workers].append(m)
                print(f"round {r} workers {workers}: total {m['timings']['total_seconds']:.1f}s", flush=True)
        single = results.pop(0)
        n = single[0]["counts"]["documents"]
        parts = {c: statistics.median(m["components"][c]["build_seconds"] for m in single)
                 for c in single[0]["components"]}
        total = statistics.median(m["timings"]["total_seconds"] for m in single)
        print(f"single process (2 torch threads): {n} passages, whole build {total:.1f}s; "
              + ", ".join(f"{c} {s:.1f}s" for c, s in parts.items()))
        for workers, ms in results.items():
            d = [m["distributed"] for m in ms]
            n = ms[0]["counts"]["documents"]
            ray_s = statistics.median(x["ray_seconds"] for x in d)
            total = statistics.median(m["timings"]["total_seconds"] for m in ms)
            steps = ", ".join(f"{s} {statistics.median(x['steps'][s]['passages_per_worker_second'] for x in d):.1f}/s"
                              for s in ("statistics", "term_weighting", "dense") if s in d[0]["steps"])
            driver = statistics.median(m["timings"]["total_seconds"] - m["distributed"]["ray_seconds"] for m in ms)
            print(f"{workers} worker(s) x {d[0]['cpus_per_worker']:g} CPU: {n} passages, Ray part {ray_s:.1f}s "
                  f"({n / ray_s:.1f} passages/s, all steps), whole build {total:.1f}s, of which the driver "
                  f"{driver:.1f}s; per worker-second: {steps}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--collection", required=True)
    c.add_argument("--single", required=True)
    c.add_argument("--distributed", required=True)
    c.add_argument("--topics")
    c.add_argument("--qrels")
    c.add_argument("--k", type=int, default=1000)
    c.set_defaults(func=cmd_compare)
    s = sub.add_parser("scaling")
    s.add_argument("--collection", required=True)
    s.add_argument("--documents", type=int, default=2048)
    s.add_argument("--rounds", type=int, default=1)
    s.add_argument("--with", dest="with_", default="deepct,deepimpact,dense")
    s.set_defaults(func=cmd_scaling)
    args = p.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
