"""Same behaviour before and after a change: write the runs of a fixed set of pipelines, then compare two such sets.

    python scripts/behaviour_check.py runs --out runs/behaviour/after [--indexes indexes/behaviour] [--weir CMD]
    python scripts/behaviour_check.py compare runs/behaviour/before runs/behaviour/after

``runs`` drives weir only through its command line (``weir index build``, ``weir tune fusion``, ``weir run``), so the
same script measures any two versions of the code: run it once on each (``--weir`` names the command, default the
``weir`` beside this Python) and ``compare`` the two output directories. It writes:

- SciFact test (300 queries, k 1000; k 100 for the reranked one): ``bm25``, ``dense``, ``hybrid`` (as tuned on
  SciFact train by ``weir tune fusion``), ``deepct``, ``deepimpact``, ``deepimpact+bm25`` and ``hybrid>>ltr``;
- TREC DL 2019 (43 queries): the full-corpus BM25 top 100 re-ranked by ``attention`` and by ``ltr``;
- ``fusion.json``: what ``weir tune fusion`` chose.

The indexes (SciFact: bm25, dense, deepct, deepimpact; the DL pool: bm25) are built under ``--indexes`` when missing
and reused otherwise, so that a second version searches the very same index files. Versions whose search takes
``--threads`` run with ``--threads 1``: Lucene reached through pyjnius from several threads at once returned another
query's hits there (seen on SciFact ``deepct``), and a comparison of two versions must not measure that race. ``compare`` checks every run
file for the same queries, the same documents at every rank and scores within ``--tolerance`` (default 1e-6), and
the tuned fusion for the same choice; it prints one line per file and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS = Path(os.environ.get("WEIR_COLLECTIONS", ROOT.parent / "shared" / "collections"))
SCIFACT = COLLECTIONS / "beir-scifact"
DL = COLLECTIONS / "msmarco-passage-trec-dl-pool"

SCIFACT_RUNS = {  # run name -> (pipeline, k)
    "bm25": ("bm25", 1000), "dense": ("dense", 1000), "hybrid": ("hybrid", 1000), "deepct": ("deepct", 1000),
    "deepimpact": ("deepimpact", 1000), "deepimpact+bm25": ("deepimpact+bm25", 1000),
    "hybrid>>ltr": ("hybrid>>ltr", 100),
}
DL_RERANKERS = ("attention", "ltr")


def _weir(command: list[str], *args: str) -> float:
    start = time.perf_counter()
    print("+ weir " + " ".join(args), file=sys.stderr, flush=True)
    subprocess.run(command + list(args), check=True)
    return time.perf_counter() - start


def write_runs(out: Path, indexes: Path, command: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    run_help = subprocess.run(command + ["run", "--help"], capture_output=True, text=True, check=True).stdout
    one_thread = ["--threads", "1"] if "--threads" in run_help else []
    scifact, dl = indexes / "scifact", indexes / "dl-pool"
    if not (scifact / "manifest.json").is_file():
        _weir(command, "index", "build", "--collection", str(SCIFACT), "--out", str(scifact),
              "--with", "bm25,dense,deepct,deepimpact")
    if not (dl / "manifest.json").is_file():
        _weir(command, "index", "build", "--collection", str(DL), "--out", str(dl))
    _weir(command, "tune", "fusion", "--index", str(scifact), "--topics", str(SCIFACT / "queries.train.tsv"),
          "--qrels", str(SCIFACT / "qrels.train.txt"), *one_thread)
    tuned = json.loads((scifact / "tuning" / "fusion.json").read_text())
    (out / "fusion.json").write_text(json.dumps({k: tuned[k] for k in ("best", "best_by_method", "single_stages")},
                                                indent=1) + "\n")
    seconds = {}
    for name, (pipeline, k) in SCIFACT_RUNS.items():
        seconds[f"scifact.{name}"] = _weir(
            command, "run", "--index", str(scifact), "--topics", str(SCIFACT / "queries.tsv"), "--pipeline", pipeline,
            "-k", str(k), *one_thread, "--out", str(out / f"scifact.{name}.trec"))
    for reranker in DL_RERANKERS:
        seconds[f"dl19.{reranker}"] = _weir(
            command, "run", "--index", str(dl), "--topics", str(DL / "queries.tsv"), "--candidates",
            str(DL / "runs" / "BM25_dl19.top100.trec"), "--pipeline", reranker, "-k", "100", *one_thread,
            "--out", str(out / f"dl19.{reranker}.trec"))
    (out / "seconds.json").write_text(json.dumps(seconds, indent=1) + "\n")


def _read(path: Path) -> dict[str, list[tuple[str, float]]]:
    run: dict[str, list[tuple[str, float]]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            qid, _, doc, rank, score, _ = line.split()
            run.setdefault(qid, []).append((doc, float(score)))
    return run


def compare_runs(a: Path, b: Path, tolerance: float) -> bool:
    same = True
    for path in sorted(a.glob("*.trec")):
        other = b / path.name
        if not other.is_file():
            print(f"{path.name}: missing in {b}")
            same = False
            continue
        x, y = _read(path), _read(other)
        rankings = sum(1 for q in x if [d for d, _ in x[q]] == [d for d, _ in y.get(q, [])])
        diff = max((abs(s - t) for q in x if q in y for (_, s), (_, t) in zip(x[q], y[q])), default=0.0)
        ok = set(x) == set(y) and rankings == len(x) and diff <= tolerance
        hits = sum(len(h) for h in x.values())
        print(f"{path.name:32} {'same' if ok else 'DIFFERENT'}: {len(x)} queries, {hits} hits, "
              f"{rankings}/{len(x)} rankings identical, max |score difference| {diff:.1e}")
        same &= ok
    fa, fb = a / "fusion.json", b / "fusion.json"
    if fa.is_file():
        ok = fb.is_file() and json.loads(fa.read_text()) == json.loads(fb.read_text())
        print(f"{'fusion.json':32} {'same' if ok else 'DIFFERENT'}: {json.loads(fa.read_text())['best']}")
        same &= ok
    return same


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("runs", help="write the runs of this version")
    r.add_argument("--out", required=True, type=Path, help="directory for the run files")
    r.add_argument("--indexes", type=Path, default=ROOT / "indexes" / "behaviour",
                   help="where the indexes are built once and reused (default indexes/behaviour)")
    r.add_argument("--weir", default=str(Path(sys.executable).parent / "weir"),
                   help="the weir command to run (default: the one beside this Python)")
    c = sub.add_parser("compare", help="compare two directories of runs")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--tolerance", type=float, default=1e-6)
    args = p.parse_args(argv)
    if args.what == "runs":
        write_runs(args.out, args.indexes, shlex.split(args.weir))
        return 0
    return 0 if compare_runs(args.a, args.b, args.tolerance) else 1


if __name__ == "__main__":
    sys.exit(main())
