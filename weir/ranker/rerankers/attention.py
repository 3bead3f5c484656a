"""Attention-based reranker (ICR / QRHead / ReAttn, on a trained encoder): query and passage go through the
transformer as one input (``[CLS] query [SEP] passage [SEP]``, eager attention), and relevance is read from the
attention that query tokens pay to passage tokens.

For a selected set of (layer, head) pairs, a pair's head score is the attention mass the query's word pieces (not
[CLS]/[SEP]) send to the passage's word pieces, averaged over query word pieces; it is calibrated by subtracting the
same mass for a content-free query (``"N/A"``) over the same passage (ICR), a pass that depends on the passage only
and is cached per document. The relevance score is a learned linear combination of the calibrated head scores
(``weights``, ``bias``). Options (ReAttn): ``idf`` re-weights query word pieces by how unevenly their attention is
spread over the query's candidates (a word piece that attends alike to every candidate carries no signal): weight
``-log(mean_c m_c / max_c m_c)`` per word piece, normalized to sum 1; entropy regularization is a training option
(:mod:`weir.training.attention_joint`).

A model directory (`weir train attention`) holds the fine-tuned backbone (Hugging Face format), ``heads.json`` (the
selected heads, weights, bias, settings) and ``card.json``. Pairs of every query of a batch are scored together,
sorted by length (little padding), on the inference backend chosen (:mod:`weir.core.inference`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from weir.indexer.index_dir import Index
from weir.ranker.rerankers.backbone import (
    NA_QUERY,
    QUERY_MAX_TOKENS,
    ModelDirectory,
    pair_batches,
    passage_mass,
    segment_masks,
)
from weir.core.inference import check_backend, feed, open_forward
from weir.ranker.rerankers.lru import LruCache
from weir.ranker.stage import Reranker, apply_scores
from weir.core.runtime import shipped_model
from weir.core.types import Query, Run


STATES_CHUNK = 256  # candidates whose passage states are held at once (float32: about 100 MB at 256 word pieces)


class AttentionModel:
    """The trained backbone plus the head selection and combination of a model directory."""

    def __init__(self, path: str | os.PathLike, *, device: str | None = None, backend: str | None = None):
        self.path = Path(path)
        settings = ModelDirectory.read_settings(self.path, "heads.json", "attention")
        self.late = settings.get("interaction", "joint") == "late"
        directory = ModelDirectory.open(self.path, settings, device=device, attentions=not self.late)
        self.settings, self.device, self.card = directory.settings, directory.device, directory.card
        self.tokenizer, self.model = directory.tokenizer, directory.model
        self.heads = [tuple(h) for h in self.settings["heads"]]
        # late interaction reads the backbone's token states; joint, the selected heads' attention probabilities
        self.forward = open_forward(self.model, self.tokenizer, check_backend(backend, self.device), self.device,
                                    heads=() if self.late else self.heads)
        self.backend = self.forward.backend
        self.weights = np.asarray(self.settings["weights"], dtype=np.float64)
        self.bias = float(self.settings.get("bias", 0.0))
        calib_w = self.settings.get("calibration_weights")  # own weights for the content-free pass (late)
        self.calibration_weights = None if calib_w is None else np.asarray(calib_w, dtype=np.float64)
        self.calibrate = bool(self.settings.get("calibrate", True))
        if self.calibration_weights is not None and not self.calibration_weights.any():
            self.calibrate = False  # training gave the content-free pass no weight: skip it
        self.idf = bool(self.settings.get("idf", False))
        self.max_length = int(self.settings.get("max_length", 192))
        if self.late:
            import torch

            from weir.ranker.rerankers.relevance_attention import FoldedRelevance, RelevanceAttention, StateCache

            self.relevance = RelevanceAttention(self.model.config.hidden_size, int(self.settings["relevance_heads"]),
                                                float(self.settings.get("temperature", 0.05)))
            self.relevance.load_state_dict(torch.load(self.path / "relevance.pt", map_location="cpu"))
            self.relevance.to(self.device).eval()
            self.folded = FoldedRelevance(self.relevance)
            self.passage_states = StateCache(int(self.settings.get("state_cache", 4096)))
            # the passage's first window at this length: the document pass's (256) for the shipped models, so that an
            # index's stored states are what this model reads (weir.indexer.passage_states)
            self.passage_length = int(self.settings.get("passage_length", self.max_length))
            self.stored = None
        self._lock = threading.Lock()

    def masses(self, queries: Sequence[str], passages: Sequence[str], batch_size: int,
               doc_ids: Sequence[str] | None = None) -> list:
        """Per pair: the selected heads' (log, in late interaction) attention masses on the passage, (K, Lq) over its
        query word pieces as a numpy array; pairs batched with pairs of the same length (no padding)."""
        if self.late:
            return self._late_masses(queries, passages, batch_size, doc_ids)
        out: list = [None] * len(queries)
        with self._lock:
            for idx, enc in pair_batches(self.tokenizer, queries, passages, self.max_length, batch_size):
                qmask, pmask = (m.numpy() for m in segment_masks(enc))
                selected = self.forward(feed(enc))["attentions"]  # (B, K, L, L): the selected heads
                mass = passage_mass(selected, qmask, pmask)
                qm = qmask.astype(bool)
                for j, i in enumerate(idx):
                    out[i] = mass[j][:, qm[j]]
        return out

    def encode_states(self, texts: Sequence[str], max_length: int, batch_size: int = 64) -> list:
        from weir.ranker.rerankers.relevance_attention import token_states

        return token_states(self.forward, self.tokenizer, texts, max_length, batch_size, device=self.device)

    def use_stored_states(self, index: Index) -> str | None:
        """Read passage states from ``index``'s ``attention`` component (every shard's, over a shard set) when it holds
        what this model would compute (its backbone, input and length); returns why not, or None when it does."""
        from weir.core.runtime import model_fingerprint, resolve_model

        stored = getattr(index, "passage_states", None)
        if stored is None:
            return "the index has no attention component"
        made = stored.spec.get("backbone", {})
        own = None if (self.path / "trained.pt").is_file() or (self.path / "backbone").is_dir() else \
            model_fingerprint(resolve_model(self.settings["base_model"]))
        if own is None or made.get("base_model_sha256") != own:
            return "its states come from another backbone than this model's"
        if made.get("input") != "text" or int(made.get("max_length", 0)) != self.passage_length:
            return f"its states are of another passage input ({made.get('input')}, {made.get('max_length')} pieces)"
        self.stored = stored
        return None

    def _passage_states(self, keys: Sequence[str], passages: Sequence[str], doc_ids) -> list:
        """Each passage's states, float32 (L, H) as the component stores them: read from the index where it holds
        them, else computed (and cached per process) with the same rounding."""
        out = [None] * len(keys)
        if self.stored is not None and doc_ids is not None:
            out = self.stored.get(keys)
        missing = [i for i, s in enumerate(out) if s is None]
        if missing:
            computed = self.passage_states.states(
                [keys[i] for i in missing], [passages[i] for i in missing],
                lambda texts: [s.numpy() for s in self.encode_states(texts, self.passage_length)])
            for i, s in zip(missing, computed):
                out[i] = s
        return out

    def _late_masses(self, queries, passages, batch_size, doc_ids) -> list:
        """Late interaction (:mod:`weir.ranker.rerankers.relevance_attention`): each query encoded once, alone; its
        candidates' states read (or computed once per passage); one matrix product per query and head
        (:class:`FoldedRelevance`)."""
        keys = list(doc_ids) if doc_ids is not None else [f"text:{p}" for p in passages]
        unique_q = list(dict.fromkeys(queries))
        head_index = [h for _, h in self.heads]
        with self._lock:
            # each query alone: its states do not depend on the other queries of a (micro-)batch
            q_states = dict(zip(unique_q, self.encode_states(unique_q, QUERY_MAX_TOKENS + 2, batch_size=1)))
            out: list = [None] * len(queries)
            rows: dict[str, list[int]] = {}
            for i, q in enumerate(queries):
                rows.setdefault(q, []).append(i)
            for q, pairs in rows.items():
                qs = q_states[q].float().numpy()
                # a query's candidates' states a chunk at a time: memory bounded whatever the depth (the content-free
                # query of the calibration comes with every candidate of a batch)
                for start in range(0, len(pairs), STATES_CHUNK):
                    idx = pairs[start:start + STATES_CHUNK]
                    p_states = self._passage_states([keys[i] for i in idx], [passages[i] for i in idx], doc_ids)
                    log_mass = self.folded.log_masses(qs, p_states, head_index)
                    for j, i in enumerate(idx):
                        out[i] = log_mass[j][:, 1:len(qs) - 1]  # the query's word pieces
        return out


class AttentionReranker(Reranker):
    """Rescore the top ``depth`` candidates with the attention score of a model trained by `weir train attention`."""

    name = "attention"

    def __init__(self, index: Index, model: str | os.PathLike | None = None, *, depth: int = 100,
                 device: str | None = None, batch_size: int | None = None, na_cache_size: int = 100_000,
                 backend: str | None = None):
        self.index = index
        self.model_path = Path(model) if model else shipped_model("attention")
        self.model = AttentionModel(self.model_path, device=device, backend=backend)
        self.depth = depth
        self.batch_size = batch_size or (256 if self.model.device.startswith("cuda") else 32)
        self.model_card = self.model.card
        self._na = LruCache(na_cache_size)
        # late interaction: the passages' states from the index's attention component where it has them (None), else
        # computed at query time, for the reason given
        self.states_computed_because = None if not self.model.late else self.model.use_stored_states(index)

    def clear_caches(self) -> None:
        """Forget the content-free calibration passes and (late interaction) the passage states computed so far: the
        next call computes everything again, as a cold start would (benchmarks use this)."""
        self._na.clear()
        if self.model.late:
            self.model.passage_states.clear()

    def describe(self) -> dict:
        stored = {} if not self.model.late else {
            "passage_states": "stored (the index's attention component)" if self.states_computed_because is None
            else f"computed at query time ({self.states_computed_because})"}
        return {**super().describe(), "model_path": str(self.model_path), "heads": self.model.heads,
                "calibrate": self.model.calibrate, "idf": self.model.idf, "backend": self.model.backend, **stored}

    def _calibration(self, doc_ids: Sequence[str], texts: dict[str, str]) -> dict[str, np.ndarray]:
        """Head scores (K,) of the content-free query over each passage, cached per document."""
        def content_free(missing: list[str]) -> list[np.ndarray]:
            masses = self.model.masses([NA_QUERY] * len(missing), [texts[d] for d in missing], self.batch_size,
                                       missing)
            return [m.mean(-1) if m.shape[-1] else np.zeros(len(self.model.heads)) for m in masses]

        return dict(zip(doc_ids, self._na.get_many(doc_ids, content_free)))

    def score_pairs(self, queries: Sequence[Query], candidates: dict[str, list]) -> dict[str, list[float]]:
        """Per query, the score of each of its ``candidates`` (hits, in order)."""
        pairs = [(q, h.doc_id) for q in queries for h in candidates.get(q.id, [])]
        if not pairs:
            return {}
        docs = self.index.documents([d for _, d in pairs])
        texts = {d: (docs[d].contents if d in docs else "") for _, d in pairs}
        masses = self.model.masses([q.text for q, _ in pairs], [texts[d] for _, d in pairs], self.batch_size,
                                   [d for _, d in pairs])
        calib = self._calibration([d for _, d in pairs], texts) if self.model.calibrate else {}
        return combine(self.model, pairs, masses, calib)

    def rerank(self, queries: Sequence[Query], run: Run, depth: int) -> Run:
        candidates = {q.id: run.top(q.id, depth) for q in queries}
        return apply_scores(queries, run, depth, self.score_pairs(queries, candidates), self.name)


def combine(model, pairs, masses, calib) -> dict[str, list[float]]:
    """Per query, the learned combination of (optionally IDF re-weighted, calibrated) head scores of its pairs."""
    by_query: dict[str, list[int]] = {}
    for i, (q, _) in enumerate(pairs):
        by_query.setdefault(q.id, []).append(i)
    out: dict[str, list[float]] = {}
    for qid, rows in by_query.items():
        m = [masses[i] for i in rows]  # each (K, Lq); the same Lq within a query
        if model.idf and m and m[0].shape[-1]:
            stack = np.stack(m)  # (C, K, Lq)
            per_pos = (np.exp(stack) if model.late else stack).mean(1)  # masses, not log masses
            mean, top = per_pos.mean(0), per_pos.max(0)
            w = np.where(top > 0, -np.log(np.clip(mean / np.clip(top, 1e-9, None), 1e-9, None)), 0.0)
            w = w / w.sum() if w.sum() > 0 else np.full_like(w, 1 / len(w))
            scores = (stack * w[None, None, :]).sum(-1)
        else:
            scores = np.stack([x.mean(-1) if x.shape[-1] else np.zeros(x.shape[0]) for x in m])
        calibration = np.stack([calib[pairs[i][1]] for i in rows]) if calib else None
        if calibration is not None and model.calibration_weights is not None:
            values = scores @ model.weights - calibration @ model.calibration_weights
        else:
            values = (scores - calibration if calibration is not None else scores) @ model.weights
        out[qid] = (values + model.bias).tolist()
    return out
