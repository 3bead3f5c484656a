"""Typed stage options from flat keys and STAGE.FIELD keys: each key reaches exactly the stages it concerns, and a bad
key or value is one clear error."""

from __future__ import annotations

import pytest

from weir.ranker.options import BM25Options, PipelineOptions
from weir.core.types import InputError


def test_flat_keys_reach_every_stage_they_concern():
    o = PipelineOptions.from_mapping({"k1": 1.2, "device": "cpu", "depth": 50, "batch_size": 8,
                                      "fusion": "rrf", "ltr_model": "m", "dense_model": None})
    assert (o.bm25.k1, o.bm25.b) == (1.2, 0.4) and o.deepct.k1 is None  # DeepCT keeps the k1 its index records
    assert o.dense.device == o.ltr.device == o.attention.device == o.crossencoder.device == "cpu"
    assert o.ltr.depth == o.attention.depth == o.crossencoder.depth == 50 and o.ltr.batch_size is None
    assert o.hybrid.method == o.deepimpact_bm25.method == "rrf" and o.ltr.model == "m"
    assert o.dense.model is None  # None means "the default"


def test_stage_keys_set_one_stage():
    o = PipelineOptions.from_mapping({"device": "cpu", "attention.device": "cuda", "deepimpact+bm25.weights": "0.3,0.7"})
    assert (o.attention.device, o.ltr.device, o.dense.device) == ("cuda", "cpu", "cpu")
    assert o.deepimpact_bm25.weights == "0.3,0.7" and o.hybrid.weights is None
    assert PipelineOptions().updated({"b": 0.75}).bm25 == BM25Options(b=0.75)


@pytest.mark.parametrize("values, message", [
    ({"k2": 1}, "unknown pipeline option 'k2'"),
    ({"attention.colour": "red"}, "unknown pipeline option"),
    ({"k1": -1}, "BM25 needs k1 >= 0"),
    ({"b": 2}, "0 <= b <= 1"),
    ({"depth": 0}, "depth must be at least 1"),
])
def test_bad_options_are_input_errors(values, message):
    with pytest.raises(InputError, match=message):
        PipelineOptions.from_mapping(values)


def test_the_backend_is_an_option_of_the_pipeline_over_the_environment_variable(tmp_path, monkeypatch):
    """``backend`` reaches the dense query encoder and every reranker; the environment variable (what `--backend`
    sets) stays the default, and a pipeline's own option wins over it. (An index of fp32 vectors: the exact backends
    read it alike.)"""
    import json

    from tests.conftest import DOCS
    from weir.indexer.build import build_index
    from weir.indexer.index_dir import Index
    from weir.ranker import registry

    o = PipelineOptions.from_mapping({"backend": "onnx", "attention.backend": "torch"})
    assert o.dense.backend == o.ltr.backend == o.crossencoder.backend == "onnx" and o.attention.backend == "torch"
    (tmp_path / "coll").mkdir()
    (tmp_path / "coll" / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    build_index(tmp_path / "coll", tmp_path / "index", components=("bm25", "dense"), dense={"backend": "onnx"})
    index = Index(tmp_path / "index")
    monkeypatch.setenv("WEIR_BACKEND", "torch")
    assert registry.build("dense", index).stages[0].encoder.backend == "torch"  # the variable: the default
    onnx = PipelineOptions.from_mapping({"backend": "onnx"})
    assert registry.build("dense", index, onnx).stages[0].encoder.backend == "onnx"
    assert registry.build("bm25>>ltr", index, onnx).stages[-1].extractor.encoder.backend == "onnx"
