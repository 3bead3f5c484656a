"""A transformer encoder with a DeepCT or DeepImpact head, one weight per unique term of a passage.

Each passage is split into words and terms by :mod:`indexer.weighting.terms`; the encoder reads the words
(``is_split_into_words``) in windows of at most ``max_length`` word pieces cut at word boundaries, so no term of a
long passage goes unweighted; a term is represented by the last hidden state of the first word piece of the word
where it first occurs. Heads:

- ``deepct``: ``Linear(dim, 1)`` (a regression of query term recall, unbounded);
- ``deepimpact``: ``Linear(dim, dim) -> ReLU -> Linear(dim, 1) -> ReLU`` (a non-negative impact).

A trained artifact is a directory: ``card.json`` (the model card: kind, base model, data, command, parameters,
metrics) and ``head.pt`` (the head's state_dict; the backbone is loaded from ``base_model``, any Hugging Face name or
local path, unchanged).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from indexer.weighting.terms import word_terms
from weir.provenance import sha256_file, write_card
from weir.runtime import DEFAULT_MODEL, load_pretrained, model_fingerprint, prepare_device, resolve_model
from weir.types import InputError

KINDS = ("deepct", "deepimpact")
CARD = "card.json"
HEAD = "head.pt"
MAX_LENGTH = 256
FEATURES = ("idf", "tf", "length")


class TermStatistics:
    """Term counts of every document and document frequencies of a corpus, for the optional lexical features."""

    def __init__(self, texts: Iterable[str]):
        from collections import Counter

        from indexer.weighting.terms import terms

        self.counts = [Counter(terms(t)) for t in texts]
        self.df: Counter = Counter(t for c in self.counts for t in c)
        self.n_docs = len(self.counts)

    def features(self, names: Sequence[str], i: int, doc_terms: Sequence[str]) -> np.ndarray:
        """(n_terms, len(names)) float32: ``idf`` = BM25 idf / 10, ``tf`` = log(1 + tf) / 3, ``length`` =
        log(1 + document terms) / 6 (scaled to the order of the hidden states)."""
        counts = self.counts[i]
        cols = []
        for name in names:
            if name == "idf":
                df = np.array([self.df.get(t, 0) for t in doc_terms], dtype=np.float64)
                cols.append(np.log(1 + (self.n_docs - df + 0.5) / (df + 0.5)) / 10)
            elif name == "tf":
                cols.append(np.log1p([counts.get(t, 1) for t in doc_terms]) / 3)
            elif name == "length":
                cols.append(np.full(len(doc_terms), math.log1p(sum(counts.values())) / 6))
            else:
                raise InputError(f"unknown term feature {name!r}; known: {', '.join(FEATURES)}")
        return np.stack(cols, axis=1).astype(np.float32) if cols else np.zeros((len(doc_terms), 0), np.float32)


def make_head(kind: str, dim: int):
    import torch.nn as nn

    if kind == "deepct":
        return nn.Linear(dim, 1)
    if kind == "deepimpact":
        return nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 1), nn.ReLU())
    raise InputError(f"unknown term weighting head {kind!r}; known: {', '.join(KINDS)}")


def passage_terms(text: str) -> tuple[list[str], list[str], list[int]]:
    """``(words, unique terms, index of the word of each term's first occurrence)``."""
    ws, pairs = word_terms(text)
    first: dict[str, int] = {}
    for i, t in pairs:
        first.setdefault(t, i)
    return ws, list(first), list(first.values())


class Backbone:
    """The encoder: term vectors of passages (frozen, inference only), batched, on the device chosen at run time."""

    def __init__(self, model: str | None = None, *, device: str | None = None, max_length: int = MAX_LENGTH,
                 fp16: bool | None = None, threads: int | None = None):
        import torch

        self.name = model or DEFAULT_MODEL
        self.path = resolve_model(model)
        self.device = prepare_device(device, threads)
        self.tokenizer, self.model = load_pretrained(model)
        # passages are tokenized whole and cut into windows here: the tokenizer's length warning does not apply
        self.tokenizer.model_max_length = 1 << 30
        if not self.tokenizer.is_fast:
            raise InputError(f"{self.name}: term weighting needs a fast tokenizer (word alignment)")
        self.fp16 = self.device.startswith("cuda") if fp16 is None else fp16
        self.model.to(self.device)
        if self.fp16:
            self.model.half()
        self.model.eval()
        self.max_length = max_length
        self.dim = int(self.model.config.hidden_size)
        # the special tokens around one sequence ([CLS] ... [SEP] for BERT), found by encoding a word with and without
        full = self.tokenizer("a")["input_ids"]
        bare = self.tokenizer("a", add_special_tokens=False)["input_ids"]
        at = next(i for i in range(len(full)) if full[i:i + len(bare)] == bare)
        self._before, self._after = list(full[:at]), list(full[at + len(bare):])
        self._prefix, self._extra = len(self._before), len(self._before) + len(self._after)
        self._torch = torch

    def describe(self) -> dict:
        return {"base_model": self.name, "base_model_path": self.path, "base_model_sha256": model_fingerprint(self.path),
                "max_length": self.max_length}

    def _windows(self, pieces: list[list[int]], needed: list[int]):
        """Cut a passage's word pieces into windows; yield (ids, [(position, row)]) for the needed words."""
        room = self.max_length - self._extra
        want = {w: r for r, w in enumerate(needed)}
        ids: list[int] = []
        marks: list[tuple[int, int]] = []
        for w, p in enumerate(pieces):
            if not p:
                continue
            if ids and len(ids) + len(p) > room:
                yield ids, marks
                ids, marks = [], []
            if w in want:
                marks.append((self._prefix + len(ids), want[w]))
            ids.extend(p[:room])
        if ids:
            yield ids, marks

    def term_vectors(self, texts: Sequence[str], batch_size: int = 32) -> list[tuple[list[str], np.ndarray]]:
        """Per text: (unique terms, float32 (n_terms, dim) first-occurrence vectors)."""
        torch = self._torch
        parsed = [passage_terms(t) for t in texts]
        out = [(terms, np.zeros((len(terms), self.dim), dtype=np.float32)) for _, terms, _ in parsed]
        chunks = []  # (text index, ids, marks)
        for ti, (ws, terms, first) in enumerate(parsed):
            if not terms:
                continue
            enc = self.tokenizer(ws, is_split_into_words=True, add_special_tokens=False)
            pieces: list[list[int]] = [[] for _ in ws]
            for tok, w in zip(enc["input_ids"], enc.word_ids()):
                if w is not None:
                    pieces[w].append(tok)
            for ids, marks in self._windows(pieces, first):
                # several terms may share a word (rare): every row of that word gets the word's vector
                chunks.append((ti, self._before + ids + self._after, marks))
        rows_of_word: list[dict[int, list[int]]] = []
        for _, _, first in parsed:
            m: dict[int, list[int]] = {}
            for r, w in enumerate(first):
                m.setdefault(w, []).append(r)
            rows_of_word.append(m)
        order = sorted(range(len(chunks)), key=lambda i: -len(chunks[i][1]))
        pad = self.tokenizer.pad_token_id or 0
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                width = max(len(chunks[i][1]) for i in idx)
                input_ids = torch.full((len(idx), width), pad, dtype=torch.long)
                mask = torch.zeros((len(idx), width), dtype=torch.long)
                for j, i in enumerate(idx):
                    ids = chunks[i][1]
                    input_ids[j, :len(ids)] = torch.tensor(ids)
                    mask[j, :len(ids)] = 1
                hidden = self.model(input_ids=input_ids.to(self.device),
                                    attention_mask=mask.to(self.device)).last_hidden_state.float().cpu().numpy()
                for j, i in enumerate(idx):
                    ti, _, marks = chunks[i]
                    _, terms, first = parsed[ti]
                    for pos, r in marks:
                        for row in rows_of_word[ti][first[r]]:
                            out[ti][1][row] = hidden[j, pos]
        return out


class TermWeighter:
    """A trained head over its backbone: ``weights(texts)`` -> per text (unique terms, float32 weights)."""

    def __init__(self, path: str | os.PathLike, *, device: str | None = None, backbone: Backbone | None = None,
                 batch_size: int = 32):
        import torch

        self.path = Path(path)
        card_path = self.path / CARD
        if not card_path.is_file() or not (self.path / HEAD).is_file():
            raise InputError(f"{self.path}: not a trained term weighting model (needs {CARD} and {HEAD}); "
                             f"train one with `weir train deepct|deepimpact`")
        self.card = json.loads(card_path.read_text(encoding="utf-8"))
        self.kind = self.card["kind"]
        self.backbone = backbone or Backbone(self.card["base_model"], device=device,
                                             max_length=int(self.card.get("max_length", MAX_LENGTH)))
        self.features = list(self.card.get("features") or [])
        self.head = make_head(self.kind, self.backbone.dim + len(self.features))
        self.head.load_state_dict(torch.load(self.path / HEAD, map_location="cpu", weights_only=True))
        self.head.eval()
        self.batch_size = batch_size

    def card_sha256(self) -> str:
        return sha256_file(self.path / CARD)

    def describe(self) -> dict:
        return {"model": str(self.path), "kind": self.kind, "card_sha256": self.card_sha256(),
                "head_sha256": sha256_file(self.path / HEAD), "base_model": self.card["base_model"],
                "max_length": self.backbone.max_length, "device": self.backbone.device}

    def apply(self, vectors: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
        """Head outputs for term vectors (plus the card's lexical ``features`` columns, when it has any)."""
        import torch

        if len(vectors) == 0:
            return np.zeros(0, dtype=np.float32)
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.features:
            if features is None:
                raise InputError(f"{self.path}: this head needs the term features {self.features}")
            x = np.concatenate([x, features], axis=1)
        with torch.inference_mode():
            return self.head(torch.from_numpy(x)).squeeze(-1).numpy()

    def weights(self, texts: Sequence[str], stats: TermStatistics | None = None) -> list[tuple[list[str], np.ndarray]]:
        """Per text: (unique terms, weights). A head with features takes ``stats`` of the collection (default: the
        statistics of ``texts`` themselves)."""
        if self.features and stats is None:
            stats = TermStatistics(texts)
        out = []
        for i, (terms, vecs) in enumerate(self.backbone.term_vectors(texts, self.batch_size)):
            feats = stats.features(self.features, i, terms) if self.features else None
            out.append((terms, self.apply(vecs, feats)))
        return out


def save(path: str | os.PathLike, head, card: dict) -> Path:
    import torch

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}, path / HEAD)
    write_card(path, {**card, "head_sha256": sha256_file(path / HEAD)}, CARD)
    return path


def weigh_many(models: Iterable[TermWeighter], texts: Sequence[str]) -> list[list[tuple[list[str], np.ndarray]]]:
    """Weights of ``texts`` under several heads sharing one backbone: one encoder pass for all."""
    models = list(models)
    vecs = models[0].backbone.term_vectors(texts, models[0].batch_size)
    return [[(terms, m.apply(v)) for terms, v in vecs] for m in models]
