"""The sentence encoder: the same embeddings as sentence-transformers, the query cache, a bad model named."""

from __future__ import annotations

import numpy as np
import pytest

from weir.core.types import InputError


@pytest.fixture(scope="module")
def encoder():
    from weir.indexer.encoder import shared_encoder

    return shared_encoder(backend="onnx")  # fp32: equal to sentence-transformers


def test_encoder_matches_sentence_transformers(encoder):
    from sentence_transformers import SentenceTransformer

    from weir.core.runtime import default_model_path
    from weir.indexer.encoder import shared_encoder

    texts = ["a short one", "Microglia are the resident immune cells of the brain. " * 40, "", "naïve café"]
    ours = encoder.encode_passages(texts, batch_size=2)  # sorted by length across batches, returned in input order
    reference = SentenceTransformer(default_model_path(), device="cpu").encode(texts, batch_size=2)
    assert ours.shape == (4, 384) and ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert np.abs(ours - reference).max() < 1e-5
    int8 = shared_encoder(backend="onnx-int8").encode_passages(texts, batch_size=2)  # the CPU default: close
    assert ((int8 * reference).sum(1) / np.linalg.norm(reference, axis=1) > 0.98).all()


def test_query_cache(encoder):
    first = encoder.encode_queries(["what causes cancer", "what causes cancer", "vitamin d"])
    assert np.array_equal(first[0], first[1])
    assert "vitamin d" in encoder._cache
    again = encoder.encode_queries(["vitamin d"])
    assert np.array_equal(again[0], first[2])


def test_bad_model_is_input_error():
    from weir.indexer.encoder import Encoder

    with pytest.raises(InputError, match="cannot load encoder"):
        Encoder("/nonexistent/model/dir")


def test_an_experiment_times_each_row_cold(encoder):
    """What `weir experiment` does before it times a pipeline: every shared encoder's query embeddings and every
    stage's caches forgotten (a hybrid row after a dense one pays for its own query embeddings)."""
    from weir.indexer.encoder import clear_query_caches
    from weir.ranker.stage import Pipeline, Stage

    encoder.encode_queries(["vitamin d"])
    assert encoder._cache
    clear_query_caches()
    assert not encoder._cache

    class Caching(Stage):
        name = "caching"

        def __init__(self):
            self.cache = {"q": 1}

        def __call__(self, queries, run=None, *, k=1000):
            return run

        def clear_caches(self):
            self.cache.clear()

    first, second = Caching(), Caching()
    (first >> second).clear_caches()
    assert not first.cache and not second.cache
