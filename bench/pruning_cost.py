"""What static pruning saves at build time: the expensive build steps (dense encoding, learned term weighting) of an
unpruned index against the same steps of an index pruned by a quality estimator, scoring included.

Each round builds both indexes, alternating which goes first, each as its own ``weir index build`` process with an
empty ``$WEIR_CACHE`` (no cached term vectors or quality scores: every build encodes and scores from scratch). From
each manifest: the seconds of every component and of quality scoring. Printed per round and as medians: the steps'
seconds, pruned / unpruned (scoring included), index sizes, and the passages per second of the estimator, the dense
encoder and the term weighter.

Usage: python bench/pruning_cost.py [--collection beir-scifact] [--with dense,deepimpact] [--prune learned:0.25]
       [--rounds 2]
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

from _common import COLLECTIONS, ROOT

EXPENSIVE = ("dense", "deepct", "deepimpact")  # the steps pruning is for (BM25 indexing is seconds)


def build(collection: Path, out: Path, components: str, prune: str | None, cache: Path) -> dict:
    cmd = [sys.executable, "-m", "weir.cli", "index", "build", "--collection", str(collection), "--out", str(out),
           "--with", components, "--overwrite"] + (["--prune", prune] if prune else [])
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "WEIR_CACHE": str(cache)},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads((out / "manifest.json").read_text())


def cost(manifest: dict) -> dict:
    components = manifest["components"]
    steps = {n: c["build_seconds"] for n, c in components.items() if n in EXPENSIVE}
    pruning = manifest.get("pruning")
    quality = pruning["scoring"]["seconds"] if pruning else 0.0
    return {"steps": steps, "quality": quality, "total": sum(steps.values()) + quality,
            "documents": manifest["counts"]["documents"], "bytes": sum(c["bytes"] for c in components.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collection", default="beir-scifact")
    ap.add_argument("--with", dest="with_", default="dense,deepimpact")
    ap.add_argument("--prune", default="learned:0.25")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    collection = COLLECTIONS / args.collection
    results: dict[str, list[dict]] = {"unpruned": [], "pruned": []}
    with tempfile.TemporaryDirectory(prefix="weir-pruning-cost-") as tmp:
        tmp = Path(tmp)
        for r in range(args.rounds):
            order = ["unpruned", "pruned"] if r % 2 == 0 else ["pruned", "unpruned"]
            for name in order:
                cache = tmp / f"cache-{r}-{name}"  # empty: nothing is read from an earlier build
                manifest = build(collection, tmp / name, args.with_, args.prune if name == "pruned" else None, cache)
                results[name].append(cost(manifest))
                c = results[name][-1]
                print(f"round {r + 1} {name:>8}: {c['documents']:,} documents, "
                      + ", ".join(f"{n} {s:.1f}s" for n, s in c["steps"].items())
                      + f", quality scoring {c['quality']:.1f}s, total {c['total']:.1f}s", flush=True)
    ratios = [p["total"] / u["total"] for p, u in zip(results["pruned"], results["unpruned"])]
    print(f"\n## {args.collection}: --with {args.with_}, --prune {args.prune}, {args.rounds} rounds (alternating)\n")
    print("| | documents | " + " | ".join(f"{n} s" for n in results["unpruned"][0]["steps"]) +
          " | quality scoring s | total s | index MiB |")
    print("|---|---:|" + "---:|" * (len(results["unpruned"][0]["steps"]) + 3))
    for name, rows in results.items():
        steps = " | ".join(f"{statistics.median(r['steps'][n] for r in rows):.1f}" for n in rows[0]["steps"])
        print(f"| {name} | {rows[0]['documents']:,} | {steps} | {statistics.median(r['quality'] for r in rows):.1f} | "
              f"{statistics.median(r['total'] for r in rows):.1f} | {rows[0]['bytes'] / 2**20:.1f} |")
    print(f"\npruned / unpruned, scoring included: {statistics.median(ratios):.3f} (per round: "
          f"{', '.join(f'{x:.3f}' for x in ratios)})")
    u = results["unpruned"]
    n = u[0]["documents"]
    rates = {step: n / statistics.median(r["steps"][step] for r in u) for step in u[0]["steps"]}
    p = results["pruned"]
    scored = n  # the estimator scores every document, the pruned ones included
    rates["quality estimator"] = scored / statistics.median(r["quality"] for r in p)
    print("passages per second (unpruned builds; the estimator over the whole corpus): "
          + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items()))


if __name__ == "__main__":
    main()
