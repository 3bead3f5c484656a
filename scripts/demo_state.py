"""What the demo can reuse, and what an index cost: small checks `scripts/demo.sh` asks between its steps.

- ``index PATH COMPONENTS PRUNE``: exit 0 when PATH is an index with exactly these components, pruned as PRUNE says
  (``estimator:fraction``, or ``none``), whose files match their manifest checksums; 1 otherwise.
- ``cost PATH``: print what each component of the index cost to build, and its size.
- ``experiment DIR INDEX PIPELINES``: exit 0 when DIR holds a `weir experiment` of these pipelines over this very
  index (its manifest's sha256); 1 otherwise.
- ``calibrated PATH PIPELINES``: exit 0 when the index at PATH holds a calibration of each pipeline (comma-separated)
  that calibrates it with the default options; 1 otherwise.
- ``best-reranking DIR``: print the pipeline (without bracketed options) of the experiment's reranking row with the
  best nDCG@10.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def index_is(path: str, components: str, prune: str) -> bool:
    from weir.indexer.index_dir import verify
    from weir.core.types import InputError

    try:
        manifest = verify(path)
    except InputError:
        return False
    if sorted(manifest["components"]) != sorted(c for c in components.split(",") if c):
        return False
    pruning = manifest.get("pruning")
    if prune == "none":
        return pruning is None
    estimator, _, fraction = prune.rpartition(":")
    return bool(pruning) and pruning["estimator"] == estimator and pruning.get("fraction") == float(fraction)


def cost(path: str) -> None:
    manifest = json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))
    counts = manifest["counts"]
    pruning = manifest.get("pruning")
    if pruning:
        scoring = pruning["scoring"]
        how = "scores from the cache" if scoring["cached"] else f"{scoring['passages_per_second']:,.0f} passages/s"
        print(f"   quality scoring ({pruning['estimator']}): {pruning['documents_scored']:,} passages in "
              f"{scoring['seconds']:.1f} s ({how}); {counts['pruned']:,} pruned ({pruning.get('fraction', 0):.0%}), "
              f"{counts['documents']:,} indexed")
    steps = {s["step"]: s["seconds"] for s in manifest["timings"].get("steps", [])}
    if "document pass" in steps:
        passes = manifest.get("document_pass", {}).get("passes", [])
        what = "; ".join(f"{'+'.join(p['consumers'])} reading {p['backbone']['input']}" for p in passes)
        print(f"   document pass {steps['document pass']:.1f} s, {len(passes)} backbone pass{'es' if len(passes) > 1 else ''}"
              f" over the passages: {what}")
    print(f"   {'component':<12}{'build s':>9}{'MiB':>8}  documents")
    for name, c in manifest["components"].items():
        print(f"   {name:<12}{c['build_seconds']:>9.1f}{c['bytes'] / 2**20:>8.1f}  "
              f"{c.get('documents', c.get('passages', ''))}")
    print(f"   total {manifest['timings']['total_seconds']:.1f} s (the components write what the document pass computed)")


def experiment_is(directory: str, index: str, pipelines: str) -> bool:
    from weir.core.provenance import sha256_file

    results = Path(directory) / "results.json"
    if not results.is_file():
        return False
    record = json.loads(results.read_text(encoding="utf-8"))
    indexes = list(record.get("indexes", {}).values())
    wanted = [p for p in pipelines.split(",") if p]
    return (len(indexes) == 1 and indexes[0]["manifest_sha256"] == sha256_file(Path(index) / "manifest.json")
            and [p["label"] for p in record["config"]["pipelines"]] == wanted)


def best_reranking(directory: str) -> None:
    record = json.loads((Path(directory) / "results.json").read_text(encoding="utf-8"))
    reranking = [s for s in record["systems"] if ">>" in s.get("pipeline", "")]
    best = max(reranking, key=lambda s: s["means"]["nDCG@10"])
    print(best["pipeline"])


def calibrated(path: str, pipelines: str) -> bool:
    from weir.indexer.index_dir import Index
    from weir.ranker import registry

    index = Index(path)
    return all(registry.calibration(spec, index) is not None for spec in pipelines.split(","))


def main() -> int:
    command, *args = sys.argv[1:]
    if command == "index":
        return 0 if index_is(*args) else 1
    if command == "cost":
        cost(*args)
        return 0
    if command == "experiment":
        return 0 if experiment_is(*args) else 1
    if command == "calibrated":
        return 0 if calibrated(*args) else 1
    if command == "best-reranking":
        best_reranking(*args)
        return 0
    raise SystemExit(f"demo_state: unknown command {command!r}")


if __name__ == "__main__":
    sys.exit(main())
