"""Runs: TREC run files read and written, identical ids dropped, malformed lines named."""

from __future__ import annotations

import pytest

from weir.core.types import Hit, InputError, Run


def test_trec_run_round_trip_sorts_by_score(tmp_path):
    run = Run({"q1": [Hit("d2", 1.5), Hit("d1", 2.5), Hit("d3", 1.5)]}).ranked()
    assert [(h.doc_id, h.rank) for h in run["q1"]] == [("d1", 1), ("d2", 2), ("d3", 3)]
    path = tmp_path / "run.trec"
    run.write_trec(path, tag="t")
    assert path.read_text().splitlines()[0] == "q1 Q0 d1 1 2.500000 t"
    back = Run.read_trec(path)
    assert [(h.doc_id, h.rank, h.score) for h in back["q1"]] == [("d1", 1, 2.5), ("d2", 2, 1.5), ("d3", 3, 1.5)]


def test_identical_ids_are_dropped_and_ranks_renumbered():
    run = Run({"a": [Hit("a", 3.0, 1), Hit("b", 2.0, 2), Hit("c", 1.0, 3)]})
    assert [(h.doc_id, h.rank) for h in run.without_identical_ids()["a"]] == [("b", 1), ("c", 2)]


def test_malformed_run_line_is_named(tmp_path):
    path = tmp_path / "bad.trec"
    path.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 two 1.0 t\n")
    with pytest.raises(InputError, match="bad.trec:2"):
        Run.read_trec(path)
