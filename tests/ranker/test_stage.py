"""The reranker's promise: new scores on the top depth, never a candidate dropped or invented."""

from __future__ import annotations

import pytest

from weir.ranker.stage import apply_scores
from weir.core.types import Hit, Query, Run


def test_apply_scores_never_drops_or_invents():
    hits = [Hit(f"d{i}", 10.0 - i, i + 1) for i in range(6)]
    run = Run({"q": hits, "other": [Hit("x", 1.0, 1)]})
    out = apply_scores([Query("q", "t")], run, 3, {"q": [0.1, 0.9, 0.5]}, "r")
    assert [h.doc_id for h in out["q"]] == ["d1", "d2", "d0", "d3", "d4", "d5"]
    assert [h.rank for h in out["q"]] == [1, 2, 3, 4, 5, 6]
    assert all(a.score > b.score for a, b in zip(out["q"], out["q"][1:]))
    assert out["q"][0].stage_scores["r"] == pytest.approx(0.9)
    assert [h.doc_id for h in out["other"]] == ["x"]
    assert hits[0].score == 10.0  # the input run is not changed
