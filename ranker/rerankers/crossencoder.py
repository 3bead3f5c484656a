"""Cross-encoder reranker (the honest baseline next to the attention reranker): the same backbone, trained by
`weir train crossencoder`, scores ``[CLS] query [SEP] passage [SEP]`` with a linear head on [CLS]. Pairs of all
queries are scored together, sorted by length, under autocast on a GPU."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from ranker.base import Reranker
from ranker.index import Index
from ranker.rerankers import apply_scores
from ranker.rerankers.attention import autocast, default_model, encode_pairs, load_backbone, load_trained_delta
from weir.types import InputError, Query, Run


class CrossEncoderReranker(Reranker):
    name = "crossencoder"

    def __init__(self, index: Index, model: str | os.PathLike | None = None, *, depth: int = 100,
                 device: str | None = None, batch_size: int | None = None):
        import torch

        from ranker.encoder import configure_cpu_threads, select_device

        self.index, self.depth = index, depth
        self.model_path = Path(model) if model else default_model("crossencoder")
        settings_file = self.model_path / "crossencoder.json"
        if not settings_file.is_file():
            raise InputError(f"{self.model_path}: not a cross-encoder model directory (no crossencoder.json)")
        self.settings = json.loads(settings_file.read_text())
        self.device = select_device(device)
        if self.device == "cpu":
            configure_cpu_threads()
        backbone = self.model_path / "backbone"
        self.tokenizer, self.model = load_backbone(str(backbone if backbone.is_dir() else self.settings["base_model"]),
                                                   self.device, attentions=False)
        if (self.model_path / "trained.pt").is_file():  # only the fine-tuned parameters were saved
            load_trained_delta(self.model, self.model_path / "trained.pt")
        self.model.eval()
        self.linear = torch.nn.Linear(self.model.config.hidden_size, 1)
        self.linear.load_state_dict(torch.load(self.model_path / "cls_head.pt", map_location="cpu"))
        self.linear.to(self.device).eval()
        self.max_length = int(self.settings.get("max_length", 192))
        self.batch_size = batch_size or (256 if self.device.startswith("cuda") else 32)
        card = self.model_path / "card.json"
        self.model_card = json.loads(card.read_text()) if card.is_file() else {}
        self._lock = threading.Lock()

    def score(self, queries: Sequence[str], passages: Sequence[str]) -> list[float]:
        import torch

        order = sorted(range(len(queries)), key=lambda i: len(queries[i]) + len(passages[i]))
        out = [0.0] * len(queries)
        with self._lock, torch.inference_mode(), autocast(self.device):
            for start in range(0, len(order), self.batch_size):
                idx = order[start:start + self.batch_size]
                enc = encode_pairs(self.tokenizer, [queries[i] for i in idx], [passages[i] for i in idx], self.max_length)
                hidden = self.model(**{k: v.to(self.device) for k, v in enc.items()}).last_hidden_state[:, 0]
                for i, s in zip(idx, self.linear(hidden.float()).squeeze(-1).tolist()):
                    out[i] = s
        return out

    def rerank(self, queries: Sequence[Query], run: Run, depth: int) -> Run:
        pairs = [(q, h.doc_id) for q in queries for h in run.get(q.id, [])[:depth]]
        docs = self.index.documents([d for _, d in pairs]) if pairs else {}
        scores = self.score([q.text for q, _ in pairs], [docs[d].contents if d in docs else "" for _, d in pairs])
        by_query: dict[str, list[float]] = {}
        for (q, _), s in zip(pairs, scores):
            by_query.setdefault(q.id, []).append(s)
        return apply_scores(queries, run, depth, by_query, self.name)
