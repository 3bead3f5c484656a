"""Fusion arithmetic on hand-computed cases (RRF, min-max, z-score), the hybrid retriever and its settings."""

from __future__ import annotations

import json
import math

import pytest

from weir.ranker.options import FusionOptions, PipelineOptions
from weir.ranker.retrievers.hybrid import HybridRetriever, fuse_runs, hybrid_settings, linear, normalize, parse_weights, rrf
from weir.ranker.stage import Retriever
from weir.core.types import Hit, InputError, Query, Run

A = {"d1": 10.0, "d2": 6.0, "d3": 2.0}


B = {"d3": 0.9, "d1": 0.7, "d4": 0.5}


Z = math.sqrt(1.5)  # z-score of the top (and minus the bottom) of three evenly spaced scores: 4 / sqrt(32/3)


def test_rrf_hand_computed():
    fused = rrf([list(A), list(B)])
    assert fused["d1"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["d2"] == pytest.approx(1 / 62)
    assert fused["d3"] == pytest.approx(1 / 63 + 1 / 61)
    assert fused["d4"] == pytest.approx(1 / 63)
    assert sorted(fused, key=fused.get, reverse=True) == ["d1", "d3", "d2", "d4"]


def test_rrf_weights_and_k():
    fused = rrf([list(A), list(B)], weights=[1.0, 2.0], k=10)
    assert fused["d1"] == pytest.approx(1 / 11 + 2 / 12)
    assert fused["d3"] == pytest.approx(1 / 13 + 2 / 11)
    assert fused["d4"] == pytest.approx(2 / 13)


def test_minmax_hand_computed():
    assert normalize(A, "minmax") == pytest.approx({"d1": 1.0, "d2": 0.5, "d3": 0.0})
    assert normalize({"x": 3.0, "y": 3.0}, "minmax") == {"x": 1.0, "y": 1.0}
    fused = linear([A, B], method="minmax")
    # missing from a list = that list's lowest normalized score (0 for min-max)
    assert fused == pytest.approx({"d1": 1.5, "d2": 0.5, "d3": 1.0, "d4": 0.0})
    weighted = linear([A, B], weights=[0.25, 0.75], method="minmax")
    assert weighted == pytest.approx({"d1": 0.625, "d2": 0.125, "d3": 0.75, "d4": 0.0})


def test_zscore_hand_computed():
    assert normalize(A, "zscore") == pytest.approx({"d1": Z, "d2": 0.0, "d3": -Z})
    assert normalize({"x": 2.0, "y": 2.0}, "zscore") == {"x": 0.0, "y": 0.0}
    fused = linear([A, B], method="zscore")
    # d2 is missing from B: it gets B's lowest z (-Z); d4 is missing from A: A's lowest (-Z)
    assert fused == pytest.approx({"d1": Z + 0.0, "d2": 0.0 - Z, "d3": -Z + Z, "d4": -Z - Z})


def _run(scores: dict[str, float], name: str, qid: str = "q1") -> Run:
    hits = [Hit(d, s, 0, {name: s}) for d, s in scores.items()]
    return Run({qid: hits}).ranked()


def test_fuse_runs_keeps_stage_scores_and_ranks():
    fused = fuse_runs([_run(A, "bm25"), _run(B, "dense")], method="minmax", depth=3)
    hits = fused["q1"]
    assert [h.doc_id for h in hits] == ["d1", "d3", "d2"]
    assert [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].stage_scores == pytest.approx({"bm25": 10.0, "dense": 0.7, "hybrid": 1.5})
    assert hits[2].stage_scores == pytest.approx({"bm25": 6.0, "hybrid": 0.5})  # not retrieved by dense


def test_fuse_runs_errors():
    with pytest.raises(InputError, match="fusion method"):
        fuse_runs([_run(A, "a"), _run(B, "b")], method="borda")
    with pytest.raises(InputError, match="weight"):
        fuse_runs([_run(A, "a"), _run(B, "b")], weights=[1.0])


class _Fixed(Retriever):
    def __init__(self, name: str, scores: dict[str, float]):
        self.name, self.scores, self.asked = name, scores, []

    def retrieve(self, queries, k):
        self.asked.append(k)
        return Run({q.id: _run(self.scores, self.name, q.id)[q.id][:k] for q in queries})


def test_hybrid_retriever_depth_and_timings():
    a, b = _Fixed("bm25", A), _Fixed("dense", B)
    hybrid = HybridRetriever([a, b], method="rrf", depth=[2, 3])
    run = hybrid([Query("q1", "x"), Query("q2", "y")], k=2)
    assert a.asked == [2] and b.asked == [3]
    # A cut at depth 2: d1 (1/61 + 1/62), d3 (1/61 + 0) beats d2 (1/62)
    assert [h.doc_id for h in run["q1"]] == ["d1", "d3"]
    assert set(hybrid.last_timings) == {"bm25", "dense", "fusion"}
    with pytest.raises(InputError):
        HybridRetriever([a])
    with pytest.raises(InputError):
        HybridRetriever([a, b], weights=[0.0, 0.0])


def test_parse_weights():
    assert parse_weights("0.3,0.7", ["bm25", "dense"]) == [0.3, 0.7]
    assert parse_weights("dense=0.6", ["bm25", "dense"]) == [0.0, 0.6]
    assert parse_weights("0.3;0.7", ["bm25", "dense"]) == [0.3, 0.7]  # as written inside a pipeline's brackets
    assert parse_weights("dense=0.7;bm25=0.3", ["bm25", "dense"]) == [0.3, 0.7]
    assert parse_weights(None, ["bm25", "dense"]) is None
    with pytest.raises(InputError, match="not a fused stage"):
        parse_weights("splade=1", ["bm25", "dense"])
    with pytest.raises(InputError):
        parse_weights("0.5", ["bm25", "dense"])


def test_hybrid_settings_prefer_options_then_tuned_file(tmp_path):
    class FakeIndex:
        path = tmp_path

    assert hybrid_settings(FakeIndex, FusionOptions())["tuned"] is None
    (tmp_path / "tuning").mkdir()
    (tmp_path / "tuning" / "fusion.json").write_text(json.dumps(
        {"stages": ["bm25", "dense"], "depth": 500, "best": {"method": "rrf", "weights": [0.4, 0.6], "rrf_k": 20}}))
    tuned = hybrid_settings(FakeIndex, FusionOptions())
    assert (tuned["method"], tuned["weights"], tuned["rrf_k"], tuned["depth"]) == ("rrf", [0.4, 0.6], 20, 500)
    given = hybrid_settings(FakeIndex, PipelineOptions.from_mapping(
        {"fusion": "zscore", "fusion_weights": "0.5,0.5", "depth_per_stage": 100}).hybrid)
    assert (given["method"], given["weights"], given["depth"]) == ("zscore", [0.5, 0.5], 100)
    # a tuned file for other stages is not used
    other = hybrid_settings(FakeIndex, FusionOptions(stages="bm25,deepimpact"))
    assert other["tuned"] is None and other["weights"] is None
