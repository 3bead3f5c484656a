"""What every step of the transfer protocol (research/transfer.py) shares: the collections and the source each trains
on, a `weir` step run with its log, a head trained on some sources, a collection indexed and measured with heads,
and the leave-one-out head of a variant."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's packages, however the script is started

COLLECTIONS = Path(os.environ.get("WEIR_COLLECTIONS", ROOT.parent / "shared" / "collections"))
SOURCES = {  # collection -> (training topics, training qrels, grade counted relevant, evaluation options)
    "beir-scifact": ("queries.train.tsv", "qrels.train.txt", 1, []),
    "beir-arguana": ("queries.train-genq.tsv", "qrels.train-genq.txt", 1, ["--remove-identical"]),
    "msmarco-passage-trec-dl-pool": ("queries.tsv", "qrels.txt", 2, ["--min-rel", "2"]),
    "cacm": ("queries.tsv", "qrels.txt", 1, []),
    "cranfield": ("queries.tsv", "qrels.txt", 1, []),
    "adi": ("queries.tsv", "qrels.txt", 1, []),
}
PIPELINES = "bm25,deepct,deepimpact,deepimpact+bm25"
WEIR = [sys.executable, "-m", "weir.cli"]


def run(cmd: list[str], log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    print("$ weir " + " ".join(cmd[3:]), flush=True)
    with open(log, "a", encoding="utf-8") as f:
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)


def source(name: str) -> str:
    topics, qrels, min_rel, _ = SOURCES[name]
    c = COLLECTIONS / name
    return f"{c}:{c / topics}:{c / qrels}:1:{min_rel}"


def train(kind: str, out: Path, names: list[str], args, extra: list[str] = (), log_dir: Path | None = None) -> Path:
    """A head trained on these sources (kept when already there); its log beside it, or under ``log_dir``."""
    if (out / "card.json").is_file():
        return out
    cmd = WEIR + ["train", kind, "--out", str(out), "--set", f"shape={args.shape}", "--epochs", str(args.epochs)]
    for n in names:
        cmd += ["--train", source(n)]
        if args.self_supervise_training:  # the training collections' own pseudo-queries, never the held-out one's
            cmd += ["--self-supervised", str(COLLECTIONS / n)]
    run(cmd + list(extra), (log_dir or out.parent) / f"train-{kind}.log")
    return out


def evaluate(name: str, models: dict[str, Path], work: Path) -> dict:
    """Index ``name`` with these heads (deepct, deepimpact, or both) and run the experiment of the pipelines that use
    them; the experiment's record."""
    index, exp = work / "index", work / "experiment"
    c = COLLECTIONS / name
    kinds = [k for k in ("deepct", "deepimpact") if k in models]
    if not (index / "manifest.json").is_file():
        heads = [a for k in kinds for a in (f"--{k}-model", str(models[k]))]
        run(WEIR + ["index", "build", "--collection", str(c), "--out", str(index), "--with", ",".join(["bm25", *kinds]),
                    *heads, "--overwrite", "--skip-empty"], work / "build.log")
    pipelines = ",".join(p for p in PIPELINES.split(",") if p.split("+")[0] in ("bm25", *kinds))
    if not (exp / "results.json").is_file():
        run(WEIR + ["experiment", "--index", str(index), "--topics", str(c / "queries.tsv"), "--qrels",
                    str(c / "qrels.txt"), "--pipelines", pipelines, "--measures", "nDCG@10,R@100", "--out", str(exp)]
            + SOURCES[name][3], work / "experiment.log")
    return json.loads((exp / "results.json").read_text())


def loco_head(held: str, kind: str, args) -> Path:
    """The leave-one-out head of this kind for ``held``: the variant's own, or the one it took from ``--reuse``."""
    own = args.work / f"loco-{args.tag}" / held / kind
    return own if (own / "card.json").is_file() or not args.reuse else args.work / f"loco-{args.reuse}" / held / kind
