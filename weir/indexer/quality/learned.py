"""``learned``: the QualT5 recipe (Chang et al., SIGIR 2024) on weir's backbone, made cheap enough to pay for itself.

QualT5 fine-tunes a T5 to say whether a passage is relevant to *some* query, trained on judged passages with the
query left out (relevant passage -> true, BM25-retrieved unjudged passage -> false). Pruning only pays when the
estimator costs much less than the encoding it saves, so here the passage is read by the first ``layers`` layers of
the backbone only (default 2 of all-MiniLM-L6-v2's 6) over its first ``max_length`` word pieces (default 128, half
the dense encoder's), mean-pooled, and joined with the surface features (:mod:`weir.indexer.quality.surface`,
standardized); a small MLP head gives the score (a logit). The truncated backbone is frozen: only the head is
trained (`weir train quality`), which keeps the model directory small and training minutes on a CPU.

A model directory holds ``card.json`` (kind ``quality``, estimator ``learned``, base model, layers, max length,
training data, metrics) and ``head.pt`` (the head's weights and the features' standardization).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from weir.indexer.quality.base import QualityEstimator, standardized_within, within_collection
from weir.indexer.quality.surface import FEATURES, feature_matrix
from weir.core.provenance import sha256_file, write_card
from weir.core.runtime import model_fingerprint
from weir.core.types import Document, InputError

CARD, HEAD = "card.json", "head.pt"
LAYERS, MAX_LENGTH, HIDDEN = 0, 128, 64


def _truncate(model, layers: int):
    """Keep the first ``layers`` transformer layers of a BERT-like encoder (BERT, MiniLM, RoBERTa, DistilBERT)."""
    for owner, attr in ((getattr(model, "encoder", None), "layer"), (getattr(model, "transformer", None), "layer")):
        stack = getattr(owner, attr, None) if owner is not None else None
        if stack is not None:
            if not 0 <= layers <= len(stack):
                raise InputError(f"the backbone has {len(stack)} layers; --layers must be 0..{len(stack)} (0: the "
                                 "word-piece embeddings alone)")
            setattr(owner, attr, stack[:layers])
            model.config.num_hidden_layers = layers
            return model
    raise InputError(f"cannot truncate {type(model).__name__}: no encoder.layer or transformer.layer stack")


class PassageReader:
    """The truncated backbone: mean-pooled states of the first ``layers`` layers over a passage's first
    ``max_length`` word pieces, float32 (n, dim) (the dense encoder's batching, :class:`weir.indexer.encoder.Encoder`,
    over a shorter model and input). It runs on the exact (fp32) backend, whatever the inference default: its heads
    were trained on fp32 states and a pruning's cut falls where their scores put it; int8's effect on which passages
    a pruning leaves out is not measured, and this reader (a few layers, short input) is a small part of a build."""

    CHUNK = 1024  # passages a progress step, and the span within which batches are sorted by length

    def __init__(self, model: str | None = None, *, layers: int = LAYERS, max_length: int = MAX_LENGTH,
                 device: str | None = None, batch_size: int = 64):
        from weir.core.inference import exact_backend
        from weir.core.runtime import select_device
        from weir.indexer.encoder import Encoder

        self.encoder = Encoder(model, device=device, batch_size=batch_size, passage_max_length=max_length,
                               pooling="mean", normalize=False, prepare=lambda m: _truncate(m, layers),
                               backend=exact_backend(select_device(device)))
        self.layers, self.max_length, self.dim = layers, max_length, self.encoder.dim

    def describe(self) -> dict:
        e = self.encoder
        return {"base_model": e.model_name, "base_model_sha256": model_fingerprint(e.model_path),
                "layers": self.layers, "max_length": self.max_length, "pooling": "mean"}

    def read(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with tqdm(total=len(texts), desc="quality (learned)", unit="doc", disable=not progress,
                  mininterval=1.0) as bar:
            for start in range(0, len(texts), self.CHUNK):
                out[start:start + self.CHUNK] = self.encoder.encode_passages(texts[start:start + self.CHUNK])
                bar.update(len(texts[start:start + self.CHUNK]))
        return out


def make_head(inputs: int, hidden: int = HIDDEN):
    import torch.nn as nn

    return nn.Sequential(nn.Dropout(0.1), nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def head_inputs(pooled: np.ndarray, surface: np.ndarray, mean: np.ndarray, std: np.ndarray, *,
                within: bool = False) -> np.ndarray:
    """What the head reads: the pooled states and the surface features standardized (by the training sources'
    ``mean`` and ``std``), side by side; ``within``: both standardized by the scored corpus's own statistics
    (:func:`~weir.indexer.quality.base.standardized_within`), the rows being one whole corpus."""
    if within:
        return np.concatenate([standardized_within(pooled), standardized_within(surface)], axis=1)
    return np.concatenate([pooled, (surface - mean) / std], axis=1).astype(np.float32)


class LearnedQuality(QualityEstimator):
    """A trained quality head over its truncated backbone (a model directory written by `weir train quality`)."""

    name = "learned"
    batch_unit = PassageReader.CHUNK
    neural = True

    def __init__(self, path: str | os.PathLike, *, device: str | None = None, batch_size: int = 64):
        import torch

        self.path = Path(path)
        if not (self.path / CARD).is_file() or not (self.path / HEAD).is_file():
            raise InputError(f"{self.path}: not a learned quality model (needs {CARD} and {HEAD}); train one with "
                             "`weir train quality`")
        self.model_card = json.loads((self.path / CARD).read_text(encoding="utf-8"))
        reader = self.model_card["reader"]
        self.reader = PassageReader(reader["base_model"], layers=int(reader["layers"]),
                                    max_length=int(reader["max_length"]), device=device, batch_size=batch_size)
        state = torch.load(self.path / HEAD, map_location="cpu", weights_only=True)
        self.mean, self.std = state["feature_mean"].numpy(), state["feature_std"].numpy()
        self.head = make_head(self.reader.dim + len(FEATURES), int(self.model_card["parameters"]["hidden"]))
        self.head.load_state_dict(state["head"])
        self.head.eval()
        self.within = within_collection(self.model_card)
        self.per_document = not self.within  # standardized within the corpus: a score depends on all of it

    def describe(self) -> dict:
        return {"name": self.name, "model": self.path.name, "card_sha256": sha256_file(self.path / CARD),
                "head_sha256": sha256_file(self.path / HEAD), "reader": self.model_card["reader"]}

    def logits(self, pooled: np.ndarray, surface: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            x = torch.from_numpy(head_inputs(pooled, surface, self.mean, self.std, within=self.within))
            return self.head(x).squeeze(-1).double().numpy()

    def score(self, documents: Sequence[Document], *, progress: bool = False) -> np.ndarray:
        if not documents:
            return np.zeros(0)
        pooled = self.reader.read([d.contents for d in documents], progress=progress)
        return self.logits(pooled, feature_matrix(documents))


def save(path: str | os.PathLike, head, mean: np.ndarray, std: np.ndarray, card: dict) -> Path:
    import torch

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    torch.save({"head": {k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()},
                "feature_mean": torch.from_numpy(np.asarray(mean, dtype=np.float64)),
                "feature_std": torch.from_numpy(np.asarray(std, dtype=np.float64))}, path / HEAD)
    write_card(path, {**card, "head_sha256": sha256_file(path / HEAD)}, CARD)
    return path
