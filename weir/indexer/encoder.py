"""Sentence embeddings from a transformer backbone (default all-MiniLM-L6-v2): the dense component's passages at
index time, and the queries of dense retrieval and of the rerankers' dense features at search time.

:class:`Encoder` loads any Hugging Face name or local path with ``transformers`` (no network needed for a local
path), pools the last hidden states (mean over real tokens by default, as all-MiniLM-L6-v2's model card prescribes;
a sentence-transformers directory's ``1_Pooling/config.json`` picks the mode) and L2-normalizes, so inner product
is cosine similarity. Texts are encoded in batches sorted by length (less padding) on an inference backend
(:mod:`weir.core.inference`: ONNX Runtime int8 on the CPU by default, one input per forward, so that
an embedding never depends on its batch; torch fp16 on a GPU; ``backend=`` chooses).
Query embeddings are cached per process (LRU), since the same query text is often encoded again (a service, a tuning
sweep).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from weir.core.inference import check_backend, feed, open_forward
from weir.core.runtime import (
    DEFAULT_MODEL,
    intra_op_threads,
    load_pretrained,
    model_fingerprint,
    prepare_device,
    resolve_model,
)
from weir.core.types import InputError

PASSAGE_MAX_LENGTH = 256  # the model card's limit: longer input is truncated to 256 word pieces
QUERY_MAX_LENGTH = 256
SMALL_BATCH = 4


def _pooling_mode(path: str) -> str:
    config = Path(path) / "1_Pooling" / "config.json"
    if config.is_file():
        cfg = json.loads(config.read_text(encoding="utf-8"))
        if cfg.get("pooling_mode_cls_token"):
            return "cls"
    return "mean"


class Encoder:
    """Batched sentence encoder: ``encode_passages(texts)`` / ``encode_queries(texts)`` -> float32 (n, dim) arrays.
    ``prepare``: a function of the loaded model returning the model to run (applied before the backend opens it)."""

    def __init__(self, model: str | None = None, *, device: str | None = None, batch_size: int = 64,
                 passage_max_length: int = PASSAGE_MAX_LENGTH, query_max_length: int = QUERY_MAX_LENGTH,
                 pooling: str | None = None, normalize: bool = True, fp16: bool | None = None,
                 threads: int | None = None, query_cache_size: int = 4096, backend: str | None = None,
                 prepare=None):
        self.model_name = model or DEFAULT_MODEL
        self.model_path = resolve_model(model)
        self.device = prepare_device(device, threads)
        self.backend = check_backend(backend, self.device)
        self.tokenizer, self.model = load_pretrained(model)
        if prepare is not None:  # a change of the model before it runs (the quality reader keeps its first layers)
            self.model = prepare(self.model)
        self.forward = open_forward(self.model, self.tokenizer, self.backend, self.device, threads=threads,
                                    fp16=fp16)
        self.fp16 = bool(getattr(self.forward, "fp16", False))
        self.pooling = pooling or _pooling_mode(self.model_path)
        if self.pooling not in ("mean", "cls"):
            raise InputError(f"unknown pooling {self.pooling!r}; known: mean, cls")
        self.normalize = normalize
        self.batch_size = batch_size
        self.passage_max_length, self.query_max_length = passage_max_length, query_max_length
        self.dim = int(self.model.config.hidden_size)
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = query_cache_size
        self._lock = threading.Lock()  # one forward at a time: the model is shared by request threads

    def describe(self) -> dict:
        """What a manifest records about the encoder."""
        return {"model": self.model_name, "model_path": self.model_path, "model_sha256": model_fingerprint(self.model_path),
                "pooling": self.pooling, "normalize": self.normalize, "dim": self.dim, **self.forward.describe(),
                "passage_max_length": self.passage_max_length, "query_max_length": self.query_max_length}

    def encode(self, texts: Sequence[str], max_length: int, batch_size: int | None = None, *,
               exact: bool = False) -> np.ndarray:
        """Encode ``texts`` in batches sorted by length (longest first: a memory problem shows at once); returns
        float32 (len(texts), dim) in the input order. ``exact``: each text in a forward pass of its own, so that its
        embedding does not depend on what else is encoded with it (a transformer's output for a row changes in the
        last bits with the padding and even with the number of rows of its batch)."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        batch_size = batch_size or self.batch_size
        if exact:
            batches = [[i] for i in range(len(texts))]
        else:
            order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
            batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
        # a handful of texts (a single query) is too little work to share between threads: on a busy CPU the
        # threads' barriers cost more than they save (measured here: 700 ms -> 21 ms for one query, 2 cores shared)
        few = self.device == "cpu" and (exact or len(texts) <= SMALL_BATCH)
        with self._lock, intra_op_threads(1 if few and self.backend == "torch" else None):
            for idx in batches:
                inputs = feed(self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                             max_length=max_length, return_tensors="np"))
                hidden = self.forward(inputs)["last_hidden_state"]  # float32: pooled in fp32 (fp16 sums lose digits)
                out[idx] = self.pool(hidden, inputs["attention_mask"])
        return out

    def pool(self, hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Sentence vectors (B, dim) from a forward pass's last hidden states (B, L, dim): this encoder's pooling, then
        its normalization."""
        if self.pooling == "cls":
            emb = hidden[:, 0]
        else:
            mask = attention_mask[..., None].astype(np.float32)
            emb = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
        if self.normalize:  # as torch.nn.functional.normalize: x / max(|x|, 1e-12)
            emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        return emb

    def clear_cache(self) -> None:
        """Forget the query embeddings cached so far (benchmarks measure a cold query path this way)."""
        with self._lock:
            self._cache.clear()

    def encode_passages(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        return self.encode(texts, self.passage_max_length, batch_size)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query embeddings (each the same whatever other queries come with it), from the per-process LRU cache where
        the same text was encoded before."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        with self._lock:
            for i, text in enumerate(texts):
                hit = self._cache.get(text)
                if hit is not None:
                    self._cache.move_to_end(text)
                    out[i] = hit
                else:
                    missing.setdefault(text, []).append(i)
        if missing:
            new = self.encode(list(missing), self.query_max_length, exact=True)
            with self._lock:
                for (text, rows), vec in zip(missing.items(), new):
                    out[rows] = vec
                    if self._cache_size > 0:
                        self._cache[text] = vec
                        if len(self._cache) > self._cache_size:
                            self._cache.popitem(last=False)
        return out


_SHARED: dict[tuple, Encoder] = {}
_SHARED_LOCK = threading.Lock()


def shared_encoder(model: str | None = None, **options) -> Encoder:
    """One :class:`Encoder` per (model, options) per process: the model loads once and its query cache is shared."""
    key = (resolve_model(model), tuple(sorted(options.items())))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = Encoder(model, **options)
        return _SHARED[key]


def clear_query_caches() -> None:
    """Forget the query embeddings of every shared encoder of this process: what an experiment does before it times a
    pipeline, so that no row is timed with query embeddings an earlier row computed."""
    with _SHARED_LOCK:
        encoders = list(_SHARED.values())
    for encoder in encoders:
        encoder.clear_cache()
