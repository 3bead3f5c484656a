"""Measures: ir-measures against hand-computed trec_eval values and against pytrec_eval."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import pytrec_eval

from weir.evaluation.measures import evaluate
from weir.core.trec import read_qrels
from weir.core.types import Run

FIXTURES = Path(__file__).parent / "fixtures" / "eval"


QRELS = FIXTURES / "qrels.txt"


RUN_A, RUN_B = FIXTURES / "run_a.trec", FIXTURES / "run_b.trec"


def test_measures_match_hand_computed_trec_eval_values():
    means, by_query = evaluate(Run.read_trec(RUN_A), read_qrels(QRELS), ["nDCG@10", "RR@10", "AP", "R@100"],
                               per_query=True)
    # q1: relevant d1 (1), d3 (2), d7 (1, not retrieved); hits d1 d2 d3 d4 d5
    ap_q1 = (1 / 1 + 2 / 3) / 3
    ndcg_q1 = (1 + 2 / math.log2(4)) / (2 + 1 / math.log2(3) + 1 / math.log2(4))  # trec_eval: gain = grade
    # q2: relevant d2 only (d5 is judged 0), at rank 3
    # q3 (judged, not retrieved) counts 0, as trec_eval -c; q4 (retrieved, not judged) is ignored
    assert by_query["AP"] == pytest.approx({"q1": ap_q1, "q2": 1 / 3, "q3": 0.0})
    assert by_query["RR@10"] == pytest.approx({"q1": 1.0, "q2": 1 / 3, "q3": 0.0})
    assert by_query["nDCG@10"] == pytest.approx({"q1": ndcg_q1, "q2": 1 / math.log2(4), "q3": 0.0})
    assert by_query["R@100"] == pytest.approx({"q1": 2 / 3, "q2": 1.0, "q3": 0.0})
    assert means["AP"] == pytest.approx((ap_q1 + 1 / 3 + 0) / 3)


@pytest.mark.parametrize("min_rel", [1, 2])
def test_measures_match_pytrec_eval(min_rel):
    qrels, run = read_qrels(QRELS), Run.read_trec(RUN_A)
    ours = evaluate(run, qrels, ["nDCG@10", "AP", "R@100", "P@5"], min_rel=min_rel, per_query=True)[1]
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map", "recall.100", "P.5"},
                                               relevance_level=min_rel)
    reference = evaluator.evaluate(run.to_dict())  # the queries the run retrieved for: q1, q2
    reference["q3"] = {name: 0.0 for name in reference["q1"]}  # judged, not retrieved: 0 (trec_eval -c)
    for ours_name, trec_name in [("AP", "map"), ("R@100", "recall_100"), ("P@5", "P_5")]:
        assert ours[ours_name] == pytest.approx({q: v[trec_name] for q, v in reference.items()})
    # nDCG uses the grades themselves whatever the binary threshold
    assert ours["nDCG@10"] == pytest.approx({q: v["ndcg_cut_10"] for q, v in reference.items()})
    if min_rel == 2:  # only d3 (grade 2) counts for q1, at rank 3; q2 has nothing relevant
        assert ours["AP"] == pytest.approx({"q1": 1 / 3, "q2": 0.0, "q3": 0.0})


def test_a_measure_deeper_than_the_run_is_named_in_a_warning():
    """nDCG@10, R@100 and R@1000 of a run of at most 5 hits a query measure only those 5: said, with the measures
    named; the measures a run is deep enough for are computed without a word."""
    import warnings

    from weir.evaluation.measures import RunDepthWarning

    run, qrels = Run.read_trec(RUN_A), read_qrels(QRELS)
    with pytest.warns(RunDepthWarning, match=r"at most 5 hits a query: nDCG@10, R@100, R@1000 measure only those.*-k 1000"):
        means = evaluate(run, qrels, ["nDCG@10", "AP", "R@5", "R@100", "R@1000"])
    assert means["R@100"] == means["R@1000"] == means["R@5"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluate(run, qrels, ["AP", "R@5", "RR@5"])
