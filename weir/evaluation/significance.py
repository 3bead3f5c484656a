"""Paired significance tests of systems against a baseline, with Holm-Bonferroni correction (scipy, statsmodels).

Each measure is tested separately: for every system other than the baseline, a paired test (Student's t-test,
``scipy.stats.ttest_rel``, or the Wilcoxon signed-rank test, ``scipy.stats.wilcoxon``) over the per-query values of
the queries either system was evaluated on (a query missing from one system counts 0 there, as ``trec_eval -c``),
then the p-values of the systems compared with the baseline are corrected together with Holm's step-down method
(``statsmodels.stats.multitest.multipletests(method="holm")``), once per measure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from weir.core.types import InputError

TESTS = ("t", "wilcoxon")


@dataclass(frozen=True)
class Comparison:
    """One system against the baseline on one measure."""

    system: str
    measure: str
    n: int  # paired queries
    mean: float
    baseline_mean: float
    delta: float  # mean(system - baseline)
    statistic: float | None
    p: float  # the test's two-sided p-value
    p_holm: float  # Holm-adjusted over the systems compared with the baseline on this measure
    significant: bool  # p_holm < alpha

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


def paired(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[list[str], list[float], list[float]]:
    """Align two {qid: value} maps on the union of their queries (a missing query counts 0)."""
    qids = sorted(set(a) | set(b))
    return qids, [float(a.get(q, 0.0)) for q in qids], [float(b.get(q, 0.0)) for q in qids]


def paired_test(a: Sequence[float], b: Sequence[float], test: str = "t") -> tuple[float | None, float]:
    """(statistic, two-sided p-value) of a paired test of ``a`` against ``b``. Identical samples give p = 1."""
    from scipy import stats

    if test not in TESTS:
        raise InputError(f"unknown significance test {test!r}; known: {', '.join(TESTS)}")
    if len(a) != len(b):
        raise ValueError("a paired test needs samples of equal length")
    if len(a) < 2 or all(x == y for x, y in zip(a, b)):
        return None, 1.0  # no difference to test (scipy returns nan, or raises for Wilcoxon)
    result = stats.ttest_rel(a, b) if test == "t" else stats.wilcoxon(a, b)
    p = float(result.pvalue)
    return float(result.statistic), (1.0 if math.isnan(p) else p)


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> tuple[list[bool], list[float]]:
    """Holm-Bonferroni step-down correction: (rejected at ``alpha``, adjusted p-values), in the input's order."""
    if not pvalues:
        return [], []
    from statsmodels.stats.multitest import multipletests

    reject, adjusted, _, _ = multipletests(list(pvalues), alpha=alpha, method="holm")
    return [bool(r) for r in reject], [float(p) for p in adjusted]


def compare(per_query: Mapping[str, Mapping[str, Mapping[str, float]]], baseline: str, *, test: str = "t",
            alpha: float = 0.05) -> dict[str, dict[str, Comparison]]:
    """Test every system against ``baseline``.

    ``per_query``: {system: {measure: {qid: value}}}. Returns {measure: {system: Comparison}} for the systems other
    than the baseline, with Holm's correction applied across those systems, per measure."""
    if baseline not in per_query:
        raise InputError(f"baseline {baseline!r} is not one of the systems: {', '.join(per_query)}")
    if test not in TESTS:
        raise InputError(f"unknown significance test {test!r}; known: {', '.join(TESTS)}")
    if not 0 < alpha < 1:
        raise InputError(f"the significance level must be between 0 and 1 (got {alpha})")
    others = [s for s in per_query if s != baseline]
    out: dict[str, dict[str, Comparison]] = {}
    for measure in per_query[baseline]:
        raw = []
        for system in others:
            _, x, y = paired(per_query[system].get(measure, {}), per_query[baseline][measure])
            statistic, p = paired_test(x, y, test)
            n = len(x)
            mean, base = (sum(x) / n, sum(y) / n) if n else (math.nan, math.nan)
            raw.append((system, n, mean, base, statistic, p))
        reject, adjusted = holm([r[-1] for r in raw], alpha)
        out[measure] = {
            system: Comparison(system, measure, n, mean, base, mean - base, statistic, p, p_adj, rej)
            for (system, n, mean, base, statistic, p), rej, p_adj in zip(raw, reject, adjusted)
        }
    return out


def equivalence_test(a: Sequence[float], b: Sequence[float], margin: float) -> float:
    """The p-value of a paired two one-sided tests procedure (TOST, ``statsmodels.stats.weightstats.ttost_paired``)
    that ``mean(a - b)`` lies within ``(-margin, margin)``: below alpha, the two are equivalent at that margin.
    Samples with no variance in their differences are equivalent exactly when the difference is within the margin."""
    import numpy as np
    from statsmodels.stats.weightstats import ttost_paired

    if len(a) != len(b):
        raise ValueError("a paired test needs samples of equal length")
    if not margin > 0:
        raise InputError(f"the equivalence margin must be positive (got {margin})")
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if len(diff) < 2 or np.allclose(diff, diff[0] if len(diff) else 0.0, rtol=0, atol=1e-12):
        return 0.0 if len(diff) and abs(diff[0]) < margin else 1.0
    p, _, _ = ttost_paired(np.asarray(a, dtype=float), np.asarray(b, dtype=float), -margin, margin)
    return float(p)
