"""The one training-set type: both spellings parse to one TrainingSet, bad input is a clear error, and a trainer is
told which fields it needs and which it would ignore."""

from __future__ import annotations

import pytest

from weir.core.types import InputError
from weir.training.common import TrainingSet


@pytest.fixture
def files(tmp_path):
    for name in ("corpus.jsonl", "topics.tsv", "qrels.txt"):
        (tmp_path / name).write_text("")
    return tmp_path


def test_both_spellings_are_one_training_set(files):
    c, t, q = files, files / "topics.tsv", files / "qrels.txt"
    colon = TrainingSet.parse(f"{c}:{t}:{q}:2.5:2")
    pairs = TrainingSet.parse(f"collection={c},topics={t},qrels={q},weight=2.5,min_rel=2")
    assert colon == pairs == TrainingSet(collection=str(c), topics=str(t), qrels=str(q), weight=2.5, min_rel=2)
    assert TrainingSet.parse(f"{c}:{t}:{q}").weight == 1.0 and TrainingSet.parse(f"{c}:{t}:{q}").min_rel is None
    ltr = TrainingSet.parse(f"index=idx,topics={t},qrels={q},depth=20,max_queries=5,stage_runs=attention:a.trec;x:b")
    assert (ltr.index, ltr.depth, ltr.max_queries, ltr.stage_runs) == ("idx", 20, 5, "attention:a.trec;x:b")
    assert ltr.record(("index", "depth")) == {"index": "idx", "depth": 20}


@pytest.mark.parametrize("text, message", [
    ("a:b", "COLLECTION:TOPICS:QRELS"), ("{c}:{t}:missing.txt", "does not exist"), ("{c}:{t}:{q}:0", "positive"),
    ("{c}:{t}:{q}:heavy", "WEIGHT is a number"), ("{c}:{t}:{q}:1:two", "MIN_REL an integer"),
    ("index=i,topics={t}", "lacks qrels"), ("index=i,topics={t},qrels={q},colour=red", "key=value"),
    ("index=i,topics={t},qrels={q},depth=deep", "integers"),
])
def test_bad_training_sets_are_clear_errors(files, text, message):
    with pytest.raises(InputError, match=message):
        TrainingSet.parse(text.format(c=files, t=files / "topics.tsv", q=files / "qrels.txt"))


def test_a_trainer_says_what_it_needs_and_refuses_what_it_would_ignore(files):
    judged = TrainingSet.parse(f"{files}:{files / 'topics.tsv'}:{files / 'qrels.txt'}:2")
    assert judged.checked("weir train quality", needs=("collection",), takes=("weight", "min_rel")) is judged
    with pytest.raises(InputError, match=r"needs index=.*missing: index.*does not take collection, weight"):
        judged.checked("weir train ltr", needs=("index",), takes=("candidates", "first_stage", "depth"))
    also = TrainingSet(index="i", topics="t", qrels="q", first_stage="bm25")
    with pytest.raises(InputError, match=r"missing: candidates.*does not take first_stage"):
        also.checked("weir train attention --also", needs=("index", "candidates"), takes=("depth",))
