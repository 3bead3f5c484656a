"""How `weir train quality` weighs its sources: each its share of the loss; with ``balance``, half over its positives
and half over its negatives, so a source's share of positives cannot be learnt; a source without one of the two is
refused under ``balance`` before any model is trained."""

from __future__ import annotations

import json

import numpy as np
import pytest

from weir.core.types import InputError
from weir.training.common import TrainingSet
from weir.training.quality import QualityExamples, QualityTrainConfig, _example_weights, train


def _source(labels: list[float], weight: float = 1.0) -> QualityExamples:
    spec = TrainingSet(collection="c", topics="t", qrels="q", weight=weight)
    return QualityExamples(spec, [], [], [], np.arange(len(labels)), np.array(labels))


def test_each_source_weighs_its_share_and_balance_halves_it_between_the_labels():
    a, b = _source([1, 1, 1, 0]), _source([1, 0, 0, 0, 0, 0], weight=2.0)
    plain = _example_weights([a, b], balance=False)
    assert plain[:4].sum() == pytest.approx(2 * 1.0) and plain[4:].sum() == pytest.approx(2 * 2.0)  # x2 sources
    assert len(set(plain[:4])) == 1 and len(set(plain[4:])) == 1
    balanced = _example_weights([a, b], balance=True)
    for s, w in ((a, balanced[:4]), (b, balanced[4:])):
        positives, negatives = w[s.labels > 0].sum(), w[s.labels == 0].sum()
        assert positives == pytest.approx(negatives) == pytest.approx(s.spec.weight)  # x2 sources / 2 halves
        assert len(set(w[s.labels > 0])) == 1 and len(set(w[s.labels == 0])) == 1


def test_balance_refuses_a_source_every_passage_of_which_is_relevant(tmp_path):
    coll = tmp_path / "coll"
    coll.mkdir()
    docs = [{"id": f"d{i}", "title": "", "text": f"passage {i} about the word w{i}"} for i in range(6)]
    (coll / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (coll / "queries.tsv").write_text("".join(f"q{i}\tw{i}\n" for i in range(6)))
    (coll / "qrels.txt").write_text("".join(f"q{i} 0 d{i} 1\n" for i in range(6)))  # every passage judged relevant
    config = QualityTrainConfig(estimator="surface", train=[f"{coll}:{coll}/queries.tsv:{coll}/qrels.txt"],
                                out=str(tmp_path / "model"), balance=True, rounds=10)
    with pytest.raises(InputError, match="no negative training documents"):
        train(config, log=lambda _: None)
    assert not (tmp_path / "model").exists()
