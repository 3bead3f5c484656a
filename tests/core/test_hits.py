"""Hits as arrays: the bulk TREC writer gives Python's bytes, and a run holding arrays behaves as one holding hits."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from weir.core.hits import DocIds, Ranked, fixed6, trec_lines
from weir.core.types import Hit, Run


def python6(values) -> list[bytes]:
    return [f"{v:.6f}".encode() for v in np.asarray(values, dtype=np.float64).tolist()]


def test_six_decimals_as_python_formats_them():
    rng = np.random.default_rng(7)
    halves = (np.arange(-2000, 2000) + 0.5) / 1e6  # decimal halves: the rounding's hard cases
    values = np.concatenate([
        rng.standard_normal(50_000) * 10,
        rng.random(50_000).astype(np.float32).astype(np.float64) * 100,
        rng.integers(0, 5000, 20_000) / 8.0,  # exact binary fractions (impact sums, minmax with power-of-2 spans)
        halves, np.nextafter(halves, 1), np.nextafter(halves, -1),
        rng.standard_normal(1000) * 1e-7, rng.standard_normal(1000) * 1e12,
        [0.0, -0.0, 1e-300, -1e-300, 2.0 ** 52, 1e20, -1e20, np.inf, -np.inf, np.nan, 0.5, 1.5, 2.5e-6, 0.0000005],
    ])
    assert fixed6(values) == python6(values)
    as32 = rng.standard_normal(20_000).astype(np.float32) * 30
    assert fixed6(as32) == python6(as32)


def ranked(ids, docs, scores, name="s", dtype=np.float32):
    table = ids if isinstance(ids, DocIds) else DocIds(ids)
    return Ranked.of_stage(table, np.asarray(docs, dtype=np.int64), np.asarray(scores, dtype=dtype), name)


def test_run_of_arrays_writes_the_lines_of_its_hits(tmp_path):
    table = DocIds(["d0", "dé1", "", "d 3", "d4"])
    run = Run({"q1": ranked(table, [4, 1, 0], [3.25, 2.5, 2.5]), "q2": [Hit("x", -1e-9, 1)],
               "q 3": ranked(table, [3, 2], [1.0, 0.0], dtype=np.float64), "q4": ranked(table, [], [])})
    path, expected = tmp_path / "a.trec", tmp_path / "b.trec"
    run.write_trec(path, tag="t")
    Run({q: [Hit(h.doc_id, h.score, h.rank) for h in hits] for q, hits in run.items()}).write_trec(expected, tag="t")
    assert path.read_bytes() == expected.read_bytes()
    assert path.read_text(encoding="utf-8").splitlines()[0] == "q1 Q0 d4 1 3.250000 t"
    assert trec_lines([("q", ranked(["a\0b"], [0], [1.0]))], "t") is None  # a NUL: the line-by-line writer's


def test_hits_are_made_on_first_access_and_kept():
    run = Run({"q": ranked(["a", "b", "c"], [2, 0], [2.0, 1.5], name="bm25")}, timings={"bm25": 1.0})
    assert "q" in run and len(run) == 1 and run.hits_count() == 2
    assert run.to_dict() == {"q": {"c": 2.0, "a": 1.5}}
    hits = run["q"]
    assert hits == [Hit("c", 2.0, 1, {"bm25": 2.0}), Hit("a", 1.5, 2, {"bm25": 1.5})]
    hits[0].score = 9.0
    assert run["q"] is hits and run.get("q")[0].score == 9.0 and run.ranking("q").scores[0] == 9.0
    assert dict(run) == {"q": hits} and pickle.loads(pickle.dumps(run)) == run
    assert run.truncated(1).timings == {"bm25": 1.0}


def test_array_runs_truncate_rank_and_drop_identical_ids_as_hit_runs_do():
    table = DocIds(["q", "b", "a", "c"])
    scores = [3.0, 2.0, 2.0, 1.0]
    arrays = Run({"q": Ranked(table, np.array([1, 2, 0, 3]), np.array(scores), {"x": np.array(scores),
                                                                                  "y": np.array([1, np.nan, 2, 3])})})
    hits = Run({"q": [Hit(d, s, r) for r, (d, s) in enumerate(zip(["b", "a", "q", "c"], scores), 1)]})
    for make in (lambda r: r.ranked(), lambda r: r.without_identical_ids(), lambda r: r.truncated(2)):
        assert [(h.doc_id, h.score, h.rank) for h in make(Run(arrays))["q"]] == \
               [(h.doc_id, h.score, h.rank) for h in make(Run(hits))["q"]]
    assert [h.stage_scores for h in arrays["q"]] == [{"x": 3.0, "y": 1.0}, {"x": 2.0}, {"x": 2.0, "y": 2.0},
                                                     {"x": 1.0, "y": 3.0}]


def test_doc_ids_find_and_rank():
    table = DocIds(["b", "a", "c"])
    assert table.find(["c", "z", "b"]).tolist() == [2, -1, 0]
    assert table.rank.tolist() == [1, 0, 2]
    with pytest.raises(KeyError):
        Run()["missing"]


def test_doc_ids_translate_another_numbering_once_and_pickle_without_it():
    import pickle

    table, other = DocIds(["b", "a", "c"]), DocIds(["c", "z", "b", "a"])
    assert table.translate(other).tolist() == [2, -1, 0, 1]
    assert table.translate(other) is table.translate(other)  # made once per pair
    assert table.translate(DocIds(["a"])).tolist() == [1]
    copy = pickle.loads(pickle.dumps(table))
    assert copy.ids.tolist() == ["b", "a", "c"] and not copy._into  # noqa: SLF001
    assert copy.translate(other).tolist() == [2, -1, 0, 1]
