"""Inference backends: an export equals fp32 torch on padded, mixed-length batches; a wrong or tampered export is
refused, never used; vectors of an inexact backend are never searched with another."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from weir.core.types import InputError

TEXTS = ["short", "a query about microglia", "Microglia are the resident immune cells of the brain. " * 12,
         "naïve café, 1,204 patients (aged 18-65); p < 0.001", "Passage retrieval ranks passages. " * 40]


@pytest.fixture(scope="module")
def backbone():
    from weir.core.runtime import load_pretrained

    return load_pretrained(None)


@pytest.fixture(scope="module")
def onnx_forward(backbone):
    """The default backbone's onnx export, made (or opened) in the user's cache as weir itself does."""
    from weir.core.inference import open_forward

    tokenizer, model = backbone
    return open_forward(model, tokenizer, "onnx", "cpu")


def _batch(tokenizer, texts):
    from weir.core.inference import feed

    return feed(tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="np"))


def test_onnx_export_equals_torch_on_padded_mixed_length_batches(backbone, onnx_forward):
    from weir.core.inference import TorchForward

    tokenizer, model = backbone
    check = onnx_forward.record["check"]
    assert len(set(check["lengths"])) == check["rows"] >= 7  # mixed lengths, single texts and pairs
    assert check["padded"]["max_abs_diff"] < 1e-4 and check["alone"]["max_abs_diff"] < 1e-4
    # texts it was not checked on, padded together, and each alone (no shape of the trace baked in)
    batch = _batch(tokenizer, TEXTS)
    ours, reference = onnx_forward(batch)["last_hidden_state"], TorchForward(model, "cpu")(batch)["last_hidden_state"]
    mask = batch["attention_mask"].astype(bool)
    assert len(set(mask.sum(1))) == len(TEXTS) and ours.shape == reference.shape
    assert np.abs(ours - reference)[mask].max() < 1e-4
    for i, n in enumerate(mask.sum(1)):
        alone = onnx_forward({k: v[i:i + 1, :n] for k, v in batch.items()})["last_hidden_state"][0]
        assert np.abs(alone - reference[i, :n]).max() < 1e-4


def test_export_with_attention_outputs_equals_torch(backbone, tmp_path, monkeypatch):
    from weir.core.inference import TorchForward, open_forward
    from weir.core.runtime import load_pretrained

    monkeypatch.setenv("WEIR_CACHE", str(tmp_path))
    tokenizer, _ = backbone
    _, eager = load_pretrained(None, attn_implementation="eager")
    heads = [(5, 3), (0, 1)]
    forward = open_forward(eager, tokenizer, "onnx", "cpu", heads=heads)
    batch = _batch(tokenizer, TEXTS[:4])
    ours, reference = forward(batch)["attentions"], TorchForward(eager, "cpu", heads=heads)(batch)["attentions"]
    width = batch["input_ids"].shape[1]
    assert ours.shape == reference.shape == (4, 2, width, width)
    mask = batch["attention_mask"].astype(bool)
    keep = mask[:, None, :, None] & mask[:, None, None, :]
    assert np.abs(np.where(keep, ours - reference, 0)).max() < 1e-5


def test_a_wrong_export_is_refused_and_not_written(backbone, tmp_path, monkeypatch):
    """The graph of the known wrong BERT exports (attention without the padding mask): refused by the check."""
    import weir.core.inference as inference
    from weir.core import layers

    monkeypatch.setenv("WEIR_CACHE", str(tmp_path))
    tokenizer, model = backbone
    right = layers.export_graph

    def maskless(model, heads):
        graph = right(model, heads)
        forward = graph.forward
        graph.forward = lambda input_ids, attention_mask, token_type_ids: forward(
            input_ids, attention_mask * 0 + 1, token_type_ids)
        return graph

    monkeypatch.setattr(layers, "export_graph", maskless)
    with pytest.raises(inference.ExportError, match="does not match fp32 torch"):
        inference.open_forward(model, tokenizer, "onnx", "cpu")
    assert not list(tmp_path.rglob("*.onnx")) and not list(tmp_path.rglob("*.json"))


def test_a_tampered_export_is_refused(backbone, onnx_forward, tmp_path, monkeypatch):
    from weir.core.inference import ExportError, fingerprint, open_forward

    tokenizer, model = backbone
    source = onnx_forward.path.parent
    copy = tmp_path / "exports" / fingerprint(model)
    shutil.copytree(source, copy)
    monkeypatch.setenv("WEIR_CACHE", str(tmp_path))
    assert open_forward(model, tokenizer, "onnx", "cpu").record["sha256"] == onnx_forward.record["sha256"]
    with open(copy / "onnx.onnx", "r+b") as f:  # one weight byte changed
        f.seek(-1000, 2)
        byte = f.read(1)
        f.seek(-1000, 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ExportError, match="changed after it was checked"):
        open_forward(model, tokenizer, "onnx", "cpu")


def test_backends_are_validated_and_inexact_vectors_never_mixed():
    from weir.core.inference import check_backend, check_compatible

    with pytest.raises(InputError, match="unknown inference backend"):
        check_backend("tensorrt", "cpu")
    with pytest.raises(InputError, match="runs on the CPU"):
        check_backend("onnx", "cuda")
    check_compatible("torch", "onnx", "x")  # the exact family: equal within 1e-4
    check_compatible(None, "onnx", "x")  # an index from before backends were recorded: fp32 torch
    check_compatible("onnx-int8", "onnx-int8", "x")
    for built, asked in (("onnx-int8", "onnx"), ("onnx", "onnx-int8"), ("onnx-int8", "torch")):
        with pytest.raises(InputError, match=f"encoded with the {built} backend"):
            check_compatible(built, asked, "the dense component")


def test_dense_queries_follow_the_backend_the_passages_were_encoded_with(tmp_path, onnx_forward, monkeypatch):
    """A dense component records its backend; queries use the passages' own (an fp32 index stays searchable in fp32
    whatever the default), and a backend whose vectors differ is refused, never mixed."""
    from weir.core.inference import default_backend
    from weir.indexer.build import build_index
    from weir.indexer.dense import DenseIndex
    from weir.indexer.index_dir import Index

    monkeypatch.delenv("WEIR_BACKEND", raising=False)
    corpus = tmp_path / "coll"
    corpus.mkdir()
    (corpus / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n"
                                                 for i, t in enumerate(TEXTS)), encoding="utf-8")
    build_index(corpus, tmp_path / "index", components=("dense",))
    index = Index(tmp_path / "index")
    default = default_backend("cpu")
    assert default in ("openvino-bf16", "onnx-int8")  # the CPU default: bf16 where the CPU has it, else int8
    assert index.manifest["components"]["dense"]["encoder"]["backend"] == default
    dense = DenseIndex(index.component_path("dense"), index.manifest["components"]["dense"])
    encoder = dense.query_encoder()
    assert encoder.backend == default
    best = dense.faiss.search(encoder.encode_queries(["the resident immune cells of the brain"]), 1)[1][0][0]
    assert dense.docids[best] == "d2"
    for built in ("onnx", "torch", None):  # fp32 indexes (None: from before backends were recorded)
        dense.encoder_settings["backend"] = built
        assert dense.query_encoder().backend == "onnx"
    with pytest.raises(InputError, match="encoded with the onnx backend and cannot be searched with onnx-int8"):
        dense.encoder_settings["backend"] = "onnx"
        dense.query_encoder(backend="onnx-int8")
    dense.encoder_settings["backend"] = default
    with pytest.raises(InputError, match=f"encoded with the {default} backend and cannot be searched with onnx"):
        dense.query_encoder(backend="onnx")
    recipe, dense.encoder_settings["recipe"] = dense.encoder_settings["recipe"], "an earlier export"
    with pytest.raises(InputError, match=f"encoded by another {default} export"):  # never mixed either
        dense.query_encoder()
    dense.encoder_settings["recipe"] = recipe
    monkeypatch.setenv("WEIR_BACKEND", "torch")  # what --backend torch sets
    with pytest.raises(InputError, match=f"encoded with the {default} backend and cannot be searched with torch"):
        dense.query_encoder()


def test_int8_gives_an_input_the_same_output_alone_and_inside_a_padded_batch(backbone):
    """Dynamic int8 takes one activation scale per tensor: run as one batch, a row's output moves with its
    neighbours (the check that this test can fail); run one input at a time, as the backend does, it does not."""
    from weir.core.inference import open_forward
    from weir.core.inference_onnx import OnnxForward

    tokenizer, model = backbone
    int8 = open_forward(model, tokenizer, "onnx-int8", "cpu")
    assert int8.per_input
    batch = _batch(tokenizer, TEXTS)
    hidden = int8(batch)["last_hidden_state"]
    whole = OnnxForward(int8.path, int8.record, per_input=False)(batch)["last_hidden_state"]
    mask = batch["attention_mask"].astype(bool)
    assert not hidden[~mask].any()  # nothing at padded positions
    moved = 0.0
    for i, n in enumerate(mask.sum(1)):
        alone = int8({k: v[i:i + 1, :n] for k, v in batch.items()})["last_hidden_state"][0]
        assert np.abs(alone - hidden[i, :n]).max() <= 1e-5
        moved = max(moved, float(np.abs(alone - whole[i, :n]).max()))
    assert moved > 1e-3


@pytest.mark.parametrize("backend", ["openvino-bf16", "onnx-int8"])
def test_with_an_inexact_default_a_vector_and_a_score_do_not_depend_on_their_batch(backend, monkeypatch):
    """The default encoder's passage vector, and the shipped attention reranker's query-passage score, alone and
    among others in a padded batch, on each backend that can be the CPU default."""
    from weir.core.inference_openvino import unusable_reason
    from weir.core.runtime import shipped_model
    from weir.indexer.encoder import Encoder
    from weir.ranker.rerankers.attention import AttentionModel

    if backend == "openvino-bf16" and unusable_reason():
        pytest.skip(f"openvino-bf16 cannot run here: {unusable_reason()}")
    monkeypatch.setenv("WEIR_BACKEND", backend)
    encoder = Encoder()
    assert encoder.backend == backend
    together = encoder.encode_passages(TEXTS)
    for i, text in enumerate(TEXTS):
        assert np.abs(encoder.encode_passages([text])[0] - together[i]).max() <= 1e-5
    query = "the resident immune cells of the brain"
    model = AttentionModel(shipped_model("attention"))
    assert model.backend == backend
    together = model.masses([query] * len(TEXTS), TEXTS, batch_size=8)
    for i, text in enumerate(TEXTS):  # a model of its own each: no passage states cached from the batch
        alone = AttentionModel(shipped_model("attention")).masses([query], [text], batch_size=8)[0]
        assert np.abs(alone - together[i]).max() <= 1e-5
