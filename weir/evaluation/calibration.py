"""How good a calibration is, and what a cutoff returns: the judging side of :mod:`weir.ranker.calibration`.

- :func:`judged_hits`: the top hits of a run with their relevance and whether the qrels call them relevant, as arrays;
- :func:`expected_calibration_error` and :func:`reliability`: the standard equal-width binning (10 bins) of
  predicted probabilities against the observed share of relevant hits (ECE: the bins' gaps weighted by their hits);
- :func:`set_measures`: per query, the set precision and recall of the hits a cutoff keeps, what a per-query cutoff
  is judged by. A query with none kept has precision 1 when none of the hits the cutoff chose from is relevant
  (returning nothing where there was nothing to find is right) and 0 otherwise.

numpy only: these are the textbook formulas, a few lines each, and ir-measures has no calibration measure.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from weir.core.types import InputError, Run

BINS = 10


def judged_hits(run: Run, qrels: Mapping[str, Mapping[str, int]], *, depth: int = 10,
                min_rel: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(relevance, relevant, query index) of the top ``depth`` hits of each judged query of ``run``, whose hits must
    carry relevance (a calibrated pipeline's); unjudged documents count as not relevant."""
    p, y, q = [], [], []
    for i, qid in enumerate(qid for qid in run if qid in qrels):
        hits = run.ranking(qid).take(slice(depth))
        if hits.relevance is None:
            raise InputError(f"query {qid}: the run's hits carry no relevance (not a calibrated pipeline's run)")
        judged = qrels[qid]
        p.append(hits.relevance)
        y.append(np.array([judged.get(d, 0) >= min_rel for d in hits.doc_ids()], dtype=bool))
        q.append(np.full(len(hits), i))
    if not p:
        raise InputError("the run and the qrels share no query id: wrong qrels for this run?")
    return np.concatenate(p), np.concatenate(y), np.concatenate(q)


def reliability(p: np.ndarray, y: np.ndarray, bins: int = BINS) -> list[dict]:
    """Per equal-width bin of predicted probability: its range, hits, mean prediction and share relevant."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    at = np.clip(np.digitize(p, edges[1:-1], right=False), 0, bins - 1)
    out = []
    for b in range(bins):
        inside = at == b
        n = int(inside.sum())
        out.append({"low": float(edges[b]), "high": float(edges[b + 1]), "hits": n,
                    "predicted": float(p[inside].mean()) if n else None,
                    "observed": float(y[inside].mean()) if n else None})
    return out


def expected_calibration_error(p: np.ndarray, y: np.ndarray, bins: int = BINS) -> float:
    """Sum over bins of (hits in the bin / all hits) x |mean prediction - share relevant|."""
    if not len(p):
        raise InputError("no hits to judge a calibration on")
    return float(sum(b["hits"] / len(p) * abs(b["predicted"] - b["observed"])
                     for b in reliability(p, y, bins) if b["hits"]))


def set_measures(kept: Mapping[str, list[str]], qrels: Mapping[str, Mapping[str, int]], min_rel: int = 1,
                 candidates: Mapping[str, list[str]] | None = None) -> dict[str, dict[str, float]]:
    """Per judged query of ``kept``: ``{"precision", "recall", "kept"}`` of the hits kept for it, out of its
    ``candidates`` (default: every judged document); recall NaN with no relevant document judged (such a query is
    left out of :func:`mean_recall`)."""
    out = {}
    for qid, judged in qrels.items():
        if qid not in kept:
            continue
        relevant = {d for d, g in judged.items() if g >= min_rel}
        docs = kept[qid]
        found = sum(d in relevant for d in docs)
        pool = relevant if candidates is None else relevant.intersection(candidates.get(qid, ()))
        precision = found / len(docs) if docs else (0.0 if pool else 1.0)
        recall = found / len(relevant) if relevant else float("nan")
        out[qid] = {"precision": precision, "recall": recall, "kept": len(docs)}
    return out


def mean_recall(measures: Mapping[str, Mapping[str, float]]) -> float:
    values = [m["recall"] for m in measures.values() if m["recall"] == m["recall"]]
    return float(np.mean(values)) if values else float("nan")
