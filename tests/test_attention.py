"""Attention reranker: the score of a tiny input equals a hand computation from the model's attention tensors, and
the reranker never drops or invents candidates. Uses the untrained backbone (no training in tests)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from weir.types import Hit, Query, Run

HEADS = [[5, 3], [2, 0]]
WEIGHTS = [0.7, -0.2]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("attn")
    (path / "heads.json").write_text(json.dumps({"kind": "attention", "base_model": "all-MiniLM-L6-v2",
                                                 "max_length": 64, "heads": HEADS, "weights": WEIGHTS, "bias": 0.1,
                                                 "calibrate": True, "idf": False}))
    return path


def _by_hand(model, query: str, passage: str) -> np.ndarray:
    """Per head: mean over query word pieces of the attention they send to passage word pieces."""
    import torch

    enc = model.tokenizer(query, passage, return_tensors="pt")
    with torch.no_grad():
        attn = model.model(**enc, output_attentions=True).attentions
    tokens = enc["input_ids"][0].tolist()
    sep = [i for i, t in enumerate(tokens) if t == model.tokenizer.sep_token_id]
    q_pos = list(range(1, sep[0]))
    p_pos = list(range(sep[0] + 1, sep[1]))
    out = []
    for layer, head in HEADS:
        A = attn[layer][0, head].numpy()
        out.append(np.mean([A[i, p_pos].sum() for i in q_pos]))
    return np.asarray(out)


def test_attention_score_equals_hand_computation(model_dir):
    from ranker.rerankers.attention import AttentionModel, combine

    model = AttentionModel(model_dir, device="cpu")
    q, p = "coffee health", "Drinking coffee may lower the risk of some diseases."
    masses = model.masses([q], [p], batch_size=4)
    na = model.masses(["N/A"], [p], batch_size=4)
    calibrated = _by_hand(model, q, p) - _by_hand(model, "N/A", p)
    np.testing.assert_allclose(masses[0].mean(-1) - na[0].mean(-1), calibrated, rtol=1e-4, atol=1e-6)
    scores = combine(model, [(Query("q", q), "d")], masses, {"d": na[0].mean(-1)})
    assert scores["q"][0] == pytest.approx(float(calibrated @ np.asarray(WEIGHTS) + 0.1), rel=1e-4, abs=1e-6)
    # batching with padding (another, longer pair in the same batch) changes nothing
    both = model.masses([q, "a much longer query about coffee"], [p, p + " And more words here."], batch_size=4)
    np.testing.assert_allclose(both[0], masses[0], rtol=1e-4, atol=1e-6)


def test_attention_reranker_keeps_candidates(model_dir, tmp_path):
    from indexer.build import build_index
    from ranker.index import Index
    from ranker.rerankers.attention import AttentionReranker

    (tmp_path / "c").mkdir()
    with open(tmp_path / "c" / "corpus.jsonl", "w") as f:
        for i, text in enumerate(["coffee and health", "tea leaves", "coffee beans roast", "rain in spain"]):
            f.write(json.dumps({"id": f"d{i}", "title": "", "text": text}) + "\n")
    build_index(tmp_path / "c", tmp_path / "idx", components=("bm25",))
    reranker = AttentionReranker(Index(tmp_path / "idx"), model_dir, depth=3, device="cpu", batch_size=2)
    run = Run({"q1": [Hit(f"d{i}", 4.0 - i, i + 1) for i in range(4)], "q2": [Hit("d3", 1.0, 1)]})
    out = reranker([Query("q1", "coffee"), Query("q2", "spain")], run, k=10)
    assert sorted(h.doc_id for h in out["q1"]) == ["d0", "d1", "d2", "d3"]
    assert out["q1"][-1].doc_id == "d3"  # below depth 3: stays after the reranked ones
    assert [h.doc_id for h in out["q2"]] == ["d3"]
    assert [h.rank for h in out["q1"]] == [1, 2, 3, 4]


def test_cached_top_layers_equal_full_forward(model_dir):
    """Training and CV scoring run only the trained top layers over the cached output of the frozen ones: the head
    masses they give equal a full forward of the model (AttentionModel)."""
    from ranker.rerankers.attention import AttentionModel
    from ranker.train_attention import AttnTrainConfig, FrozenCache, Trainable

    model = AttentionModel(model_dir, device="cpu")
    qs, ps = ["coffee health", "a longer query about coffee"], ["Drinking coffee may lower risk.", "Tea, and more words."]
    full = [m.mean(-1) for m in model.masses(qs, ps, batch_size=4)]
    config = AttnTrainConfig(kind="attention", index="", topics="", qrels="", candidates="", out="", max_length=64,
                             train_layers=1)
    trainer = Trainable(config, "cpu", (model.tokenizer, model.model))
    cache = FrozenCache(model.tokenizer, model.model, trainer.first_trained, 64)
    cache.add([(q, f"d{i}", p) for i, (q, p) in enumerate(zip(qs, ps))])
    feats = trainer.head_features(cache, [cache.index[(q, f"d{i}")] for i, q in enumerate(qs)])
    cols = [layer * 12 + head for layer, head in HEADS]
    np.testing.assert_allclose(feats[:, cols], np.stack(full), rtol=1e-4, atol=1e-6)
