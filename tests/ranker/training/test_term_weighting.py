"""A few training steps of each term weighting head write a model card."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("kind", ["deepct", "deepimpact"])
def test_training_writes_a_model_card(learned_tiny, tmp_path, monkeypatch, kind):
    from ranker.training.term_weighting import TrainConfig, train

    monkeypatch.setenv("WEIR_CACHE", str(tmp_path / "cache"))
    coll, _, _ = learned_tiny
    card = train(TrainConfig(kind=kind, collection=str(coll), queries=str(coll / "queries.tsv"),
                             qrels=str(coll / "qrels.txt"), out=str(tmp_path / kind), epochs=2, negatives=2,
                             val_fraction=0.34, max_length=32, titles=True), log=lambda m: None)
    saved = json.loads((tmp_path / kind / "card.json").read_text())
    assert saved["kind"] == kind and saved["head_sha256"] and saved["training_data"]["validation_queries"] == 1
    assert saved["metrics"]["validation"]["epoch"] in (1, 2) and card["parameters"]["seed"] == 13
    assert (kind == "deepimpact") == ("fusion" in saved)
