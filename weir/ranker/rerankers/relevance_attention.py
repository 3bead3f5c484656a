"""Late-interaction relevance attention: the attention layer the attention reranker reads relevance from.

The input is one sequence, ``[CLS] query [SEP] [CLS] passage [SEP]``. The backbone's own layers attend within a
segment only (PreTTR, MacAvaney et al. 2020: a block-diagonal attention mask, positions restarting per segment), so
each segment's token states are exactly what the backbone makes of that text alone: a passage's states depend on
the passage only, and are computed once per passage however many queries it is a candidate for. On top sits one
trained attention layer (:class:`RelevanceAttention`, query and key projections, ``heads`` heads) over the whole
sequence. Its attention probabilities are the relevance signal: for head ``h`` and query word piece ``i``, the log of
the attention mass ``i`` pays to the passage's word pieces (not [CLS]/[SEP]),

    log m_hi = logsumexp_{j in passage word pieces} a_hij - logsumexp_{j in the whole input} a_hij,

with ``a_hij`` the head's attention logits. The reranker averages it over the query's word pieces, subtracts the
same for a content-free query (calibration, optional) and combines the heads linearly
(:mod:`weir.ranker.rerankers.attention`).

Initialization (``init_similarity``): every projection is the identity times ``c`` with
``c^2 / sqrt(head_dim) = 1 / temperature``, over L2-normalized token states. With one full-width head the logits are
then token cosine similarities over the temperature, and ``log m_i`` is the soft MaxSim of query word piece ``i``
over the passage minus a normalizer that depends on the query only: the backbone's own token-level matching,
before any training. Training (`weir train attention --interaction late`) adapts the projections.

Only the rows of query word pieces are computed: the score depends on no other row of the layer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from weir.core.types import same_length_batches
from weir.ranker.rerankers.lru import LruCache


class RelevanceAttention(torch.nn.Module):
    """Query/key projections of one attention layer over the concatenated segments' token states."""

    def __init__(self, hidden: int, heads: int = 1, temperature: float = 0.05):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of {heads} heads")
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.query = torch.nn.Linear(hidden, hidden)
        self.key = torch.nn.Linear(hidden, hidden)
        self.init_similarity(temperature)

    def init_similarity(self, temperature: float) -> None:
        """Projections = identity * c, so that a head's logits are its dimensions' dot product / temperature."""
        c = math.sqrt(math.sqrt(self.head_dim) / temperature)
        with torch.no_grad():
            for lin in (self.query, self.key):
                lin.weight.copy_(torch.eye(self.hidden) * c)
                lin.bias.zero_()

    def _split(self, x):
        B, L, _ = x.shape
        return x.view(B, L, self.heads, self.head_dim).transpose(1, 2)  # (B, heads, L, head_dim)

    def forward(self, q_states, q_valid, p_states, p_valid, p_words):
        """Log attention mass on passage word pieces, (B, heads, Lq), for every query position (callers average
        over ``q_words``). ``*_states``: (B, L, H) token states; ``*_valid``: 1 for real tokens (incl. [CLS]/[SEP]);
        ``p_words``: 1 for the passage's word pieces."""
        neg = torch.finfo(q_states.dtype).min
        Q = self._split(self.query(q_states))
        Kq = self._split(self.key(q_states))
        Kp = self._split(self.key(p_states))
        scale = 1.0 / math.sqrt(self.head_dim)
        lq = torch.matmul(Q, Kq.transpose(2, 3)) * scale + (1 - q_valid)[:, None, None, :] * neg
        lp = torch.matmul(Q, Kp.transpose(2, 3)) * scale
        all_lse = torch.logsumexp(torch.cat([lq, lp + (1 - p_valid)[:, None, None, :] * neg], -1), -1)
        passage_lse = torch.logsumexp(lp + (1 - p_words)[:, None, None, :] * neg, -1)
        return passage_lse - all_lse


def segment_tokens(tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Word-piece ids of ``[CLS] text [SEP]`` per text, cut to ``max_length``."""
    return tokenizer(list(texts), truncation=True, max_length=max_length, add_special_tokens=True)["input_ids"]


def token_states(model, tokenizer, texts: Sequence[str], max_length: int, batch_size: int = 64,
                 device: str = "cpu") -> list:
    """The backbone's last-layer token states of each text encoded alone (``[CLS] text [SEP]``), L2-normalized per
    token: a list of (L_i, H) float32 tensors on the CPU. Texts are batched with texts of the same length only (no
    padding); ``batch_size=1`` encodes each in a pass of its own, so that its states do not depend at all on what
    else is encoded (the number of rows of a batch changes the last bits). ``model``: a Hugging Face model, or a
    :class:`weir.core.inference.Forward` (the backend the reranker runs on)."""
    from weir.core.inference import Forward

    ids = segment_tokens(tokenizer, texts, max_length)
    out: list = [None] * len(ids)
    if isinstance(model, Forward):
        for idx in same_length_batches([len(i) for i in ids], batch_size):
            input_ids = np.asarray([ids[i] for i in idx], dtype=np.int64)
            hidden = model({"input_ids": input_ids, "attention_mask": np.ones_like(input_ids),
                            "token_type_ids": np.zeros_like(input_ids)})["last_hidden_state"]
            hidden = hidden / np.maximum(np.linalg.norm(hidden, axis=-1, keepdims=True), 1e-12)
            for j, i in enumerate(idx):
                out[i] = torch.from_numpy(hidden[j].copy())
        return out
    with torch.inference_mode():
        for idx in same_length_batches([len(i) for i in ids], batch_size):
            input_ids = torch.tensor([ids[i] for i in idx], dtype=torch.long)
            hidden = model(input_ids=input_ids.to(device), attention_mask=torch.ones_like(input_ids).to(device))
            hidden = torch.nn.functional.normalize(hidden.last_hidden_state.float(), dim=-1).cpu()
            for j, i in enumerate(idx):
                out[i] = hidden[j].clone()
    return out


def pad_states(states: Sequence, device: str = "cpu"):
    """(B, L, H) padded states, (B, L) valid mask, (B, L) word-piece mask (valid minus [CLS] and final [SEP])."""
    L = max(len(s) for s in states)
    H = states[0].shape[-1]
    x = torch.zeros(len(states), L, H)
    valid = torch.zeros(len(states), L)
    for j, s in enumerate(states):
        x[j, :len(s)] = s.float()
        valid[j, :len(s)] = 1
    words = valid.clone()
    words[:, 0] = 0
    lengths = valid.sum(1).long()
    words[torch.arange(len(states)), lengths - 1] = 0
    return x.to(device), valid.to(device), words.to(device)


class FoldedRelevance:
    """:class:`RelevanceAttention` for one query against many passages, its passage-side projection folded onto the
    query side: a head's logits against a passage state ``p`` are ``(Q_h W_kh) p + Q_h b_kh`` (scaled), so the
    passages' states are used as stored, with no projection of their own, and every candidate of a query is scored by
    one matrix product. The same log masses as :meth:`RelevanceAttention.forward` (float32, to rounding)."""

    def __init__(self, layer: RelevanceAttention):
        def array(t):
            return t.detach().float().cpu().numpy()

        self.heads, self.head_dim = layer.heads, layer.head_dim
        self.wq, self.bq = array(layer.query.weight), array(layer.query.bias)
        self.wk, self.bk = array(layer.key.weight), array(layer.key.bias)
        self.scale = np.float32(1.0 / math.sqrt(layer.head_dim))

    def log_masses(self, query: np.ndarray, passages: Sequence[np.ndarray], heads: Sequence[int]) -> np.ndarray:
        """(passages, len(heads), Lq) log attention masses of every position of ``query`` (its token states, (Lq, H),
        [CLS] and [SEP] included) on each passage's word pieces (a passage's states (L, H), [CLS] and [SEP] included:
        they take attention but are not the passage's)."""
        q = np.asarray(query, dtype=np.float32)
        Q = q @ self.wq.T + self.bq
        Kq = q @ self.wk.T + self.bk
        lengths = np.array([len(p) for p in passages], dtype=np.int64)
        P = np.concatenate([np.asarray(p, dtype=np.float32) for p in passages]) if len(passages) else \
            np.zeros((0, q.shape[1]), np.float32)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        out = np.empty((len(passages), len(heads), len(q)), dtype=np.float32)
        # each passage's word pieces: all but its first ([CLS]) and last ([SEP]) state
        words = np.ones(len(P), dtype=bool)
        words[starts] = False
        words[starts + lengths - 1] = False
        for j, h in enumerate(heads):
            cols = slice(h * self.head_dim, (h + 1) * self.head_dim)
            Qh = Q[:, cols]
            own = (Qh @ Kq[:, cols].T) * self.scale  # (Lq, Lq): the query's own positions
            logits = (Qh @ self.wk[cols]) @ P.T * self.scale + ((Qh @ self.bk[cols]) * self.scale)[:, None]
            top = np.maximum(logits.max(axis=1) if len(P) else -np.inf, own.max(axis=1))  # (Lq,) a shift per row
            e = np.exp(logits - top[:, None])
            passage_all = np.add.reduceat(e, starts, axis=1) if len(P) else e[:, :0]
            passage_words = np.add.reduceat(np.where(words[None, :], e, 0), starts, axis=1) if len(P) else e[:, :0]
            total = passage_all + np.exp(own - top[:, None]).sum(axis=1)[:, None]
            tiny = np.finfo(np.float32).tiny  # a passage of no word pieces: the mass of none, finite
            out[:, j, :] = (np.log(np.maximum(passage_words, tiny)) - np.log(total)).T
        return out


class StateCache(LruCache):
    """Token states per key (a document id, a query text), kept as the ``attention`` component stores them (int8 with
    a scale per state, :mod:`weir.indexer.passage_states`), least recently used dropped beyond ``size``."""

    def __init__(self, size: int = 4096):
        super().__init__(size)

    def states(self, keys: Sequence[str], texts: Sequence[str], encode) -> list[np.ndarray]:
        """States of ``keys`` (float32 (L, H), the int8 rounding applied); those missing are encoded together by
        ``encode(their texts)`` (float32 arrays)."""
        from weir.indexer.passage_states import dequantize, quantize

        text_of = dict(zip(keys, texts))
        stored = self.get_many(keys, lambda missing: [quantize(s) for s in encode([text_of[k] for k in missing])])
        return [dequantize(*s) for s in stored]
