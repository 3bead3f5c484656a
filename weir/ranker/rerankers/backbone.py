"""What the transformer rerankers share: the backbone loaded for reading attention, (query, passage) pair inputs and
their segment masks, the query->passage attention mass, and the model directory a trainer writes (settings file, the
parameters training changed, model card). One BERT layer computed by hand is :mod:`weir.core.layers`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weir.core.runtime import load_pretrained, prepare_device
from weir.core.types import InputError, same_length_batches

NA_QUERY = "N/A"  # the content-free calibration query (ICR)
QUERY_MAX_TOKENS = 32


def load_backbone(path: str, device: str, *, attentions: bool = True):
    """Tokenizer and encoder from a Hugging Face name or local path (eager attention, so weights can be read)."""
    tokenizer, model = load_pretrained(path, **({"attn_implementation": "eager"} if attentions else {}))
    return tokenizer, model.to(device)


def encode_pairs(tokenizer, queries: Sequence[str], passages: Sequence[str], max_length: int) -> dict:
    """Tokenize (query, passage) pairs: the query cut to :data:`QUERY_MAX_TOKENS` word pieces, the passage to fit."""
    qs = [tokenizer.convert_tokens_to_string(tokenizer.tokenize(q)[:QUERY_MAX_TOKENS]) for q in queries]
    return tokenizer(qs, list(passages), truncation="only_second", max_length=max_length, padding=True,
                     return_tensors="pt", return_token_type_ids=True)


def pair_batches(tokenizer, queries: Sequence[str], passages: Sequence[str], max_length: int, batch_size: int):
    """Yield (pair indices, their inputs) for all (query, passage) pairs, tokenized once and batched with pairs of the
    same query and token length only: no padding and no other query's pairs, so a query's scores do not depend on
    what else is scored with it (a micro-batched service's other requests included)."""
    if not queries:
        return
    enc = encode_pairs(tokenizer, queries, passages, max_length)
    lengths = enc["attention_mask"].sum(1).tolist()
    for idx in same_length_batches([(q, n) for q, n in zip(queries, lengths)], batch_size):
        yield idx, {k: v[idx, :lengths[idx[0]]] for k, v in enc.items()}


def segment_masks(enc) -> tuple:
    """(query mask, passage mask) over positions: segment 0 / 1 word pieces without [CLS], [SEP] and padding."""
    import torch

    ids, types, attn = enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = True
    lengths = attn.sum(1)
    special[torch.arange(len(ids)), lengths - 1] = True  # final [SEP]
    pos = torch.arange(ids.shape[1]).unsqueeze(0)
    n_seg0 = ((types == 0) & (attn == 1)).sum(1, keepdim=True)
    qmask = (pos >= 1) & (pos < n_seg0 - 1)
    pmask = (types == 1) & (attn == 1) & ~special
    return qmask.float(), pmask.float()


def passage_mass(probs, qmask, pmask):
    """(B, heads, L): per head and query position, the attention mass sent to passage positions (0 at positions that
    are not query word pieces). ``probs``: (B, heads, L, L) attention probabilities."""
    return (probs * pmask[:, None, None, :]).sum(-1) * qmask[:, None, :]


def mean_over_query(values, qmask):
    """(B, heads): per-position values (B, heads, L) averaged over each input's query word pieces."""
    return (values * qmask[:, None, :]).sum(-1) / qmask.sum(-1, keepdim=True).clamp(min=1)


def load_trained_delta(model, path: Path) -> None:
    """Apply the parameters a training run changed (``trained.pt`` of a model directory) to the base backbone."""
    import torch

    delta = torch.load(path, map_location="cpu")
    missing = [k for k in delta if k not in dict(model.named_parameters())]
    if missing:
        raise InputError(f"{path}: parameters {missing[:3]} not in the base model")
    model.load_state_dict({k: v.float() for k, v in delta.items()}, strict=False)


@dataclass
class ModelDirectory:
    """A model directory written by `weir train attention|crossencoder`, opened: its settings, the backbone (the
    directory's ``backbone/`` or the settings' ``base_model``, with ``trained.pt`` applied) in eval mode on the device
    chosen at run time, and its model card."""

    path: Path
    settings: dict[str, Any]
    device: str
    tokenizer: Any
    model: Any
    card: dict[str, Any]

    @staticmethod
    def read_settings(path: Path, settings_file: str, kind: str) -> dict[str, Any]:
        """The settings file of a ``kind`` model directory (what decides how its backbone loads)."""
        settings_path = Path(path) / settings_file
        if not settings_path.is_file():
            raise InputError(f"{path}: not a{'n' if kind[0] in 'aeiou' else ''} {kind} model directory (no "
                             f"{settings_file}); train one with `weir train {kind}`")
        return json.loads(settings_path.read_text())

    @classmethod
    def open(cls, path: Path, settings: dict[str, Any], *, device: str | None = None,
             attentions: bool = False) -> ModelDirectory:
        device = prepare_device(device)
        backbone = Path(path) / "backbone"
        tokenizer, model = load_backbone(str(backbone if backbone.is_dir() else settings["base_model"]), device,
                                         attentions=attentions)
        if (Path(path) / "trained.pt").is_file():  # only the fine-tuned parameters were saved
            load_trained_delta(model, Path(path) / "trained.pt")
        model.eval()
        card_path = Path(path) / "card.json"
        card = json.loads(card_path.read_text()) if card_path.is_file() else {}
        return cls(Path(path), settings, device, tokenizer, model, card)
