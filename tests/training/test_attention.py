"""Joint-interaction training runs only the trained top layers over the frozen layers' cached output: the same
head masses as a full forward."""

from __future__ import annotations

import numpy as np

from tests.conftest import HEADS


def test_cached_top_layers_equal_full_forward(model_dir):
    """Training and CV scoring run only the trained top layers over the cached output of the frozen ones: the head
    masses they give equal a full forward of the model (AttentionModel)."""
    from weir.ranker.rerankers.attention import AttentionModel
    from weir.training.attention import AttnTrainConfig
    from weir.training.attention_joint import Trainable
    from weir.training.frozen_cache import FrozenCache

    model = AttentionModel(model_dir, device="cpu", backend="onnx")  # fp32: equal to the hand computation
    qs, ps = ["coffee health", "a longer query about coffee"], ["Drinking coffee may lower risk.", "Tea, and more words."]
    full = [m.mean(-1) for m in model.masses(qs, ps, batch_size=4)]
    config = AttnTrainConfig(kind="attention", interaction="joint", index="", topics="", qrels="", candidates="",
                             out="", max_length=64, train_layers=1)
    trainer = Trainable(config, "cpu", (model.tokenizer, model.model))
    cache = FrozenCache(model.tokenizer, model.model, trainer.first_trained, 64)
    cache.add([(q, f"d{i}", p) for i, (q, p) in enumerate(zip(qs, ps))])
    feats = trainer.head_features(cache, [cache.index[(q, f"d{i}")] for i, q in enumerate(qs)])
    cols = [layer * 12 + head for layer, head in HEADS]
    np.testing.assert_allclose(feats[:, cols], np.stack(full), rtol=1e-4, atol=1e-6)
