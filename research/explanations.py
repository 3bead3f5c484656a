"""Issue 53, item 4: are the LTR reasons faithful? Remove what an explanation says matters and see the ranking fall.

For SciFact test and ArguAna (indexes of research/calibration.py, ``WORK/indexes/<collection>``), ``hybrid>>ltr``
with the shipped ``ltr`` model over the hybrid top 100 of each query:

- **adds up**: each hit's contributions (TreeSHAP, LightGBM's pred_contrib) plus the bias against its LTR score:
  the largest absolute difference over every hit;
- **faithful**: per query, the feature with the largest mean |contribution| over its top 10 hits (the bias apart)
  is replaced, for all of the query's candidates, by its mean over them; the candidates are scored again and nDCG@10
  measured. The same for one feature drawn at random per query (seeded), and for the top feature of the trees alone
  (the feature the model boosts from set aside: its contribution holds its standardized value, which the score
  adds). The losses of nDCG@10 are compared per query with the random feature's (paired t-test): an explanation
  that points at what the model uses costs more when removed.

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


def replaced(model, X: np.ndarray, qids: list[str], seed: int) -> tuple[dict, dict, dict]:
    """Per query: the model's scores of its candidates, and their scores with its top, top tree and a random
    feature each replaced by its mean over the query's candidates; which feature each was; the rows' spans."""
    scores, parts = model.predict(X, qids), model.contributions(X, qids)
    spans: dict[str, list[int]] = {}  # each query's rows, [first, end)
    for i, q in enumerate(qids):
        spans.setdefault(q, [i, i])[1] = i + 1
    rng = np.random.default_rng(seed)
    features = model.features
    init = features.index(model.init_from) if model.init_from else None
    new: dict[str, dict] = {"model": {}, "top": {}, "top_tree": {}, "random": {}}
    chosen = {}
    for q, (a, b) in spans.items():
        new["model"][q] = scores[a:b]
        top10 = np.argsort(-scores[a:b], kind="stable")[:10]
        magnitude = np.abs(parts[a:b][top10, :-1]).mean(axis=0)
        trees = magnitude.copy()
        if init is not None:
            trees[init] = -1.0  # the feature boosted from: its standardized value is in its contribution
        pick = {"top": int(np.argmax(magnitude)), "top_tree": int(np.argmax(trees)),
                "random": int(rng.integers(len(features)))}
        chosen[q] = {k: features[j] for k, j in pick.items()}
        for kind, j in pick.items():
            Xq = X[a:b].copy()
            if not np.isnan(Xq[:, j]).all():
                Xq[:, j] = np.nanmean(Xq[:, j])
            new[kind][q] = model.predict(Xq, [q] * (b - a))
    return new, chosen, {"adds_up": float(np.abs(parts.sum(axis=1) - scores).max()), "hits": int(len(scores))}


def counts(chosen: dict, kind: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in chosen.values():
        out[c[kind]] = out.get(c[kind], 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def measure(name: str, work: Path, seed: int) -> dict:
    from weir import Index, pipeline
    from weir.core.trec import read_qrels, read_topics
    from weir.evaluation.measures import evaluate
    from weir.evaluation.significance import paired_test

    index = Index(work / "indexes" / name)
    qrels = read_qrels(COLLECTIONS / name / "qrels.txt")
    topics = [q for q in read_topics(COLLECTIONS / name / "queries.tsv") if q.id in qrels]
    candidates = pipeline("hybrid", index).search(topics, DEPTH, remove_identical=JUDGED[name])
    ltr = pipeline("hybrid>>ltr", index).stages[1]
    X, rows = ltr.extractor.extract(topics, candidates, DEPTH)
    new, chosen, check = replaced(ltr.model, X[:, ltr.cols].astype(np.float64), [q for q, _ in rows], seed)
    blocks = {q: candidates.ranking(q).doc_ids()[:DEPTH] for q in new["model"]}
    per_query = {kind: evaluate(scored_run(blocks, s), qrels, ["nDCG@10"], per_query=True)[1]["nDCG@10"]
                 for kind, s in new.items()}
    base = per_query["model"]
    qs = sorted(base)
    loss = {kind: [base[q] - per_query[kind].get(q, 0.0) for q in qs] for kind in ("top", "top_tree", "random")}
    return {"queries": len(qs), "hits": check["hits"], "max_abs_sum_minus_score": check["adds_up"],
            "nDCG@10": float(np.mean([base[q] for q in qs])),
            "loss_top": float(np.mean(loss["top"])), "loss_random": float(np.mean(loss["random"])),
            "p": paired_test(loss["top"], loss["random"])[1],
            "loss_top_tree": float(np.mean(loss["top_tree"])),
            "p_tree": paired_test(loss["top_tree"], loss["random"])[1],
            "top_features": counts(chosen, "top"), "top_tree_features": counts(chosen, "top_tree")}


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
          "replaced (p against random) | loss, top tree feature replaced (p) | loss, random feature replaced | "
          "top features (queries) | top tree features (queries) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for name, r in results.items():
        tops = ", ".join(f"{k} {v}" for k, v in list(r["top_features"].items())[:3])
        trees = ", ".join(f"{k} {v}" for k, v in list(r["top_tree_features"].items())[:3])
        print(f"| {name} | {r['queries']} | {r['hits']} | {r['max_abs_sum_minus_score']:.1e} | {r['nDCG@10']:.4f} | "
              f"{r['loss_top']:.4f} ({r['p']:.2g}) | {r['loss_top_tree']:.4f} ({r['p_tree']:.2g}) | "
              f"{r['loss_random']:.4f} | {tops} | {trees} |")


if __name__ == "__main__":
    main()
