"""The quality steps of the transfer protocol (research/transfer.py): the pruning estimators judged on collections they
never saw (issue 34).

- ``quality-loco``: for each collection X, ``learned`` and ``surface`` trained (`weir train quality`) on the training
  judgments of the other sources (``--quality-sources``; ``--quality-args`` are `weir train quality` options of the
  variant, ``--tag`` names it), then `weir quality sweep` of X's evaluation topics with those two models and
  ``random`` pruning (the mean of five draws) 10%, 25% and 40% (``--quality-fractions``) of X, BM25 and hybrid
  (``--quality-with bm25``: BM25 alone). The unpruned and random indexes of X are shared by every variant
  (``quality-indexes/X``); each variant's own indexes are named after its tag.
- ``quality-final``: both estimators trained on every source (the shipped defaults, ``--out-dir``/quality-learned
  and quality-surface), and their sweep of SciFact test: the in-domain figure.
- ``quality-table``: per variant, estimator, collection left out, fraction and pipeline: the share of random pruning's
  loss the estimator recovers, ``(pruned - random) / (unpruned - random)`` of the mean nDCG@10, and the paired t-test
  against random.
"""

from __future__ import annotations

import json
from pathlib import Path

from transfer_common import COLLECTIONS, SOURCES, WEIR, run, source

ESTIMATORS = ("learned", "surface")
RANDOM_SEEDS = 5  # random pruning: each query's mean over five draws (one draw of ADI's 82 documents is luck)


def quality_train(estimator: str, out: Path, names: list[str], args) -> Path:
    """``estimator`` trained on these sources (kept when already there)."""
    if (out / "card.json").is_file():
        return out
    cmd = WEIR + ["train", "quality", "--estimator", estimator, "--out", str(out)]
    for n in names:
        cmd += ["--train", source(n)]
    run(cmd + args.quality_args.split(), out.parent / f"train-{estimator}.log")
    return out


def quality_sweep(held: str, models: dict[str, Path], work: Path, args, tag: str) -> dict:
    """`weir quality sweep` of ``held``'s evaluation topics with these models (labelled ``ESTIMATOR-TAG``, which names
    their indexes in the shared directory) and random pruning; its record."""
    c = COLLECTIONS / held
    shared = args.work / "quality-indexes" / held  # unpruned and random: the same for every variant
    shared.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "indexes").exists():
        (work / "indexes").symlink_to(shared.resolve(), target_is_directory=True)
    with_ = args.quality_with.split(",")
    pipelines = ["bm25"] + (["hybrid"] if "dense" in with_ else [])
    estimators = [f"{label}-{tag}={path}" for label, path in models.items()] + ["random"]
    if not (work / "sweep.json").is_file():
        run(WEIR + ["quality", "sweep", "--collection", str(c), "--topics", str(c / "queries.tsv"), "--qrels",
                    str(c / "qrels.txt"), "--out", str(work), "--estimators", ",".join(estimators), "--fractions",
                    args.quality_fractions, "--with", ",".join(with_), "--pipelines", ",".join(pipelines),
                    "--min-rel", str(SOURCES[held][2]), "--skip-empty", "--random-seeds", str(RANDOM_SEEDS)]
            + SOURCES[held][3], work / "sweep.log")
    return json.loads((work / "sweep.json").read_text())


def quality_loco(args) -> None:
    for held in args.collections:
        work = args.work / f"quality-{args.tag}" / held
        others = [n for n in args.quality_sources if n != held]
        models = {e: quality_train(e, work / e, others, args) for e in ESTIMATORS}
        quality_sweep(held, models, work / "sweep", args, args.tag)


def quality_final(args) -> None:
    out = Path(args.out_dir)
    models = {e: quality_train(e, out / f"quality-{e}", list(args.quality_sources), args) for e in ESTIMATORS}
    work = args.work / f"quality-final-{args.tag}" / "beir-scifact" / "sweep"
    quality_sweep("beir-scifact", models, work, args, f"final-{args.tag}")  # not the left-out models' indexes


def recovered(record: dict) -> list[dict]:
    """Per trained estimator, fraction and pipeline: the means, the share of random's loss recovered, p vs random."""
    rows = []
    for row in record["rows"][1:]:
        if row.get("spec") == "random" or "random_mean" not in next(iter(row["stats"].values())):
            continue  # random itself, or a sweep still running (its random rows not there yet)
        for pipeline, s in row["stats"].items():
            unpruned = s["mean"] - s["delta"]
            loss = unpruned - s["random_mean"]
            rows.append({"estimator": row["estimator"], "fraction": row["fraction"], "pipeline": pipeline,
                         "unpruned": unpruned, "random": s["random_mean"], "mean": s["mean"],
                         "share": (s["mean"] - s["random_mean"]) / loss if loss > 0 else float("nan"),
                         "p_random": s["p_random"], "beats_random": s["beats_random"]})
    return rows


def _summary(by_variant: dict[tuple[str, str], list[dict]]) -> None:
    """Per variant and estimator, over the collections left out: the mean share recovered per fraction (BM25 and hybrid
    together), and at 25% how many collections reach half of random's loss and how many beat random (p < 0.05)."""
    print("\n| variant | estimator | collections | mean share 10% | 25% | 40% | 25%: share >= 50% (bm25 / hybrid) | "
          "25%: better than random, p < 0.05 (bm25 / hybrid) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (variant, estimator), rows in by_variant.items():
        share = {f: sum(r["share"] for r in rows if r["fraction"] == f) / max(1, sum(r["fraction"] == f for r in rows))
                 for f in (0.1, 0.25, 0.4)}
        at = [r for r in rows if r["fraction"] == 0.25]
        half = " / ".join(str(sum(r["share"] >= 0.5 for r in at if r["pipeline"] == p)) for p in ("bm25", "hybrid"))
        wins = " / ".join(str(sum(r["beats_random"] for r in at if r["pipeline"] == p)) for p in ("bm25", "hybrid"))
        print(f"| {variant} | {estimator} | {len({r['held'] for r in rows})} | {share[0.1]:.0%} | {share[0.25]:.0%} | "
              f"{share[0.4]:.0%} | {half} | {wins} |")


def quality_table(args) -> None:
    by_variant: dict[tuple[str, str], list[dict]] = {}
    print("| variant | collection | estimator | pipeline | unpruned | " + " | ".join(
        f"{f:.0%}: random / pruned (share, p)" for f in (0.1, 0.25, 0.4)) + " |")
    print("|---|---|---|---|---:|" + "---:|" * 3)
    for variant in sorted(p for p in args.work.glob("quality-*") if p.is_dir() and p.name != "quality-indexes"):
        for held in sorted(variant.iterdir()):
            path = held / "sweep" / "sweep.json"
            if not path.is_file():
                continue
            rows = recovered(json.loads(path.read_text()))
            for r in rows:
                estimator = r["estimator"].rsplit("-", 1)[0]  # learned-TAG: the estimator, whatever the variant
                by_variant.setdefault((variant.name[len("quality-"):], estimator), []).append({**r, "held": held.name})
            for (estimator, pipeline) in dict.fromkeys((r["estimator"], r["pipeline"]) for r in rows):
                cells = {r["fraction"]: r for r in rows if (r["estimator"], r["pipeline"]) == (estimator, pipeline)}
                text = []
                for f in (0.1, 0.25, 0.4):
                    r = cells.get(f)
                    text.append("-" if r is None else f"{r['random']:.4f} / {r['mean']:.4f} ({r['share']:.0%}, "
                                f"p {r['p_random']:.3f}){' ↑' if r['beats_random'] else ''}")
                first = next(iter(cells.values()))
                print(f"| {variant.name[len('quality-'):]} | {held.name} | {estimator} | {pipeline} | "
                      f"{first['unpruned']:.4f} | " + " | ".join(text) + " |")
    _summary(by_variant)
