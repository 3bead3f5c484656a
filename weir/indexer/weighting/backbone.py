"""The term weighting backbone: a transformer encoder run over passages in windows, the one forward of the document
pass (:mod:`weir.indexer.document_pass`). Each passage is split into words and terms by
:mod:`weir.indexer.weighting.terms`; the encoder reads either the words (``is_split_into_words``: runs of letters and
digits, in windows of at most ``max_length`` word pieces cut at word boundaries; the heads' training input) or the
passage's own text (``input="text"``: its word pieces, punctuation included, in consecutive windows, the first being
what a tokenizer truncating the text reads), so no term of a long passage goes unweighted. A term is represented by the
last hidden state of the first word piece of the word where it first occurs; the first window can also be pooled (a
dense vector) and kept as token states (the attention reranker's passage states).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from weir.core.inference import check_backend, open_forward
from weir.core.runtime import DEFAULT_MODEL, load_pretrained, model_fingerprint, prepare_device, resolve_model
from weir.core.types import InputError
from weir.indexer.weighting.terms import word_starts, word_terms

MAX_LENGTH = 256
INPUTS = ("text", "words")  # what the backbone reads of a passage (Backbone's ``input``)
DEFAULT_INPUT = "words"


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
                 fp16: bool | None = None, threads: int | None = None, backend: str | None = None,
                 input: str = DEFAULT_INPUT):
        if input not in INPUTS:
            raise InputError(f"unknown backbone input {input!r}; known: {', '.join(INPUTS)}")
        self.input = input
        self.name = model or DEFAULT_MODEL
        self.path = resolve_model(model)
        self.device = prepare_device(device, threads)
        self.tokenizer, self.model = load_pretrained(model)
        # passages are tokenized whole and cut into windows here: the tokenizer's length warning does not apply
        self.tokenizer.model_max_length = 1 << 30
        if not self.tokenizer.is_fast:
            raise InputError(f"{self.name}: term weighting needs a fast tokenizer (word alignment)")
        self.forward = open_forward(self.model, self.tokenizer, check_backend(backend, self.device), self.device,
                                    threads=threads, fp16=fp16)
        self.backend = self.forward.backend
        self.fp16 = bool(getattr(self.forward, "fp16", False))
        self.max_length = max_length
        self.dim = int(self.model.config.hidden_size)
        # the special tokens around one sequence ([CLS] ... [SEP] for BERT), found by encoding a word with and without
        full = self.tokenizer("a")["input_ids"]
        bare = self.tokenizer("a", add_special_tokens=False)["input_ids"]
        at = next(i for i in range(len(full)) if full[i:i + len(bare)] == bare)
        self._before, self._after = list(full[:at]), list(full[at + len(bare):])
        self._prefix, self._extra = len(self._before), len(self._before) + len(self._after)

    def describe(self) -> dict:
        return {"base_model": self.name, "base_model_path": self.path, "base_model_sha256": model_fingerprint(self.path),
                "max_length": self.max_length, "input": self.input, **self.forward.describe()}

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

    def _text_windows(self, text: str, needed: list[int]):
        """The ``text`` input: the text's own word pieces (punctuation included) in consecutive windows of
        ``max_length`` minus the special tokens, the first being what a tokenizer truncating the text at
        ``max_length`` reads; yield (ids, [(position, row)]) with each needed word at its first piece."""
        from bisect import bisect_right

        room = self.max_length - self._extra
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, ends = enc["input_ids"], [end for _, end in enc["offset_mapping"]]
        starts = word_starts(text)
        marks_of: dict[int, list[tuple[int, int]]] = {}
        for r, w in enumerate(needed):
            piece = min(bisect_right(ends, starts[w]), len(ids) - 1)  # the first piece ending after the word starts
            marks_of.setdefault(piece // room, []).append((self._prefix + piece % room, r))
        for k, start in enumerate(range(0, max(len(ids), 1), room)):
            yield ids[start:start + room], marks_of.get(k, [])

    def term_vectors(self, texts: Sequence[str], batch_size: int = 32) -> list[tuple[list[str], np.ndarray]]:
        """Per text: (unique terms, float32 (n_terms, dim) first-occurrence vectors), rounded to float16 precision as
        the term vector cache stores them, so that weights are the same whether the vectors come from the cache or
        not."""
        return [(p.terms, p.vectors) for p in self.run(texts, batch_size)]

    def _chunks(self, texts: Sequence[str], parsed: list, terms: bool, states: bool) -> list:
        """The windows to run: (text index, ids with the special tokens, [(position, term row)], first window)."""
        chunks = []
        for ti, (ws, words, first) in enumerate(parsed):
            if self.input == "text":  # every text has a first window, if only its special tokens
                windows = self._text_windows(texts[ti], first)
            elif not words:  # the words input: a text without terms has no window, but its states those of none
                if states:
                    chunks.append((ti, self._before + self._after, [], True))
                continue
            else:
                enc = self.tokenizer(ws, is_split_into_words=True, add_special_tokens=False)
                pieces: list[list[int]] = [[] for _ in ws]
                for tok, w in zip(enc["input_ids"], enc.word_ids()):
                    if w is not None:
                        pieces[w].append(tok)
                windows = self._windows(pieces, first)
            for w, (ids, marks) in enumerate(windows):
                # several terms may share a word (rare): every row of that word gets the word's vector
                chunks.append((ti, self._before + ids + self._after, marks, w == 0))
                if not terms:
                    break
        return chunks

    def run(self, texts: Sequence[str], batch_size: int = 32, *, pool=None, terms: bool = True,
            states: bool = False) -> list[Passed]:
        """One forward of each window of each text (``terms``; without: of its first window only), and per text what
        the consumers of the pass read (:class:`Passed`): term vectors (``terms``), the first window pooled by
        ``pool`` (hidden (B, L, dim), mask (B, L) -> (B, dim)), the first window's L2-normalized token states
        (``states``). Windows are batched longest first with padding, ``batch_size`` at a time."""
        parsed = [passage_terms(t) for t in texts]
        out = [Passed(words, np.zeros((len(words), self.dim), dtype=np.float32) if terms else None)
               for _, words, _ in parsed]
        chunks = self._chunks(texts, parsed, terms, states)
        rows_of_word: list[dict[int, list[int]]] = []
        for _, _, first in parsed:
            m: dict[int, list[int]] = {}
            for r, w in enumerate(first):
                m.setdefault(w, []).append(r)
            rows_of_word.append(m)
        order = sorted(range(len(chunks)), key=lambda i: -len(chunks[i][1]))
        pad = self.tokenizer.pad_token_id or 0
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            width = max(len(chunks[i][1]) for i in idx)
            input_ids = np.full((len(idx), width), pad, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for j, i in enumerate(idx):
                ids = chunks[i][1]
                input_ids[j, :len(ids)] = ids
                mask[j, :len(ids)] = 1
            hidden = self.forward({"input_ids": input_ids, "attention_mask": mask,
                                   "token_type_ids": np.zeros_like(input_ids)})["last_hidden_state"]
            firsts = [j for j, i in enumerate(idx) if chunks[i][3]]
            if firsts:
                vectors = pool(hidden[firsts], mask[firsts]) if pool is not None else [None] * len(firsts)
                for j, vector in zip(firsts, vectors):
                    ti, ids = chunks[idx[j]][0], chunks[idx[j]][1]
                    if self.input == "text" or parsed[ti][1]:
                        out[ti].window, out[ti].pooled = ids, vector
                    if states:
                        h = hidden[j, :len(ids)].astype(np.float32)
                        out[ti].states = h / np.maximum(np.linalg.norm(h, axis=-1, keepdims=True), 1e-12)
            if terms:
                for j, i in enumerate(idx):
                    ti, _, marks, _ = chunks[i]
                    _, _, first = parsed[ti]
                    for pos, r in marks:
                        for row in rows_of_word[ti][first[r]]:
                            out[ti].vectors[row] = hidden[j, pos]
        if terms:  # rounded to float16 as the term vector cache stores them
            for p in out:
                p.vectors = p.vectors.astype(np.float16).astype(np.float32)
        if pool is None:
            for p in out:
                p.pooled = None
        return out


class Passed:
    """What one pass of the backbone gives of one text: its unique ``terms`` and their ``vectors`` (float32 (n, dim),
    float16 precision; None when not asked for), the word pieces of its first ``window`` (special tokens included;
    empty for a text without terms), that window ``pooled`` (None unless asked for) and its L2-normalized token
    ``states`` (float32 (len(window), dim); None unless asked for)."""

    __slots__ = ("terms", "vectors", "window", "pooled", "states")

    def __init__(self, terms: list[str], vectors: np.ndarray | None):
        self.terms, self.vectors = terms, vectors
        self.window: list[int] = []
        self.pooled = None
        self.states = None
