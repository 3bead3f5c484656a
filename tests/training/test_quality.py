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


def test_an_unknown_standardization_is_refused_before_any_data_is_read(tmp_path):
    config = QualityTrainConfig(estimator="surface", train=["nowhere:t:q"], out=str(tmp_path / "m"),
                                standardize="corpus")
    with pytest.raises(InputError, match="standardize='corpus'.*sources, collection"):
        train(config, log=lambda _: None)
    assert not (tmp_path / "m").exists()


def test_a_model_standardized_within_the_collection_scores_a_corpus_the_same_whatever_its_scale(tmp_path):
    """`standardize = "collection"`: the surface features are read against the corpus's own mean and spread, so a
    collection whose passages are all twice as long (every feature shifted and scaled) is pruned the same way."""
    import lightgbm as lgb

    from weir.indexer.quality.base import standardized_within
    from weir.indexer.quality.gbdt import CARD, MODEL, SurfaceModelQuality
    from weir.indexer.quality.learned import head_inputs
    from weir.indexer.quality.surface import FEATURES

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(FEATURES)))
    y = (x[:, 0] + 0.5 * rng.normal(size=400) > 0).astype(float)
    booster = lgb.train({"objective": "binary", "verbose": -1, "num_threads": 1}, lgb.Dataset(x, y), 20)
    booster.save_model(str(tmp_path / MODEL))
    for standardize in ("sources", "collection"):
        (tmp_path / CARD).write_text(json.dumps({"features": list(FEATURES),
                                                 "parameters": {"standardize": standardize}}))
        model = SurfaceModelQuality(tmp_path)
        assert model.per_document is (standardize == "sources")  # within: a score depends on the whole corpus
        same = np.allclose(model.margins(x), model.margins(3.0 * x + 5.0), atol=1e-4)
        assert same is (standardize == "collection")
    z = standardized_within(3.0 * x + 5.0)
    assert np.allclose(z.mean(axis=0), 0, atol=1e-5) and np.allclose(z.std(axis=0), 1, atol=1e-4)
    pooled = rng.normal(size=(400, 8))
    within = head_inputs(pooled, x, np.zeros(len(FEATURES)), np.ones(len(FEATURES)), within=True)
    assert within.shape == (400, 8 + len(FEATURES)) and np.allclose(within[:, :8], standardized_within(pooled))
    (tmp_path / CARD).write_text(json.dumps({"features": list(FEATURES), "parameters": {"standardize": "x"}}))
    with pytest.raises(InputError, match="unknown standardize 'x'"):
        SurfaceModelQuality(tmp_path)
