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


def _apply_per_hit(run: Run, depth: int, scores: dict, name: str) -> dict:
    """apply_scores as it was written per Hit, the reference of the array version."""
    from weir.core.types import replace_hit

    out = {}
    for qid, hits in run.items():
        head, tail, new = hits[:depth], hits[depth:], scores.get(qid)
        if new is None or not head:
            out[qid] = [replace_hit(h) for h in hits]
            continue
        rescored = []
        for h, s in zip(head, new):
            h = replace_hit(h, score=float(s))
            h.stage_scores[name] = float(s)
            rescored.append(h)
        rescored.sort(key=lambda h: (-h.score, h.doc_id))
        floor = rescored[-1].score
        merged = rescored + [replace_hit(h, score=floor - 1.0 - i) for i, h in enumerate(tail)]
        for rank, h in enumerate(merged, start=1):
            h.rank = rank
        out[qid] = merged
    return out


def test_apply_scores_on_arrays_is_the_per_hit_rescoring():
    import numpy as np

    rng = np.random.default_rng(5)
    for _ in range(30):
        n = int(rng.integers(0, 40))
        ids = rng.permutation([f"d{i}" for i in range(n)]).tolist()
        hits = [Hit(d, float(s), r, {"first": float(s), **({"x": 1.0} if r % 3 else {})})
                for r, (d, s) in enumerate(zip(ids, sorted(rng.integers(0, 9, n) / 2, reverse=True)), 1)]
        depth = int(rng.integers(1, 30))
        new = {"q": (rng.integers(0, 4, min(depth, n)) / 4).astype(np.float32).tolist()} if n else {}
        out = apply_scores([Query("q", "t")], Run({"q": hits}), depth, new, "r")
        assert out == _apply_per_hit(Run({"q": hits}), depth, new, "r")
