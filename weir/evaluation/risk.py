"""Risk-sensitive evaluation: how a system's per-query effectiveness compares with a baseline's when losses weigh
more than wins.

URisk (Wang, Bennett and Collins-Thompson, *Robust ranking models via risk-sensitive optimization*, SIGIR 2012; the
TREC Web track's risk-sensitive measure, Collins-Thompson et al. 2014): the mean over queries of the change against
the baseline, each loss counted ``1 + alpha`` times. ``alpha = 0`` is the mean change; at ``alpha = 5`` a query that
loses 0.1 costs as much as six queries that gain 0.1 each. No library weir uses computes it (ir-measures and
trec_eval have no paired, baseline-relative measures); it is a few lines of numpy.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

RISK_ALPHA = 5.0  # the TREC Web track's highest alpha, and issue 53's


def urisk(system: Mapping[str, float], baseline: Mapping[str, float], alpha: float = RISK_ALPHA) -> float:
    """URisk of ``system`` against ``baseline`` (per-query values of one measure, keyed by query id) over the queries
    of either: a query missing from one counts 0 there (as ``trec_eval -c`` and the paired tests do)."""
    queries = sorted(set(system) | set(baseline))
    if not queries:
        return 0.0
    delta = np.array([system.get(q, 0.0) - baseline.get(q, 0.0) for q in queries], dtype=np.float64)
    return urisk_of(delta, alpha)


def urisk_of(delta: np.ndarray, alpha: float = RISK_ALPHA) -> float:
    """URisk of per-query changes ``delta`` (system minus baseline): their mean, losses counted ``1 + alpha`` times."""
    if alpha < 0:
        raise ValueError(f"alpha must be at least 0 (got {alpha})")
    delta = np.asarray(delta, dtype=np.float64)
    if not len(delta):
        return 0.0
    return float(np.where(delta < 0, (1.0 + alpha) * delta, delta).mean())
