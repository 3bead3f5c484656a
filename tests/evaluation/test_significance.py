"""Paired tests against scipy, Holm's correction against statsmodels and by hand."""

from __future__ import annotations

import math

import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from weir.evaluation.significance import compare, holm, paired, paired_test
from weir.core.types import InputError

BASE = [0.2, 0.5, 0.1, 0.7, 0.4, 0.3, 0.6, 0.2]


BETTER = [0.4, 0.6, 0.3, 0.9, 0.5, 0.35, 0.8, 0.25]


NOISY = [0.25, 0.4, 0.2, 0.6, 0.5, 0.3, 0.55, 0.3]


def test_t_test_is_scipy_ttest_rel():
    statistic, p = paired_test(BETTER, BASE, "t")
    expected = stats.ttest_rel(BETTER, BASE)
    assert statistic == pytest.approx(expected.statistic)
    assert p == pytest.approx(expected.pvalue)
    assert p < 0.01  # every query improves


def test_wilcoxon_is_scipy_wilcoxon():
    statistic, p = paired_test(NOISY, BASE, "wilcoxon")
    expected = stats.wilcoxon(NOISY, BASE)
    assert statistic == pytest.approx(expected.statistic)
    assert p == pytest.approx(expected.pvalue)


def test_identical_samples_are_not_different():
    assert paired_test(BASE, BASE, "t") == (None, 1.0)
    assert paired_test(BASE, BASE, "wilcoxon") == (None, 1.0)


def test_unknown_test_is_an_input_error():
    with pytest.raises(InputError, match="unknown significance test"):
        paired_test(BASE, BETTER, "sign")


def test_holm_by_hand():
    # sorted: 0.01 * 3 = 0.03; 0.03 * 2 = 0.06; 0.04 * 1 = 0.04 -> raised to the running maximum 0.06
    reject, adjusted = holm([0.01, 0.04, 0.03], alpha=0.05)
    assert adjusted == pytest.approx([0.03, 0.06, 0.06])
    assert reject == [True, False, False]
    # capped at 1
    assert holm([0.6, 0.5])[1] == pytest.approx([1.0, 1.0])
    assert holm([]) == ([], [])


def test_holm_is_statsmodels():
    pvalues = [0.002, 0.2, 0.011, 0.04, 0.5]
    reject, adjusted = holm(pvalues, alpha=0.05)
    expected_reject, expected, _, _ = multipletests(pvalues, alpha=0.05, method="holm")
    assert adjusted == pytest.approx(list(expected))
    assert reject == list(expected_reject)


def _per_query(values):
    return {f"q{i}": v for i, v in enumerate(values)}


def test_compare_against_a_baseline_corrects_per_measure():
    per_query = {
        "base": {"m": _per_query(BASE), "n": _per_query(BASE)},
        "better": {"m": _per_query(BETTER), "n": _per_query(BASE)},
        "noisy": {"m": _per_query(NOISY), "n": _per_query(NOISY)},
    }
    results = compare(per_query, "base", test="t", alpha=0.05)
    assert set(results) == {"m", "n"} and set(results["m"]) == {"better", "noisy"}
    raw = [stats.ttest_rel(BETTER, BASE).pvalue, stats.ttest_rel(NOISY, BASE).pvalue]
    _, adjusted, _, _ = multipletests(raw, method="holm")
    better, noisy = results["m"]["better"], results["m"]["noisy"]
    assert better.p == pytest.approx(raw[0]) and noisy.p == pytest.approx(raw[1])
    assert better.p_holm == pytest.approx(adjusted[0]) and noisy.p_holm == pytest.approx(adjusted[1])
    assert better.significant and not noisy.significant
    assert better.delta == pytest.approx(sum(BETTER) / len(BETTER) - sum(BASE) / len(BASE))
    assert better.n == len(BASE)
    # on measure n, "better" equals the baseline: p = 1, and Holm's correction involves only this measure's tests
    assert results["n"]["better"].p == 1.0 and not results["n"]["better"].significant
    _, adjusted_n, _, _ = multipletests([1.0, stats.ttest_rel(NOISY, BASE).pvalue], method="holm")
    assert results["n"]["noisy"].p_holm == pytest.approx(adjusted_n[1])
    assert results["m"]["better"].to_dict()["statistic"] == pytest.approx(stats.ttest_rel(BETTER, BASE).statistic)


def test_missing_queries_count_zero():
    qids, a, b = paired({"q1": 0.5, "q2": 1.0}, {"q2": 0.5, "q3": 0.25})
    assert qids == ["q1", "q2", "q3"] and a == [0.5, 1.0, 0.0] and b == [0.0, 0.5, 0.25]


def test_compare_rejects_bad_settings():
    per_query = {"a": {"m": _per_query(BASE)}, "b": {"m": _per_query(BETTER)}}
    with pytest.raises(InputError, match="baseline 'c'"):
        compare(per_query, "c")
    with pytest.raises(InputError, match="between 0 and 1"):
        compare(per_query, "a", alpha=5)
    assert math.isclose(compare(per_query, "a", test="wilcoxon")["m"]["b"].p, stats.wilcoxon(BETTER, BASE).pvalue)
