"""Issue 53's calibration protocol: P(relevant) fitted on SciFact's training queries, judged on five collections'
evaluation topics, and a per-query cutoff against one global raw-score threshold.

Steps (cached under --work, default $WEIR_CACHE/calibration; each skips what it finds there):

- ``runs``: each pipeline's uncalibrated top 20 (scores as computed, pickled) on SciFact train and on each
  collection's evaluation topics, over its index ``WORK/indexes/<collection>`` (bm25, deepct, deepimpact, dense,
  attention; unpruned; built by `weir index build`, Cranfield with --skip-empty);
- ``fit``: `weir tune calibration`'s function on SciFact train (the cached runs), written into the SciFact index;
- ``judge``: that calibration applied to every cached evaluation run (the other collections' scores mapped by
  SciFact's fit, as a user would who calibrated once). Per collection and pipeline: ECE of P(relevant) on the top
  10 (10 equal bins; a reliability plot per collection), and the cutoff at ``min_relevance`` 0.5 on the top 10
  against one global raw-score threshold chosen on the same SciFact training queries to keep the same mean number
  of hits a query: set precision (an empty answer is right where none of the top 10 is relevant) and recall, paired
  t-test on precision; the queries left empty and how many of them have no relevant hit in the top 10. Writes
  ``WORK/judge.json``, ``WORK/judge.md`` and ``WORK/reliability-<collection>.png``.

Relevance: grade >= 1, DL 2019 >= 2 (TREC DL's convention). ArguAna drops hits whose id is the query's. The LTR model
of ``hybrid>>ltr`` was trained on all six collections' training or evaluation judgments (models/ltr/card.json): its
scores on ArguAna, the DL pool, CACM and Cranfield are in-sample for the LTR model, though never for the calibration.

Usage: python research/calibration.py runs|fit|judge [--work DIR] [--pipelines dense,hybrid,...]
       [--train beir-arguana:queries.train-genq.tsv:qrels.train-genq.txt --limit 2000]   # fitted in domain
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COLLECTIONS = Path(os.environ.get("WEIR_COLLECTIONS", ROOT.parent / "shared" / "collections"))
EVALUATED = {  # collection -> grade counted relevant, drop hits whose id is the query's
    "beir-scifact": (1, False), "beir-arguana": (1, True), "msmarco-passage-trec-dl-pool": (2, False),
    "cacm": (1, False), "cranfield": (1, False),
}
PIPELINES = "bm25,dense,hybrid,hybrid>>ltr,bm25>>attention"
TRAIN = ("beir-scifact", "queries.train.tsv", "qrels.train.txt")  # --train: another collection's training split
DEPTH, TOP, CUTOFF = 20, 10, 0.5


def work_dir(args) -> Path:
    from weir.core.runtime import cache_dir

    return Path(args.work) if args.work else Path(cache_dir("calibration"))


def run_path(work: Path, collection: str, split: str, spec: str) -> Path:
    return work / "runs" / collection / f"{split}-{spec.replace('>>', '_')}.pkl"


def cached_run(work: Path, collection: str, split: str, topics_file: str, spec: str, limit: int | None = None):
    """The uncalibrated top DEPTH of ``spec`` on a collection's topics (their first ``limit``; made and pickled
    once)."""
    from weir import Index, pipeline
    from weir.core.trec import read_topics

    path = run_path(work, collection, split, spec)
    if path.is_file():
        return pickle.loads(path.read_bytes())
    topics = read_topics(COLLECTIONS / collection / topics_file)[:limit]
    p = pipeline(spec, Index(work / "indexes" / collection))
    p.calibration = None
    start = time.perf_counter()
    run = p.search(topics, DEPTH, remove_identical=EVALUATED[collection][1])
    print(f"{collection} {split} {spec}: {len(topics)} queries in {time.perf_counter() - start:.1f} s", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(run))
    return run


def train_split(args) -> tuple[str, str, str]:
    return tuple(args.train.split(":")) if args.train else TRAIN


def train_run(args, work: Path, spec: str):
    collection, topics, _ = train_split(args)
    return cached_run(work, collection, "train", topics, spec, args.limit)


def runs(args) -> None:
    work = work_dir(args)
    for spec in args.pipelines.split(","):
        train_run(args, work, spec)
        for collection in EVALUATED:
            cached_run(work, collection, "test", "queries.tsv", spec)


def fit(args) -> None:
    from weir import Index
    from weir.training.calibration import tune_calibration

    work = work_dir(args)
    specs = args.pipelines.split(",")
    collection, topics, qrels = train_split(args)
    c = COLLECTIONS / collection
    data = tune_calibration(Index(work / "indexes" / collection), specs, str(c / topics), str(c / qrels),
                            runs={s: train_run(args, work, s) for s in specs})
    for spec in specs:
        print(spec, json.dumps(data["pipelines"][spec]["fit"]))


def global_threshold(train_run, calibration, topics, qrels) -> tuple[float, float]:
    """The raw score that keeps, on the training queries' top TOP, as many hits a query on average as the calibrated
    cutoff does there; (threshold, that mean)."""
    calibrated = calibration.apply(topics, train_run)
    qids = [q.id for q in topics if q.id in qrels and q.id in train_run]
    kept = np.mean([(calibrated.ranking(q).relevance[:TOP] >= CUTOFF).sum() for q in qids])
    scores = np.sort(np.concatenate([train_run.ranking(q).scores[:TOP] for q in qids]))[::-1]
    n = int(round(kept * len(qids)))
    return (float(scores[n - 1]) if n else float("inf")), float(kept)


def judge_one(run, calibration, topics, qrels, min_rel: int, threshold: float, first=None) -> tuple[dict, list]:
    """One pipeline's row on one collection; ``first``: its first stage's run (a reranked pipeline), whose top 10
    the empty answers are also looked up in."""
    from weir.evaluation.calibration import (expected_calibration_error, judged_hits, mean_recall, reliability,
                                             set_measures)
    from weir.evaluation.significance import paired_test

    calibrated = calibration.apply(topics, run)
    p, y, _ = judged_hits(calibrated, qrels, depth=TOP, min_rel=min_rel)
    qids = [q for q in calibrated if q in qrels]
    top = {q: calibrated.ranking(q).take(slice(TOP)) for q in qids}
    candidates = {q: h.doc_ids() for q, h in top.items()}
    by_cut = {q: h.doc_ids()[:int((h.relevance >= CUTOFF).sum())] for q, h in top.items()}
    by_raw = {q: h.doc_ids()[:int((h.scores >= threshold).sum())] for q, h in top.items()}
    cut, raw = (set_measures(k, qrels, min_rel, candidates) for k in (by_cut, by_raw))
    _, pvalue = paired_test([cut[q]["precision"] for q in qids], [raw[q]["precision"] for q in qids])
    empty = [q for q in qids if not by_cut[q]]
    relevant_top = {q for q in qids if any(qrels[q].get(d, 0) >= min_rel for d in candidates[q])}
    first_top = {q: first.ranking(q).doc_ids()[:TOP] if q in first else [] for q in qids} if first else candidates
    relevant_first = {q for q in qids if any(qrels[q].get(d, 0) >= min_rel for d in first_top[q])}
    bins = reliability(p, y)
    row = {"queries": len(qids), "ece_top10": expected_calibration_error(p, y), "relevant_share_top10": float(y.mean()),
           "mean_p_top10": float(p.mean()),
           "kept_cut": float(np.mean([len(by_cut[q]) for q in qids])),
           "kept_raw": float(np.mean([len(by_raw[q]) for q in qids])),
           "precision_cut": float(np.mean([cut[q]["precision"] for q in qids])),
           "precision_raw": float(np.mean([raw[q]["precision"] for q in qids])),
           "recall_cut": mean_recall(cut), "recall_raw": mean_recall(raw), "p_precision": pvalue,
           "empty": len(empty), "empty_without_relevant_top10": sum(q not in relevant_top for q in empty),
           "empty_without_relevant_first_stage_top10": sum(q not in relevant_first for q in empty)}
    return row, bins


def judge(args) -> None:
    from weir import Index
    from weir.core.trec import read_qrels, read_topics
    from weir.evaluation.report import reliability_plot
    from weir.ranker import registry

    work = work_dir(args)
    specs = args.pipelines.split(",")
    trained, train_topics_file, train_qrels_file = train_split(args)
    index = Index(work / "indexes" / trained)
    calibrations = {s: registry.calibration(s, index) for s in specs}
    missing = [s for s, c in calibrations.items() if c is None]
    if missing:
        raise SystemExit(f"not calibrated over {index.path}: {', '.join(missing)}; run the fit step")
    train_topics = read_topics(COLLECTIONS / trained / train_topics_file)[:args.limit]
    train_qrels = read_qrels(COLLECTIONS / trained / train_qrels_file)
    thresholds = {s: global_threshold(train_run(args, work, s), calibrations[s], train_topics, train_qrels)
                  for s in specs}
    suffix = "" if trained == TRAIN[0] else f"-fit-{trained}"
    table: dict = {"trained_on": trained,
                   "thresholds": {s: {"raw_score": t, "mean_kept_train": k} for s, (t, k) in thresholds.items()},
                   "rows": {}}
    for collection, (min_rel, _) in EVALUATED.items():
        topics = read_topics(COLLECTIONS / collection / "queries.tsv")
        qrels = read_qrels(COLLECTIONS / collection / "qrels.txt")
        curves = []
        for s in specs:
            first = s.split(">>")[0] if ">>" in s else None
            first_run = cached_run(work, collection, "test", "queries.tsv", first) if first else None
            row, bins = judge_one(cached_run(work, collection, "test", "queries.tsv", s), calibrations[s], topics,
                                  qrels, min_rel, thresholds[s][0], first_run)
            table["rows"][f"{collection} {s}"] = {**row, "reliability": bins}
            curves.append((f"{s} (ECE {row['ece_top10']:.3f})", bins))
        reliability_plot(curves, f"{collection}: P(relevant) on the top 10 (fitted on {trained} train)",
                         work / f"reliability-{collection}{suffix}.png")
    (work / f"judge{suffix}.json").write_text(json.dumps(table, indent=1))
    (work / f"judge{suffix}.md").write_text(markdown(table))
    print(markdown(table))


def markdown(table: dict) -> str:
    lines = ["| collection | pipeline | ECE@10 | relevant / mean P | hits a query: cut / raw | set P: cut / raw (p) "
             "| set R: cut / raw | empty (none relevant in its top 10 / the first stage's) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in table["rows"].items():
        collection, spec = name.split(" ", 1)
        lines.append(f"| {collection} | {spec} | {r['ece_top10']:.4f} | {r['relevant_share_top10']:.3f} / "
                     f"{r['mean_p_top10']:.3f} | {r['kept_cut']:.2f} / {r['kept_raw']:.2f} | {r['precision_cut']:.3f} /"
                     f" {r['precision_raw']:.3f} ({r['p_precision']:.2g}) | {r['recall_cut']:.3f} / "
                     f"{r['recall_raw']:.3f} | {r['empty']} ({r['empty_without_relevant_top10']} / "
                     f"{r['empty_without_relevant_first_stage_top10']}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("runs", "fit", "judge"))
    ap.add_argument("--work", help="cache directory (default $WEIR_CACHE/calibration)")
    ap.add_argument("--pipelines", default=PIPELINES)
    ap.add_argument("--train", help="COLLECTION:TOPICS:QRELS fitted on instead of SciFact train (e.g. "
                    "beir-arguana:queries.train-genq.tsv:qrels.train-genq.txt), into that collection's index")
    ap.add_argument("--limit", type=int, help="the first N training topics only")
    args = ap.parse_args()
    {"runs": runs, "fit": fit, "judge": judge}[args.command](args)


if __name__ == "__main__":
    main()
