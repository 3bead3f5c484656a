"""The risk of a model of several members (:mod:`weir.ranker.rerankers.ltr`: it ranks by the members' mean score minus
``risk`` times their spread), chosen on the training queries.

The members' inner cross-validation (:func:`~weir.training.ltr.rounds.rounds_by_cv`) has already fitted, for each
member, one booster per inner fold; each training query sits in one validation fold of every member. Their scores at
the chosen rounds are therefore out-of-fold for every member (:func:`out_of_fold`): the spread they show is the one a
query the trees never saw meets, not the small one of a query they fitted. Each risk of :data:`RISK_GRID` ranks every
training query's candidates so; its URisk (:mod:`weir.evaluation.risk`, alpha ``risk_alpha``) against the
candidates' own order, the first stage's, is taken per training set and averaged over the sets (each counting alike,
as the rounds' inner cross-validation counts them), and the best risk wins, ties to the smaller (:func:`choose_risk`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from weir.evaluation.risk import urisk_of
from weir.ranker.rerankers.ltr import base_scores, risk_adjusted
from weir.training.ltr.boosting import ndcg_at_10_per_query
from weir.training.ltr.examples import Examples

RISK_GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # the spread's weights tried; 0 is the members' mean


def candidate_order(groups: Sequence[int]) -> np.ndarray:
    """Scores that rank each query's rows (grouped by ``groups``) in the order they came: the first stage's."""
    return -np.concatenate([np.arange(n, dtype=np.float64) for n in groups])


def out_of_fold(data: Sequence[Examples], fits: Sequence[tuple[int, object, list[tuple[int, set[str]]]]],
                members: int, rounds: int) -> list[np.ndarray]:
    """Per training set, every member's score of every row at ``rounds`` rounds by the booster of the inner fold that
    validated the row's query (members, rows; NaN where no fold of a member validated it). ``fits``: (member,
    booster, the (set, query ids) it validated), as :func:`~weir.training.ltr.rounds.rounds_by_cv` collects them."""
    out = [np.full((members, len(ex.qids)), np.nan) for ex in data]
    for m, booster, validated in fits:
        for j, keep in validated:
            rows, _ = data[j].rows(keep)
            if len(rows):
                out[j][m, rows] = booster.predict(data[j].X[rows], num_iteration=rounds, num_threads=1)
    return out


def choose_risk(data: Sequence[Examples], pools: Sequence[set[str]], oof: Sequence[np.ndarray],
                init_col: int | None, alpha: float, grid: Sequence[float] = RISK_GRID) -> tuple[float, dict]:
    """The risk of ``grid`` whose out-of-fold ranking of the training queries (``pools``: each set's, the first
    set's those trained on) has the best URisk against the candidates' order, the sets' URisks averaged; ties to the
    smaller risk. Returns it and a record (each risk's mean URisk and mean nDCG@10 over the sets)."""
    per_risk = {float(r): ([], []) for r in grid}
    for ex, pool, scores in zip(data, pools, oof):
        rows, groups = ex.rows(pool)
        if not len(rows) or np.isnan(scores[:, rows]).any():
            continue
        X, y = ex.X[rows], ex.y[rows]
        base = base_scores(X, groups, init_col)
        before = ndcg_at_10_per_query(candidate_order(groups), y, groups)
        for r, (risks, ndcgs) in per_risk.items():
            ranked, _ = risk_adjusted(scores[:, rows], r)
            after = ndcg_at_10_per_query(ranked if base is None else ranked + base, y, groups)
            risks.append(urisk_of(after - before, alpha))
            ndcgs.append(float(after.mean()))
    table = {r: (float(np.mean(u)), float(np.mean(n))) for r, (u, n) in per_risk.items() if u}
    if not table:
        return 0.0, {"alpha": alpha, "chosen": 0.0, "sets_scored": 0}
    best = max(table.values(), key=lambda v: v[0])[0]
    chosen = min(r for r, (u, _) in table.items() if u == best)
    return chosen, {"alpha": alpha, "chosen": chosen, "sets_scored": len(per_risk[chosen][0]),
                    "urisk": {str(r): round(u, 5) for r, (u, _) in table.items()},
                    "ndcg@10": {str(r): round(n, 4) for r, (_, n) in table.items()}}
