"""The document pass (weir.indexer.document_pass) and the attention component it writes (weir.indexer.passage_states):
one forward per passage for every consumer; the states the reranker reads at query time, stored."""

from __future__ import annotations

import numpy as np
import pytest

from weir.core.types import InputError


def test_text_input_first_window_is_what_a_dense_encoder_reads():
    from weir.indexer.encoder import Encoder
    from weir.indexer.weighting.backbone import Backbone

    texts = ["Statins (e.g. atorvastatin) reduce LDL-cholesterol by 30%!", "", "...", "word " * 400]
    encoder = Encoder(backend="onnx")
    passed = Backbone(input="text", max_length=encoder.passage_max_length, backend="onnx").run(
        texts, pool=encoder.pool, states=True)
    own = encoder.tokenizer(texts, truncation=True, max_length=encoder.passage_max_length)["input_ids"]
    vectors = encoder.encode_passages(texts)
    for p, ids, v in zip(passed, own, vectors):
        assert p.window == list(ids)  # punctuation included, cut where the encoder cuts
        assert p.states.shape == (len(ids), encoder.dim)
        np.testing.assert_allclose(np.linalg.norm(p.states, axis=1), 1.0, rtol=1e-5)
        assert float(p.pooled @ v) > 0.9999
    words = Backbone(input="words", backend="onnx").run(texts[:1])[0]
    assert words.terms == passed[0].terms  # the same terms either way; their vectors read in another context


def test_states_quantize_within_half_a_step():
    from weir.indexer.passage_states import dequantize, quantize

    rng = np.random.default_rng(0)
    states = rng.normal(size=(50, 384)).astype(np.float32)
    states /= np.linalg.norm(states, axis=1, keepdims=True)
    codes, scales = quantize(states)
    assert codes.dtype == np.int8 and np.abs(codes).max() == 127
    assert np.all(np.abs(dequantize(codes, scales) - states) <= scales[:, None] / 2 + 1e-7)


@pytest.mark.data
def test_attention_component_scores_as_computed_states_do(index_factory):
    """ADI with the attention component: the states stored for a passage are what the reranker computes from its
    text, and bm25>>attention gives the same scores from the index as without it (1e-3); a words-only pass refuses
    the component."""
    import weir
    from weir.indexer.index_dir import verify
    from weir.indexer.passage_states import PassageStates

    path = index_factory("adi", "bm25,dense,attention")
    index = weir.Index(path)
    verify(path)
    entry = index.manifest["components"]["attention"]
    assert entry["passages"] == index.num_docs and entry["precision"] == "int8"
    assert [p["consumers"] for p in index.manifest["document_pass"]["passes"]] == [["dense", "attention"]]
    stored_pipeline = weir.pipeline("bm25>>attention", index)
    reranker = stored_pipeline.stages[-1]
    assert reranker.states_computed_because is None, reranker.states_computed_because  # reads the component
    topics = [weir.Query(str(i), t) for i, t in enumerate(["computer retrieval of documents", "indexing by citation"])]
    stored = stored_pipeline.search(topics, k=10)
    reranker.model.stored = None  # the same reranker computing the states at query time
    reranker.clear_caches()
    computed = stored_pipeline.search(topics, k=10)
    for q in topics:
        a = {h.doc_id: h.score for h in stored[q.id]}
        b = {h.doc_id: h.score for h in computed[q.id]}
        assert a.keys() == b.keys()
        assert max(abs(a[d] - b[d]) for d in a) <= 1e-3
    states = PassageStates(index.component_path("attention"))
    doc = next(iter(a))
    text = index.documents([doc])[doc].contents
    own = reranker.model.encode_states([text], reranker.model.passage_length)[0].numpy()
    assert states.get([doc])[0].shape == own.shape
    from weir.indexer.document_pass import plan_passes

    with pytest.raises(InputError, match="pass-input"):
        plan_passes([], {"input": "words"}, states=True)


@pytest.mark.data
def test_upgrade_adds_the_attention_component_an_index_built_with_it_has(index_factory, tmp_path):
    """`weir index upgrade --with attention` on a bm25 index: the states of every stored passage, in the component's
    row order, the manifest's checksums updated, the same states as a build with the component."""
    import shutil

    import weir
    from weir.cli import main
    from weir.indexer.index_dir import verify

    path = tmp_path / "adi"
    shutil.copytree(index_factory("adi", "bm25"), path)
    assert main(["index", "upgrade", str(path), "--with", "attention"]) == 0
    verify(path)
    upgraded, built = weir.Index(path), weir.Index(index_factory("adi", "bm25,dense,attention"))
    ids = list(built.passage_states.docids)
    assert sorted(upgraded.passage_states.docids) == sorted(ids)
    for x, y in zip(built.passage_states.get(ids), upgraded.passage_states.get(ids)):
        np.testing.assert_allclose(x, y, atol=5e-3)  # the int8 rounding where a last bit differs (other batches)
    assert main(["index", "upgrade", str(path), "--with", "attention"]) == 0  # up to date: nothing done
    assert main(["index", "upgrade", str(path), "--with", "dense"]) == 2


@pytest.mark.data
def test_a_sharded_reranker_reads_every_shards_states(index_factory, tmp_path):
    """A shard set built with the attention component: each shard stores its own passages' states, and the sharded
    service's reranker (over every shard's documents, weir.service.sharded.deployments.ShardDocuments) reads them from
    the shards, scoring the single index's candidates as the single index's reranker does (1e-3)."""
    import weir
    from tests.conftest import collection
    from weir.indexer.shard_set import build_shard_set
    from weir.ranker import registry
    from weir.service.sharded.deployments import ShardDocuments

    build_shard_set(collection("adi"), tmp_path / "set", 2, components=("bm25", "attention"))
    shards = ShardDocuments([str(tmp_path / "set" / f"shard-{i}-of-2") for i in range(2)])
    single = weir.Index(index_factory("adi", "bm25,dense,attention"))
    sharded_reranker, single_reranker = (registry.build_stage("attention", i) for i in (shards, single))
    assert sharded_reranker.states_computed_because is None  # reads the shards' states
    assert single_reranker.states_computed_because is None
    assert len(shards.passage_states) == single.num_docs
    topics = [weir.Query("q", "computer retrieval of documents")]
    candidates = weir.pipeline("bm25", single).search(topics, k=30)
    a = sharded_reranker.rerank(topics, candidates, 30)["q"]
    b = single_reranker.rerank(topics, candidates, 30)["q"]
    assert [h.doc_id for h in a] == [h.doc_id for h in b]
    assert max(abs(x.score - y.score) for x, y in zip(a, b)) <= 1e-3
