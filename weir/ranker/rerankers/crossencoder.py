"""Cross-encoder reranker (the honest baseline next to the attention reranker): the same backbone, trained by
`weir train crossencoder`, scores ``[CLS] query [SEP] passage [SEP]`` with a linear head on [CLS]. Pairs of all
queries are scored together, sorted by length, under autocast on a GPU."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

from weir.indexer.index_dir import Index
from weir.ranker.rerankers.backbone import ModelDirectory, pair_batches
from weir.ranker.stage import Reranker, apply_scores
from weir.core.inference import check_backend, feed, open_forward
from weir.core.runtime import shipped_model
from weir.core.types import Query, Run


class CrossEncoderReranker(Reranker):
    name = "crossencoder"

    def __init__(self, index: Index, model: str | os.PathLike | None = None, *, depth: int = 100,
                 device: str | None = None, batch_size: int | None = None, backend: str | None = None):
        import torch

        self.index, self.depth = index, depth
        self.model_path = Path(model) if model else shipped_model("crossencoder")
        settings = ModelDirectory.read_settings(self.model_path, "crossencoder.json", "crossencoder")
        directory = ModelDirectory.open(self.model_path, settings, device=device)
        self.settings, self.device, self.model_card = directory.settings, directory.device, directory.card
        self.tokenizer, self.model = directory.tokenizer, directory.model
        self.linear = torch.nn.Linear(self.model.config.hidden_size, 1)
        self.linear.load_state_dict(torch.load(self.model_path / "cls_head.pt", map_location="cpu"))
        self.linear.eval()
        self.forward = open_forward(self.model, self.tokenizer, check_backend(backend, self.device), self.device)
        self.max_length = int(self.settings.get("max_length", 192))
        self.batch_size = batch_size or (256 if self.device.startswith("cuda") else 32)
        self._lock = threading.Lock()

    def score(self, queries: Sequence[str], passages: Sequence[str]) -> list[float]:
        import torch

        out = [0.0] * len(queries)
        with self._lock, torch.inference_mode():
            for idx, enc in pair_batches(self.tokenizer, queries, passages, self.max_length, self.batch_size):
                hidden = torch.from_numpy(self.forward(feed(enc))["last_hidden_state"][:, 0])  # [CLS], float32
                for i, s in zip(idx, self.linear(hidden).squeeze(-1).tolist()):
                    out[i] = s
        return out

    def rerank(self, queries: Sequence[Query], run: Run, depth: int) -> Run:
        pairs = [(q, h.doc_id) for q in queries for h in run.top(q.id, depth)]
        docs = self.index.documents([d for _, d in pairs]) if pairs else {}
        scores = self.score([q.text for q, _ in pairs], [docs[d].contents if d in docs else "" for _, d in pairs])
        by_query: dict[str, list[float]] = {}
        for (q, _), s in zip(pairs, scores):
            by_query.setdefault(q.id, []).append(s)
        return apply_scores(queries, run, depth, by_query, self.name)
