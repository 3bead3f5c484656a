"""Issue 53, item 4: are the LTR reasons faithful? Remove what an explanation says matters and see the ranking fall.

For SciFact test and ArguAna (indexes of research/calibration.py, ``WORK/indexes/<collection>``), ``hybrid>>ltr``
with the shipped ``ltr`` model over the hybrid top 100 of each query:

- **adds up**: each hit's contributions (TreeSHAP, LightGBM's pred_contrib) plus the bias against its LTR score:
  the largest absolute difference over every hit;
- **faithful**: per query, the feature with the largest mean |contribution| over its top 10 hits (the bias apart)
  is replaced, for all of the query's candidates, by its mean over them; the candidates are scored again and nDCG@10
  measured. The same for one feature drawn at random per query (seeded). The loss of nDCG@10 of the two replacements
  is compared per query (paired t-test): an explanation that points at what the model uses costs more when removed.

Usage: python research/explanations.py [--work DIR] [--seed 0]; prints the table and writes WORK/explanations.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COLLECTIONS = Path(os.environ.get("WEIR_COLLECTIONS", ROOT.parent / "shared" / "collections"))
JUDGED = {"beir-scifact": False, "beir-arguana": True}  # collection -> drop hits whose id is the query's
DEPTH = 100


def scored_run(blocks: dict, scores: dict) -> dict:
    """{qid: {doc: score}} of each query's candidates scored anew."""
    return {qid: dict(zip(docs, s.tolist())) for (qid, docs), s in ((q, scores[q[0]]) for q in blocks.items())}


def measure(name: str, work: Path, seed: int) -> dict:
    from weir import Index, pipeline
    from weir.core.trec import read_qrels, read_topics
    from weir.evaluation.measures import evaluate
    from weir.evaluation.significance import paired_test

    index = Index(work / "indexes" / name)
    topics = read_topics(COLLECTIONS / name / "queries.tsv")
    qrels = read_qrels(COLLECTIONS / name / "qrels.txt")
    topics = [q for q in topics if q.id in qrels]
    candidates = pipeline("hybrid", index).search(topics, DEPTH, remove_identical=JUDGED[name])
    ltr = pipeline("hybrid>>ltr", index).stages[1]
    X, rows = ltr.extractor.extract(topics, candidates, DEPTH)
    X = X[:, ltr.cols].astype(np.float64)
    qids = [q for q, _ in rows]
    scores = ltr.model.predict(X, qids)
    parts = ltr.model.contributions(X, qids)
    adds_up = float(np.abs(parts.sum(axis=1) - scores).max())
    spans: dict[str, list[int]] = {}  # each query's rows, [first, end)
    for i, q in enumerate(qids):
        spans.setdefault(q, [i, i])[1] = i + 1
    docs = {q: candidates.ranking(q).doc_ids()[:DEPTH] for q in spans}
    rng = np.random.default_rng(seed)
    features = ltr.model.features
    new = {"model": {}, "top": {}, "random": {}}
    chosen = {}
    for q, (a, b) in spans.items():
        new["model"][q] = scores[a:b]
        top10 = np.argsort(-scores[a:b], kind="stable")[:10]
        magnitude = np.abs(parts[a:b][top10, :-1]).mean(axis=0)
        pick = {"top": int(np.argmax(magnitude)), "random": int(rng.integers(len(features)))}
        chosen[q] = {k: features[j] for k, j in pick.items()}
        for kind, j in pick.items():
            Xq = X[a:b].copy()
            column = Xq[:, j]
            if not np.isnan(column).all():
                Xq[:, j] = np.nanmean(column)
            new[kind][q] = ltr.model.predict(Xq, [q] * (b - a))
    blocks = {q: docs[q] for q in spans}
    per_query = {kind: evaluate(scored_run(blocks, s), qrels, ["nDCG@10"], per_query=True)[1]["nDCG@10"]
                 for kind, s in new.items()}
    base = per_query["model"]
    qs = sorted(base)
    loss_top = [base[q] - per_query["top"].get(q, 0.0) for q in qs]
    loss_random = [base[q] - per_query["random"].get(q, 0.0) for q in qs]
    _, p = paired_test(loss_top, loss_random)
    top_counts: dict[str, int] = {}
    for c in chosen.values():
        top_counts[c["top"]] = top_counts.get(c["top"], 0) + 1
    return {"queries": len(qs), "hits": int(len(scores)), "max_abs_sum_minus_score": adds_up,
            "nDCG@10": float(np.mean([base[q] for q in qs])),
            "loss_top": float(np.mean(loss_top)), "loss_random": float(np.mean(loss_random)), "p": p,
            "top_features": dict(sorted(top_counts.items(), key=lambda kv: -kv[1]))}


def main() -> None:
    from weir.core.runtime import cache_dir

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", help="default $WEIR_CACHE/calibration (research/calibration.py's indexes)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    work = Path(args.work) if args.work else Path(cache_dir("calibration"))
    results = {name: measure(name, work, args.seed) for name in JUDGED}
    (work / "explanations.json").write_text(json.dumps(results, indent=1))
    print("| collection | queries | hits | max abs(contributions + bias - score) | nDCG@10 | loss, top feature "
          "replaced | loss, random feature replaced | p | top features (queries) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, r in results.items():
        tops = ", ".join(f"{k} {v}" for k, v in list(r["top_features"].items())[:3])
        print(f"| {name} | {r['queries']} | {r['hits']} | {r['max_abs_sum_minus_score']:.1e} | {r['nDCG@10']:.4f} | "
              f"{r['loss_top']:.4f} | {r['loss_random']:.4f} | {r['p']:.2g} | {tops} |")


if __name__ == "__main__":
    main()
