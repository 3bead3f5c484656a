"""Hits as arrays: how a query's ranked hits travel inside weir, made and used in bulk.

A first stage computes a query's top k as numpy arrays (document ordinals and scores); building one Python object
per hit from them, and formatting a TREC line per hit, used to cost many times what the scoring did. Here:

- :class:`DocIds`: one stage's table from document ordinal (a Lucene doc number, a faiss row) to collection id, with
  what bulk work on ids needs, each computed once per table: the ids as UTF-8 bytes (the TREC writer), each id's rank
  in string order (ties broken by id without comparing strings), and the ordinal of given ids (fusion of stages whose
  numberings differ);
- :class:`Ranked`: one query's hits as arrays, best first: ordinals into a :class:`DocIds`, the scores as the stage
  computed them (float32 for an engine's, float64 for a fusion's), the score of each stage by name (NaN where a
  hit has none from that stage), from a calibrated pipeline each hit's probability of being relevant, and when asked
  to explain, what each stage's score of a hit is made of;
- :func:`trec_lines`: the TREC lines of many queries' :class:`Ranked` hits, formatted with numpy, byte for byte what
  ``f"{qid} Q0 {doc_id} {rank} {score:.6f} {tag}\\n"`` gives.

:class:`weir.core.types.Run` holds a query's hits either way and makes the ``Hit`` objects only when they are asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from weir.core.strings import StringTable

SCALE = 10 ** 6  # the TREC writer's six decimals
BIAS_PART, OTHER_PARTS = "(bias)", "(other parts)"  # the reasons of a score that no single part names
RISK_PART = "(risk)"  # a risk-aware score's penalty for its members' disagreement (weir.ranker.rerankers.ltr)
FIXED_PARTS = (BIAS_PART, RISK_PART)  # parts a stage's reasons always show, after its largest ones


class DocIds:
    """The collection id of each ordinal of one numbering of the documents (shared by every query a stage answers):
    a list of ids, or an index's :class:`weir.core.strings.StringTable` (millions of ids without a Python object each;
    :attr:`ids` makes them all only when asked)."""

    def __init__(self, ids: Sequence[str] | StringTable):
        self.table = ids if isinstance(ids, StringTable) else None
        if self.table is None:
            self.ids = (ids if isinstance(ids, np.ndarray) and ids.dtype == object
                        else np.asarray(list(ids), dtype=object))
        self._into: dict[int, tuple[DocIds, np.ndarray]] = {}

    @cached_property
    def ids(self) -> np.ndarray:
        """Every id as a Python string (for a table: made now, and kept)."""
        return np.asarray(self.table.take(np.arange(len(self.table))), dtype=object)

    def __len__(self) -> int:
        return len(self.table) if self.table is not None else len(self.ids)

    def __getstate__(self) -> dict:  # a pickle (to a Ray actor) carries the ids; what is derived is made again there
        return {"ids": self.table if self.table is not None else self.ids}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["ids"])

    def of(self, ordinals: np.ndarray) -> list[str]:
        """The collection ids of ``ordinals``."""
        if self.table is not None:
            return self.table.take(ordinals)
        return self.ids[ordinals].tolist()

    @cached_property
    def _sorted(self) -> tuple[np.ndarray, np.ndarray]:
        text = np.asarray(self.ids, dtype=str)
        order = np.argsort(text, kind="stable")
        return text[order], order

    @cached_property
    def rank(self) -> np.ndarray:
        """Each ordinal's rank in the string order of the ids (numpy's order of ``str`` is Python's: by code point,
        which is the UTF-8 byte order a table sorts by): ordering by it orders by id."""
        order = self.table.order() if self.table is not None else self._sorted[1]
        rank = np.empty(len(order), dtype=np.int32)
        rank[order] = np.arange(len(order), dtype=np.int32)
        return rank

    @cached_property
    def utf8(self) -> np.ndarray | None:
        """The ids as UTF-8 bytes (a numpy ``S`` array), or None when an id holds a NUL (which ``S`` cannot keep)."""
        if self.table is not None:
            return None if (self.table.buffer == 0).any() else self.table.utf8()
        encoded = [d.encode("utf-8") for d in self.ids.tolist()]
        if any(b"\0" in d for d in encoded):
            return None
        return np.array(encoded, dtype=bytes) if encoded else np.zeros(0, dtype="S1")

    def find(self, ids: Sequence[str] | np.ndarray) -> np.ndarray:
        """The ordinal of each of ``ids`` in this table, -1 for an id it does not hold."""
        if self.table is not None:
            return self.table.find([str(d) for d in ids])
        ordered, order = self._sorted
        wanted = np.asarray(ids, dtype=str) if len(ids) else np.zeros(0, dtype=str)
        if not len(ordered):
            return np.full(len(wanted), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(ordered, wanted), len(ordered) - 1)
        return np.where(ordered[at] == wanted, order[at], -1).astype(np.int64)

    def translate(self, other: DocIds) -> np.ndarray:
        """This table's ordinal of each ordinal of ``other`` (-1 for an id this table lacks), found once per pair of
        tables and kept: fusing two stages' hits is then an index into it, not a search of strings per query."""
        kept = self._into.get(id(other))
        if kept is None or kept[0] is not other:
            kept = self._into[id(other)] = (other, self.find(other.ids))
        return kept[1]


@dataclass(frozen=True, slots=True, eq=False)
class Ranked:
    """One query's hits, best first: ``docs`` (ordinals of ``ids``), ``scores`` and each stage's scores by name,
    aligned with ``docs`` (NaN: no score from that stage); ``relevance``, each hit's P(relevant) when a calibrated
    pipeline made them (:mod:`weir.ranker.calibration`), else None; ``reasons``, when a pipeline was asked to explain,
    the parts of each explaining stage's score by ``"stage:part"`` (a fusion's stages' shares, an LTR model's feature
    contributions and its bias), which add up to that stage's score (NaN: that stage did not score the hit). A hit's
    rank is its position plus one."""

    ids: DocIds
    docs: np.ndarray
    scores: np.ndarray
    stages: Mapping[str, np.ndarray] = field(default_factory=dict)
    relevance: np.ndarray | None = None
    reasons: Mapping[str, np.ndarray] | None = None

    @classmethod
    def of_stage(cls, ids: DocIds, docs: np.ndarray, scores: np.ndarray, name: str) -> Ranked:
        """A stage's own ranking: its scores are its stage scores."""
        return cls(ids, docs, scores, {name: scores})

    def __len__(self) -> int:
        return len(self.docs)

    def take(self, index) -> Ranked:
        """The hits at ``index`` (a slice, positions or a mask), in that order."""
        scores = self.scores[index]
        stages = {n: scores if a is self.scores else a[index] for n, a in self.stages.items()}
        return Ranked(self.ids, self.docs[index], scores, stages,
                      None if self.relevance is None else self.relevance[index],
                      None if self.reasons is None else {n: a[index] for n, a in self.reasons.items()})

    def with_relevance(self, relevance: np.ndarray | None) -> Ranked:
        """These hits with ``relevance`` (one per hit, or None)."""
        if relevance is not None and len(relevance) != len(self.docs):
            raise ValueError(f"{len(relevance)} relevance values for {len(self.docs)} hits")
        return Ranked(self.ids, self.docs, self.scores, self.stages, relevance, self.reasons)

    def doc_ids(self) -> list[str]:
        return self.ids.of(self.docs)

    def top_reasons(self, top: int = 5) -> list[list[tuple[str, str, float]]]:
        """Each hit's reasons as ``(stage, part, contribution)``: per explaining stage (in their order), its ``top``
        parts largest in magnitude (the :data:`FIXED_PARTS` apart), then its bias and risk penalty where it has them,
        then the rest summed as ``(other parts)``, so that a stage's reasons add up to its score of the hit. No
        reasons where none were kept."""
        if not self.reasons:
            return [[] for _ in range(len(self.docs))]
        by_stage: dict[str, list[tuple[str, np.ndarray]]] = {}
        for key, values in self.reasons.items():
            stage, _, part = key.partition(":")
            by_stage.setdefault(stage, []).append((part, values))
        out: list[list[tuple[str, str, float]]] = [[] for _ in range(len(self.docs))]
        for stage, parts in by_stage.items():
            fixed = [(n, v) for n, v in parts if n in FIXED_PARTS]
            named = [(n, v) for n, v in parts if n not in FIXED_PARTS]
            matrix = np.stack([v for _, v in named], axis=1)
            for i, row in enumerate(matrix):
                if np.isnan(row).all():
                    continue  # this stage did not score the hit
                order = np.argsort(-np.abs(row), kind="stable")
                out[i] += [(stage, named[j][0], float(row[j])) for j in order[:top]]
                out[i] += [(stage, n, float(v[i])) for n, v in fixed]
                if len(order) > top:
                    out[i].append((stage, OTHER_PARTS, float(row[order[top:]].sum())))
        return out

    def sorted(self) -> Ranked:
        """Best first by score, ties by id (the order of :meth:`weir.core.types.Run.ranked`)."""
        order = np.lexsort((self.ids.rank[self.docs], -self.scores))
        if (order == np.arange(len(order))).all():
            return self
        return self.take(order)

    def stage_dicts(self, values: list[float]) -> list[dict[str, float]]:
        """Each hit's ``{stage: score}`` (the stages it has a score from, in this ranking's order of stages);
        ``values``: the scores as Python floats."""
        if len(self.stages) == 1:
            ((name, column),) = self.stages.items()
            if column is self.scores:
                return [{name: v} for v in values]
        names = list(self.stages)
        if not names:
            return [{} for _ in values]
        columns = [self.stages[n].tolist() for n in names]
        if not any(np.isnan(self.stages[n]).any() for n in names):
            return [dict(zip(names, row)) for row in zip(*columns)]
        return [{n: v for n, v in zip(names, row) if v == v} for row in zip(*columns)]


def _groups(rows: np.ndarray) -> np.ndarray:
    """Rows of three ASCII digits as one uint32 each (the fourth byte a NUL)."""
    return np.concatenate([rows, np.zeros((len(rows), 1), dtype=np.uint8)], axis=1).view(np.uint32).ravel()


_DIGITS = np.array([list(f"{i:03d}".encode()) for i in range(1000)], dtype=np.uint8)
_THREE = _groups(_DIGITS)  # 7 -> "007"
_LEADING_ROWS = np.where(np.cumsum(_DIGITS > 48, axis=1) > 0, _DIGITS, 0).astype(np.uint8)
_LEADING = _groups(_LEADING_ROWS)  # 7 -> NUL NUL "7", 0 -> NULs
_LEADING_ROWS[0, 2] = 48
_LAST = _groups(_LEADING_ROWS)  # a number's last digit is always written: 0 -> NUL NUL "0"


def _digits(values: np.ndarray, groups: int, lead: bool) -> np.ndarray:
    """The decimal digits of non-negative integers below ``1000 ** groups`` as ASCII, four bytes a group of three
    (the fourth a NUL, as are the zeros before the first digit unless ``lead``: the writer drops every NUL)."""
    parts = []
    rest = values
    for _ in range(groups):
        rest, group = np.divmod(rest, 1000)
        parts.append(group)
    parts.reverse()
    out = np.empty((len(values), groups), dtype=np.uint32)
    started = np.zeros(len(values), dtype=bool)
    for j, g in enumerate(parts):
        if lead:
            out[:, j] = _THREE[g]
        elif j == groups - 1:
            out[:, j] = np.where(started, _THREE[g], _LAST[g])
        else:
            out[:, j] = np.where(started, _THREE[g], _LEADING[g])
            started |= g > 0
    return out.view(np.uint8)


def score_field(values: np.ndarray) -> np.ndarray:
    """``f"{v:.6f}"`` of each value as a row of bytes (NUL-padded: drop the NULs to read it), the same digits: Python
    rounds a double's exact value half to even; here ``|v| * 1e6`` is rounded, which gives the same integer wherever
    the product lies more than its rounding error from a half; the few values near a half (and any non-finite one)
    are formatted by Python."""
    x = np.asarray(values, dtype=np.float64)
    y = np.abs(x) * SCALE
    with np.errstate(invalid="ignore"):
        whole = np.floor(y)
        frac = y - whole
        safe = np.isfinite(y) & (y < 2.0 ** 52) & (np.abs(frac - 0.5) > 4 * np.spacing(np.maximum(y, 1.0)))
    n = np.where(safe, whole + (frac > 0.5), 0).astype(np.int64)
    integer, fraction = np.divmod(n, SCALE)
    groups = -(-len(str(int(integer.max()))) // 3) if len(integer) else 1
    sign = np.where(np.signbit(x), np.uint8(45), np.uint8(0))[:, None]
    point = np.full((len(x), 1), 46, dtype=np.uint8)
    out = np.concatenate([sign, _digits(integer, groups, False), point, _digits(fraction, 2, True)], axis=1)
    unsafe = np.flatnonzero(~safe)
    if len(unsafe):
        text = [f"{v:.6f}".encode() for v in x[unsafe].tolist()]
        wide = max(out.shape[1], *map(len, text))
        out = np.concatenate([out, np.zeros((len(x), wide - out.shape[1]), dtype=np.uint8)], axis=1)
        out[unsafe] = 0
        for i, t in zip(unsafe.tolist(), text):
            out[i, :len(t)] = np.frombuffer(t, dtype=np.uint8)
    return out


def fixed6(values: np.ndarray) -> list[bytes]:
    """``f"{v:.6f}".encode()`` of each value, through :func:`score_field` (one by one: for tests)."""
    return [row.tobytes().translate(None, b"\0") for row in score_field(values)]


def _bytes(strings: np.ndarray) -> np.ndarray:
    """An ``S`` array as a matrix of bytes, a row each (NUL-padded)."""
    return strings.view(np.uint8).reshape(len(strings), strings.dtype.itemsize)


_ranks = np.zeros(0, dtype="S1")


def rank_fields(n: int) -> np.ndarray:
    """``b" 1 "``, ``b" 2 "``, ... for ranks 1 to ``n``."""
    global _ranks
    if len(_ranks) < n:
        size = max(n, 2 * len(_ranks), 1024)
        _ranks = np.strings.add(np.strings.add(b" ", np.arange(1, size + 1).astype("S")), b" ")
    return _ranks[:n]


def trec_lines(queries: Sequence[tuple[str, Ranked]], tag: str) -> bytes | None:
    """The TREC run lines of ``(qid, hits)`` pairs, in order, as UTF-8; None when an id, qid or the tag holds a NUL
    (then the caller formats them one by one)."""
    queries = [(qid, r) for qid, r in queries if len(r)]
    if not queries:
        return b""
    prefixes = [f"{qid} Q0 ".encode("utf-8") for qid, _ in queries]
    suffix = f" {tag}\n".encode("utf-8")
    tables = [r.ids.utf8 for _, r in queries]
    if any(t is None for t in tables) or b"\0" in suffix or any(b"\0" in p for p in prefixes):
        return None
    counts = [len(r) for _, r in queries]
    width = max(t.dtype.itemsize for t in tables)
    columns = [
        _bytes(np.repeat(np.array(prefixes, dtype=bytes), counts)),
        _bytes(np.concatenate([t[r.docs].astype(f"S{width}") for t, (_, r) in zip(tables, queries)])),
        _bytes(np.concatenate([rank_fields(c) for c in counts])),
        score_field(np.concatenate([r.scores.astype(np.float64) for _, r in queries])),
    ]
    suffix = np.broadcast_to(np.frombuffer(suffix, dtype=np.uint8), (len(columns[0]), len(suffix)))
    return np.concatenate([*columns, suffix], axis=1).tobytes().translate(None, b"\0")
