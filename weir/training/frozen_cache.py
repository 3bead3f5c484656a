"""The frozen lower layers' output of every (query, passage) input of a joint-interaction training run, computed once
and shared by every fold and step: a training step, and the scoring of a fold, then run only the trained top layers
(:func:`weir.core.layers.layer_forward`). Kept in a file (``--cache``) for later runs over the same inputs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from weir.core.layers import extended_mask, layer_forward
from weir.ranker.rerankers.backbone import (
    encode_pairs,
    mean_over_query,
    passage_mass,
    segment_masks,
)


class FrozenCache:
    """What the frozen lower layers make of each input, computed once per training run (shared by all folds and
    steps): per (query, passage) input, the hidden states after the last frozen layer (float32, unpadded), the
    query/passage position masks, and every frozen head's query->passage attention mass (mean over query word
    pieces). A training step and the scoring of a fold then run the trained top layers only."""

    def __init__(self, tokenizer, model, first_trained: int, max_length: int):
        self.tokenizer, self.model, self.first, self.max_length = tokenizer, model, first_trained, max_length
        self.device = next(model.parameters()).device
        self.index: dict[tuple[str, str], int] = {}
        self.hidden: list = []
        self.qmask: list = []
        self.pmask: list = []
        self.frozen: list[np.ndarray] = []

    def add(self, inputs: list[tuple[str, str, str]], batch_size: int = 32, log: Callable[[str], None] | None = None):
        """Encode (query text, doc id, passage text) inputs not cached yet."""
        import torch

        todo = list({(q, d): (q, d, t) for q, d, t in inputs if (q, d) not in self.index}.values())
        todo.sort(key=lambda x: len(x[0]) + len(x[2]))
        start = time.perf_counter()
        with torch.inference_mode():
            for b in range(0, len(todo), batch_size):
                chunk = todo[b:b + batch_size]
                enc = encode_pairs(self.tokenizer, [q for q, _, _ in chunk], [t for _, _, t in chunk], self.max_length)
                qmask, pmask = segment_masks(enc)
                enc = {k: v.to(self.device) for k, v in enc.items()}
                h = self.model.embeddings(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"])
                add_mask = extended_mask(enc["attention_mask"], h.dtype)
                feats = []
                qm, pm = qmask.to(self.device), pmask.to(self.device)
                for layer in self.model.encoder.layer[:self.first]:
                    h, probs = layer_forward(layer, h, add_mask)
                    feats.append(mean_over_query(passage_mass(probs, qm, pm), qm))
                feats = torch.cat(feats, 1).cpu().numpy() if feats else np.zeros((len(chunk), 0), np.float32)
                lengths = enc["attention_mask"].sum(1).tolist()
                for j, (q, d, _) in enumerate(chunk):
                    self.index[(q, d)] = len(self.hidden)
                    self.hidden.append(h[j, :lengths[j]].clone())
                    self.qmask.append(qmask[j, :lengths[j]].clone())
                    self.pmask.append(pmask[j, :lengths[j]].clone())
                    self.frozen.append(feats[j])
        if log and todo:
            log(f"  cached the frozen layers' output of {len(todo)} inputs ({time.perf_counter() - start:.0f}s)")

    def key(self) -> dict:
        return {"model": str(getattr(self.model.config, "_name_or_path", "")), "first_trained": self.first,
                "max_length": self.max_length}

    def save(self, path: str | Path) -> None:
        """Keep the cache for another run over the same inputs (the other model kind, other settings of the top)."""
        import torch

        lengths = [len(m) for m in self.qmask]
        torch.save({"key": self.key(), "index": self.index, "lengths": lengths, "hidden": torch.cat(self.hidden),
                    "qmask": torch.cat(self.qmask).bool(), "pmask": torch.cat(self.pmask).bool(),
                    "frozen": np.stack(self.frozen)}, path)

    def load(self, path: str | Path) -> bool:
        """Load a cache :meth:`save` wrote for the same backbone, frozen layers and ``max_length``; False if not."""
        import torch

        if not Path(path).is_file():
            return False
        data = torch.load(path, map_location=self.device, weights_only=False)
        if data["key"] != self.key():
            return False
        self.index = data["index"]
        self.hidden = list(torch.split(data["hidden"], data["lengths"]))
        self.qmask = [m.float() for m in torch.split(data["qmask"], data["lengths"])]
        self.pmask = [m.float() for m in torch.split(data["pmask"], data["lengths"])]
        self.frozen = list(data["frozen"])
        return True

    def batch(self, rows: list[int]):
        """Padded (hidden (B, L, H), attention mask, query mask, passage mask) of cached inputs."""
        import torch

        L = max(len(self.qmask[i]) for i in rows)
        H = self.hidden[rows[0]].shape[-1]
        hidden = torch.zeros(len(rows), L, H, device=self.device)
        masks = torch.zeros(3, len(rows), L, device=self.device)
        for j, i in enumerate(rows):
            n = len(self.qmask[i])
            hidden[j, :n] = self.hidden[i]
            masks[0, j, :n] = 1
            masks[1, j, :n] = self.qmask[i].to(self.device)
            masks[2, j, :n] = self.pmask[i].to(self.device)
        return hidden, masks[0], masks[1], masks[2]
