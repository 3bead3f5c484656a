"""Attention reranker: the score of a tiny input equals a hand computation from the model's attention tensors, and
the reranker never drops or invents candidates. Uses the untrained backbone (no training in tests)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import HEADS, WEIGHTS
from weir.core.types import Hit, Query, Run


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
    from weir.ranker.rerankers.attention import AttentionModel, combine

    model = AttentionModel(model_dir, device="cpu", backend="onnx")  # fp32: equal to the hand computation
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


def _tiny_index(tmp_path):
    """A four-document BM25 index at tmp_path/idx."""
    from weir.indexer.build import build_index

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "corpus.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "title": "", "text": text}) + "\n"
        for i, text in enumerate(["coffee and health", "tea leaves", "coffee beans roast", "rain in spain"])))
    build_index(tmp_path / "c", tmp_path / "idx", components=("bm25",))


def test_attention_reranker_keeps_candidates(model_dir, tmp_path):
    from weir.indexer.index_dir import Index
    from weir.ranker.rerankers.attention import AttentionReranker

    _tiny_index(tmp_path)
    # a calibration cache of one passage: a batch of four is still answered (each computed before any is dropped)
    reranker = AttentionReranker(Index(tmp_path / "idx"), model_dir, depth=3, device="cpu", batch_size=2,
                                 na_cache_size=1)
    run = Run({"q1": [Hit(f"d{i}", 4.0 - i, i + 1) for i in range(4)], "q2": [Hit("d3", 1.0, 1)]})
    out = reranker([Query("q1", "coffee"), Query("q2", "spain")], run, k=10)
    assert sorted(h.doc_id for h in out["q1"]) == ["d0", "d1", "d2", "d3"]
    assert out["q1"][-1].doc_id == "d3"  # below depth 3: stays after the reranked ones
    assert [h.doc_id for h in out["q2"]] == ["d3"]
    assert [h.rank for h in out["q1"]] == [1, 2, 3, 4]


@pytest.fixture(scope="module")
def late_dir(tmp_path_factory):
    """A late-interaction model directory: the similarity-initialized relevance layer, perturbed (two heads)."""
    import torch

    from weir.ranker.rerankers.relevance_attention import RelevanceAttention

    path = tmp_path_factory.mktemp("late")
    torch.manual_seed(0)
    layer = RelevanceAttention(384, heads=2, temperature=0.05)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.5 * torch.randn_like(p))
    torch.save(layer.state_dict(), path / "relevance.pt")
    (path / "heads.json").write_text(json.dumps({
        "kind": "attention", "interaction": "late", "base_model": "all-MiniLM-L6-v2", "max_length": 64,
        "relevance_heads": 2, "temperature": 0.05, "heads": [[6, 0], [6, 1]], "weights": [0.6, 0.4],
        "calibration_weights": [0.3, -0.1], "bias": 0.0, "calibrate": True, "idf": False}))
    return path


def _segment_states(model, text: str, max_length: int = 64):
    import torch

    enc = model.tokenizer(text, return_tensors="pt", truncation=True, max_length=max_length)
    with torch.no_grad():
        h = model.model(**enc).last_hidden_state[0]
    return torch.nn.functional.normalize(h, dim=-1)


def _late_by_hand(model, query: str, passage: str):
    """Per relevance head: mean over query word pieces of log(attention mass on the passage's word pieces), from the
    full attention matrix of the relevance layer over [CLS] q [SEP] [CLS] p [SEP]."""
    import torch

    from weir.indexer.passage_states import quantized

    q = _segment_states(model, query)
    p = torch.from_numpy(quantized(_segment_states(model, passage, model.passage_length).numpy()))  # as stored
    x = torch.cat([q, p])
    layer, H, D = model.relevance, model.relevance.heads, model.relevance.head_dim
    with torch.no_grad():
        Q = layer.query(x).view(len(x), H, D).transpose(0, 1)
        K = layer.key(x).view(len(x), H, D).transpose(0, 1)
        A = torch.softmax(Q @ K.transpose(1, 2) / D ** 0.5, -1)  # (H, L, L): the layer's attention probabilities
    q_words = range(1, len(q) - 1)
    p_words = [len(q) + j for j in range(1, len(p) - 1)]
    return np.asarray([np.mean([float(torch.log(A[h, i, p_words].sum())) for i in q_words]) for h in range(H)])


def test_late_attention_score_equals_hand_computation(late_dir):
    from weir.ranker.rerankers.attention import AttentionModel, combine

    model = AttentionModel(late_dir, device="cpu", backend="onnx")  # fp32: equal to the hand computation
    q, p = "coffee health", "Drinking coffee may lower the risk of some diseases."
    masses = model.masses([q], [p], batch_size=4)
    na = model.masses(["N/A"], [p], batch_size=4)
    np.testing.assert_allclose(masses[0].mean(-1), _late_by_hand(model, q, p), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(na[0].mean(-1), _late_by_hand(model, "N/A", p), rtol=1e-4, atol=1e-5)
    scores = combine(model, [(Query("q", q), "d")], masses, {"d": na[0].mean(-1)})
    want = masses[0].mean(-1) @ np.asarray([0.6, 0.4]) - na[0].mean(-1) @ np.asarray([0.3, -0.1])
    assert scores["q"][0] == pytest.approx(float(want), rel=1e-5)
    both = model.masses([q, "a much longer query about coffee"], [p, p + " And more words here."], batch_size=4)
    np.testing.assert_allclose(both[0], masses[0], rtol=1e-4, atol=1e-5)


def test_similarity_initialization_is_soft_maxsim():
    """Before training, one full-width head's log mass is the query word piece's soft MaxSim over the passage minus
    its log-normalizer over the whole input (token cosines over the temperature)."""
    import torch

    from weir.ranker.rerankers.relevance_attention import RelevanceAttention, pad_states

    torch.manual_seed(1)
    q = torch.nn.functional.normalize(torch.randn(5, 384), dim=-1)
    p = torch.nn.functional.normalize(torch.randn(9, 384), dim=-1)
    layer = RelevanceAttention(384, heads=1, temperature=0.05)
    qx, qv, _ = pad_states([q])
    px, pv, pw = pad_states([p])
    with torch.no_grad():
        got = layer(qx, qv, px, pv, pw)[0, 0]
    sim = q @ torch.cat([q, p]).T / 0.05
    want = torch.logsumexp(sim[:, 5 + 1:5 + 8], -1) - torch.logsumexp(sim, -1)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_segments_in_one_input_equal_separate_encodings(late_dir):
    """PreTTR: [CLS] q [SEP] [CLS] p [SEP] with a block-diagonal attention mask and positions restarting per segment
    gives every token the state of its segment encoded alone, which is what the late reranker computes."""
    import torch

    from weir.ranker.rerankers.attention import AttentionModel

    model = AttentionModel(late_dir, device="cpu", backend="onnx")  # fp32: equal to the hand computation
    tok = model.tokenizer
    qi = tok("coffee health")["input_ids"]
    pi = tok("Drinking coffee may lower the risk of some diseases.")["input_ids"]
    L = len(qi) + len(pi)
    mask = torch.zeros(1, L, L, dtype=torch.long)
    mask[0, :len(qi), :len(qi)] = 1
    mask[0, len(qi):, len(qi):] = 1
    with torch.no_grad():
        joint = model.model(input_ids=torch.tensor([qi + pi]), attention_mask=mask[:, None].bool(),
                            position_ids=torch.tensor([list(range(len(qi))) + list(range(len(pi)))]),
                            token_type_ids=torch.zeros(1, L, dtype=torch.long)).last_hidden_state[0]
    joint = torch.nn.functional.normalize(joint, dim=-1)
    torch.testing.assert_close(joint[:len(qi)], _segment_states(model, "coffee health"), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(joint[len(qi):], _segment_states(model, "Drinking coffee may lower the risk of some "
                                                                       "diseases."), rtol=1e-4, atol=1e-4)


def test_late_reranker_keeps_candidates(late_dir, tmp_path):
    from weir.indexer.index_dir import Index
    from weir.ranker.rerankers.attention import AttentionReranker

    _tiny_index(tmp_path)
    reranker = AttentionReranker(Index(tmp_path / "idx"), late_dir, depth=3, device="cpu", batch_size=2)
    run = Run({"q1": [Hit(f"d{i}", 4.0 - i, i + 1) for i in range(4)], "q2": [Hit("d3", 1.0, 1), Hit("d0", 0.5, 2)]})
    out = reranker([Query("q1", "coffee"), Query("q2", "spain")], run, k=10)
    assert sorted(h.doc_id for h in out["q1"]) == ["d0", "d1", "d2", "d3"]
    assert out["q1"][-1].doc_id == "d3"
    assert sorted(h.doc_id for h in out["q2"]) == ["d0", "d3"]
    assert out["q2"][0].doc_id == "d3"  # "spain" matches "rain in spain" best
