"""A query's hits as the protobuf wire bytes of a ``SearchResponse``'s ``hits`` field, written in bulk from arrays.

Filling a ``SearchResponse`` one ``Hit`` message at a time costs microseconds a hit (most of it the ``stage_scores``
map), several times what a first stage spends scoring them. Here every hit's bytes are computed together with numpy
from the arrays of :class:`weir.core.hits.Ranked`: each part of a hit (a field's tag, a varint length or rank, the
UTF-8 id, a float32 score, one stage's map entry) is a matrix with a column per hit, of which each column uses a
prefix; stacked, they make a matrix of hits, and its used bytes, hit after hit, are the ``hits`` field (one boolean
gather). Stored text (titles and texts, of any length) is spliced in between, hit by hit. The wire format
(https://protobuf.dev/programming-guides/encoding/) lets messages be concatenated, which merges them: the rest of a
response (timings, pipeline, batch size) is protobuf's own bytes of a response without hits, appended.

The bytes are those protobuf writes for the per-hit path (``search_pb2.Hit(doc_id=..., score=..., rank=...,
stage_scores=..., title=..., text=...)`` from a ``Hit``): a score is the array's value made a proto ``float``
(float32, rounded to nearest, as numpy's ``astype``), the rank is the position plus one, a hit's stage scores are the
stages it has a score from (NaN: none, as :meth:`weir.core.hits.Ranked.stage_dicts`); fields in field-number order,
proto3's defaults (an empty string, a +0.0 score) not written.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

import numpy as np

from weir.core.hits import Ranked

# the bytes of one part of every hit: a matrix with a column per hit (the layout that keeps numpy's inner loops
# long), and how many bytes of each column are used (None: all of every column)
Part = tuple[np.ndarray, np.ndarray | None]
# the used bytes of every hit, hit after hit, and each hit's length
Column = tuple[np.ndarray, np.ndarray]

# field tags: (number << 3) | wire type (0 varint, 2 length-delimited, 5 fixed 32-bit)
HIT_DOC_ID, HIT_SCORE, HIT_RANK, HIT_TITLE, HIT_TEXT, HIT_STAGE = 0x0A, 0x15, 0x18, 0x22, 0x2A, 0x32
HIT_RELEVANCE = 0x3D
ENTRY_KEY, ENTRY_VALUE = 0x0A, 0x15
RESPONSE_HITS = BATCH_RESULTS = 0x0A
_LIMITS = (1 << 7, 1 << 14, 1 << 21, 1 << 28)


def varint(n: int) -> bytes:
    """The varint of one non-negative integer."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varints(values: np.ndarray, tag: int | None = None) -> Part:
    """The varint of each non-negative integer below 2**35 (``tag`` before each, when given)."""
    v = np.asarray(values, dtype=np.int64)
    top = int(v.max()) if len(v) else 0
    width = 1 + sum(top >= limit for limit in _LIMITS)
    first = int(tag is not None)
    rows = np.empty((first + width, len(v)), dtype=np.uint8)
    if tag is not None:
        rows[0] = tag
    if width == 1:
        rows[first] = v
        return rows, None
    lengths = reduce(np.add, (v >= limit for limit in _LIMITS[:width - 1]), np.full(len(v), 1 + first))
    rows[first:] = (v >> np.arange(0, 7 * width, 7, dtype=np.int64)[:, None]) & 0x7F
    rows[first:][np.arange(first, first + width)[:, None] < lengths - 1] |= 0x80
    return rows, lengths


def sizes(parts: Sequence[Part]) -> np.ndarray:
    """How many bytes each hit's ``parts`` use together."""
    n = parts[0][0].shape[1]
    whole = sum(p[0].shape[0] for p in parts if p[1] is None)
    return reduce(np.add, (p[1] for p in parts if p[1] is not None), np.full(n, whole, dtype=np.int64))


_ranks: Part = (np.zeros((1, 0), dtype=np.uint8), None)


def ranks(n: int) -> Part:
    """The ``rank`` field of hits 1 to ``n`` (kept, and grown, across calls)."""
    global _ranks
    rows, lengths = _ranks
    if rows.shape[1] < n:
        _ranks = rows, lengths = varints(np.arange(1, max(n, 1024) + 1), HIT_RANK)
    width = 2 + sum(n >= limit for limit in _LIMITS)  # the tag, and the varint of n
    return rows[:width, :n], None if width == 2 else lengths[:n]


def floats(tag: bytes, values: np.ndarray) -> np.ndarray:
    """``tag``, then each value as a proto ``float`` (four little-endian bytes)."""
    rows = np.empty((len(tag) + 4, len(values)), dtype=np.uint8)
    rows[:len(tag)] = np.frombuffer(tag, dtype=np.uint8)[:, None]
    rows[len(tag):] = np.asarray(values).astype("<f4").view(np.uint8).reshape(-1, 4).T
    return rows


def joined(parts: Sequence[Part]) -> np.ndarray:
    """The parts of each hit one after the other, hit after hit: the used bytes of each."""
    widths = [p[0].shape[0] for p in parts]
    rows = np.empty((sum(widths), parts[0][0].shape[1]), dtype=np.uint8)
    used = None
    at = 0
    for (data, size), width in zip(parts, widths):
        rows[at:at + width] = data
        if size is not None:
            used = np.ones(rows.shape, dtype=bool) if used is None else used
            used[at:at + width] = np.arange(width)[:, None] < size
        at += width
    return rows.T.ravel() if used is None else rows.T[used.T]


def interleave(columns: Sequence[Column]) -> bytes:
    """Row after row, row i of each column in order (a slice each: for columns of long rows, such as texts)."""
    views = [memoryview(np.ascontiguousarray(data)) for data, _ in columns]
    bounds = [np.concatenate([[0], np.cumsum(size)]).tolist() for _, size in columns]
    n = len(columns[0][1])
    return b"".join([v[b[i]:b[i + 1]] for i in range(n) for v, b in zip(views, bounds)])


def strings(values: Sequence[str]) -> Column:
    """The UTF-8 bytes of ``values``, a row each."""
    encoded = [s.encode("utf-8") for s in values]
    return (np.frombuffer(b"".join(encoded), dtype=np.uint8),
            np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))


def field(tag: int, size: np.ndarray, keep_empty: bool = False) -> Part:
    """A length-delimited field's tag and length, before rows of ``size`` bytes; none where a row is empty (proto3
    writes no empty string) unless ``keep_empty`` (a message of a repeated field)."""
    rows, lengths = varints(size, tag)
    if keep_empty or size.all():
        return rows, lengths
    return rows, np.where(size > 0, rows.shape[0] if lengths is None else lengths, 0)


def _ids(ranked: Ranked) -> list[Part]:
    """The ``doc_id`` field of each hit, its bytes taken from the table's (:attr:`weir.core.hits.DocIds.utf8`)."""
    table = ranked.ids.utf8
    if table is None:  # an id holds a NUL: encoded one by one
        data, size = strings(ranked.doc_ids())
        rows = np.zeros((int(size.max(initial=0)), len(size)), dtype=np.uint8)
        rows.T[np.arange(rows.shape[0]) < size[:, None]] = data
    else:
        picked = table.take(ranked.docs)
        size = np.strings.str_len(picked).astype(np.int64)
        rows = picked.view(np.uint8).reshape(len(picked), picked.dtype.itemsize).T
    return [field(HIT_DOC_ID, size), (rows, size)]


def _stage(name: str, values: np.ndarray, bits: np.ndarray | None = None) -> Part:
    """One ``stage_scores`` map entry (its key, then its value) a hit, none where the stage gave it none (NaN);
    ``bits``: the values as proto floats already (the rows of :func:`floats` without a tag)."""
    key = name.encode("utf-8")
    entry = bytes([ENTRY_KEY]) + varint(len(key)) + key + bytes([ENTRY_VALUE])
    head = bytes([HIT_STAGE]) + varint(len(entry) + 4) + entry
    if bits is None:
        rows = floats(head, values)
    else:
        rows = np.empty((len(head) + 4, len(values)), dtype=np.uint8)
        rows[:len(head)] = np.frombuffer(head, dtype=np.uint8)[:, None]
        rows[len(head):] = bits
    missing = np.isnan(values) if values.dtype.kind == "f" else None
    if missing is None or not missing.any():
        return rows, None
    return rows, np.where(missing, 0, rows.shape[0])


def hit_parts(ranked: Ranked, rank: Part) -> tuple[list[Part], list[Part]]:
    """The parts of each hit's ``Hit`` before its title (id, score, ``rank``) and after its text (stage scores, then
    the relevance of a calibrated pipeline's hits: an ``optional`` field, written whatever its value)."""
    score = floats(bytes([HIT_SCORE]), ranked.scores)
    zero = ~score[1:].any(axis=0)  # +0.0 is not written, -0.0 is
    before = [*_ids(ranked), (score, np.where(zero, 0, 5) if zero.any() else None), rank]
    after = [_stage(name, values, score[1:] if values is ranked.scores else None)
             for name, values in ranked.stages.items()]
    if ranked.relevance is not None:
        after.append((floats(bytes([HIT_RELEVANCE]), ranked.relevance), None))
    return before, after


def _together(rankeds: Sequence[Ranked]) -> tuple[Ranked, Part]:
    """The hits of several queries over one table with the same stages, one query after the other, as one
    :class:`Ranked` (float32 and float64 scores together are float64, which holds both exactly), and their rank
    field (from 1 in each query)."""
    if len(rankeds) == 1:
        return rankeds[0], ranks(len(rankeds[0]))
    first, counts = rankeds[0], [len(r) for r in rankeds]
    scores = np.concatenate([r.scores for r in rankeds])
    stages = {name: scores if all(r.stages[name] is r.scores for r in rankeds)
              else np.concatenate([r.stages[name] for r in rankeds]) for name in first.stages}
    rows, lengths = ranks(max(counts))
    position = np.arange(len(scores)) - np.repeat(np.cumsum(counts) - counts, counts)
    relevance = None if first.relevance is None else np.concatenate([r.relevance for r in rankeds])
    together = Ranked(first.ids, np.concatenate([r.docs for r in rankeds]), scores, stages, relevance)
    return together, (rows.take(position, axis=1), None if lengths is None else lengths.take(position))


def hits_fields(rankeds: Sequence[Ranked]) -> list[bytes]:
    """The ``hits`` field of a ``SearchResponse`` (as :func:`hits_field` writes it without text) for each of
    ``rankeds``: those over the same table with the same stages (a batch's queries) written in one pass."""
    out = [b""] * len(rankeds)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rankeds):
        if len(r):
            groups.setdefault((id(r.ids), tuple(r.stages), r.relevance is None), []).append(i)
    for members in groups.values():
        before, after = hit_parts(*_together([rankeds[i] for i in members]))
        parts = [field(RESPONSE_HITS, sizes(before + after), keep_empty=True), *before, *after]
        data = memoryview(joined(parts))
        counts = [len(rankeds[i]) for i in members]
        ends = np.cumsum(np.add.reduceat(sizes(parts), np.cumsum(counts) - counts)).tolist()
        for i, start, end in zip(members, [0, *ends], ends):
            out[i] = bytes(data[start:end])
    return out


def hits_field(ranked: Ranked, titles: Sequence[str] | None = None, texts: Sequence[str] | None = None) -> bytes:
    """The ``hits`` field of a ``SearchResponse``: every hit of ``ranked``, best first, with its title and text
    when ``titles`` and ``texts`` are given (a string a hit), as wire bytes."""
    if titles is None and texts is None or not len(ranked):
        return hits_fields([ranked])[0]
    before, after = hit_parts(ranked, ranks(len(ranked)))
    title, text = strings(titles or [""] * len(ranked)), strings(texts or [""] * len(ranked))
    title_field, text_field = field(HIT_TITLE, title[1]), field(HIT_TEXT, text[1])
    size = sizes([*before, title_field, text_field, *after]) + title[1] + text[1]
    head = [field(RESPONSE_HITS, size, keep_empty=True), *before, title_field]
    columns = [(joined(head), sizes(head)), title, (joined([text_field]), sizes([text_field])), text]
    if after:
        columns.append((joined(after), sizes(after)))
    return interleave(columns)


def repeated(tag: int, messages: Sequence[bytes]) -> bytes:
    """The repeated message field ``tag`` holding ``messages`` (each already wire bytes), in order."""
    return b"".join([part for m in messages for part in (bytes([tag]) + varint(len(m)), m)])
