"""The few types every part of weir shares: documents, queries, hits and runs (TREC run files)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from weir.core.hits import DocIds, Ranked, trec_lines


class InputError(ValueError):
    """Bad input from a user: a file, line or value that weir cannot use. The message names where and why."""


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """The BEIR "flat" text: title and body joined by one space (the convention of the published BM25 figures)."""
        return f"{self.title} {self.text}" if self.title else self.text


@dataclass(frozen=True, slots=True)
class Query:
    id: str
    text: str


@dataclass(slots=True)
class Hit:
    doc_id: str
    score: float
    rank: int = 0
    stage_scores: dict[str, float] = field(default_factory=dict)
    title: str | None = None
    text: str | None = None
    relevance: float | None = None  # P(relevant), from a calibrated pipeline (weir.ranker.calibration)


class Run(MutableMapping[str, list[Hit]]):
    """Query id -> ranked hits (best first). Reads and writes TREC run format: ``qid Q0 docid rank score tag``.

    A query's hits are held as a list of :class:`Hit`, or as arrays (:class:`weir.core.hits.Ranked`, what the
    stages make): ``run[qid] = ranked`` stores arrays, and the ``Hit`` list is made from them when the query's hits are
    first asked for (``run[qid]``, ``get``, ``items``, ``values``), then kept (a caller may change it in place).
    :meth:`ranking` gives a query's arrays; writing, truncating, ranking and :meth:`to_dict` work on the arrays
    without making hits."""

    def __init__(self, hits: Mapping[str, list[Hit] | Ranked] | None = None, *,
                 timings: dict[str, float] | None = None):
        self._queries: dict[str, list[Hit] | Ranked] = (
            dict(hits._queries) if isinstance(hits, Run) else dict(hits or {}))
        # stage name -> wall seconds spent on this run's queries
        self.timings: dict[str, float] = dict(timings or {})

    def __getitem__(self, qid: str) -> list[Hit]:
        hits = self._queries[qid]
        if isinstance(hits, Ranked):
            hits = self._queries[qid] = _hits(hits)
        return hits

    def __setitem__(self, qid: str, hits: list[Hit] | Ranked) -> None:
        self._queries[qid] = hits

    def __delitem__(self, qid: str) -> None:
        del self._queries[qid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._queries)

    def __len__(self) -> int:
        return len(self._queries)

    def __contains__(self, qid: object) -> bool:
        return qid in self._queries

    def __repr__(self) -> str:
        return f"Run({dict(self.items())!r})"

    def ranking(self, qid: str) -> Ranked:
        """The query's hits as arrays (made from its ``Hit`` list when that is what the run holds)."""
        hits = self._queries[qid]
        if isinstance(hits, Ranked):
            return hits
        names = list(dict.fromkeys(n for h in hits for n in h.stage_scores))
        nan = float("nan")
        stages = {n: np.array([h.stage_scores.get(n, nan) for h in hits], dtype=np.float64) for n in names}
        relevance = (np.array([h.relevance for h in hits], dtype=np.float64)
                     if hits and all(h.relevance is not None for h in hits) else None)
        return Ranked(DocIds([h.doc_id for h in hits]), np.arange(len(hits)),
                      np.array([h.score for h in hits], dtype=np.float64), stages, relevance)

    def ranked(self) -> Run:
        """Sort each query's hits by descending score (ties by docid, for determinism) and renumber ranks from 1."""
        for qid, hits in self._queries.items():
            if isinstance(hits, Ranked):
                self._queries[qid] = hits.sorted()
                continue
            hits.sort(key=lambda h: (-h.score, h.doc_id))
            for rank, hit in enumerate(hits, start=1):
                hit.rank = rank
        return self

    def top(self, qid: str, n: int) -> list[Hit]:
        """The query's first ``n`` hits (none when the run lacks the query). Held as arrays, they are made for the
        caller and not kept, nor are the hits below them made: how a reranker reads its candidates."""
        hits = self._queries.get(qid, [])
        return _hits(hits.take(slice(n))) if isinstance(hits, Ranked) else hits[:n]

    def only(self, qids: Iterable[str]) -> Run:
        """The run of the queries ``qids`` that it has, in that order, their hits as held (no ``Hit`` made)."""
        return Run({qid: self._queries[qid] for qid in qids if qid in self._queries}, timings=self.timings)

    def truncated(self, k: int) -> Run:
        return Run({qid: hits.take(slice(k)) if isinstance(hits, Ranked) else hits[:k]
                    for qid, hits in self._queries.items()}, timings=self.timings)

    def without_identical_ids(self) -> Run:
        """Drop hits whose docid equals the qid (BEIR's ignore_identical_ids, needed for ArguAna)."""
        out = Run(timings=self.timings)
        for qid, hits in self._queries.items():
            if isinstance(hits, Ranked):
                out[qid] = hits.take(hits.ids.ids[hits.docs] != qid)
                continue
            out[qid] = [h for h in hits if h.doc_id != qid]
            for rank, hit in enumerate(out[qid], start=1):
                hit.rank = rank
        return out

    def write_trec(self, path: str | os.PathLike, tag: str = "weir") -> None:
        """Write atomically (temporary file, then rename): a crash never leaves half a run file. Hits held as arrays
        are formatted in bulk (:func:`weir.core.hits.trec_lines`), a few thousand lines at a time."""
        path = os.fspath(path)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            batch: list[tuple[str, Ranked]] = []
            lines = 0
            for qid, hits in self._queries.items():
                if isinstance(hits, Ranked):
                    batch.append((qid, hits))
                    lines += len(hits)
                    if lines < TREC_BATCH:
                        continue
                    hits = []
                _write_lines(f, batch, tag)
                batch, lines = [], 0
                f.write("".join(f"{qid} Q0 {hit.doc_id} {hit.rank} {hit.score:.6f} {tag}\n"
                                for hit in hits).encode("utf-8"))
            _write_lines(f, batch, tag)
        os.replace(tmp, path)

    def write_relevance(self, path: str | os.PathLike) -> int:
        """Write each hit's P(relevant) (a calibrated pipeline's run) as ``qid<TAB>docid<TAB>rank<TAB>relevance``
        lines, atomically, in the order of the TREC run; returns the lines written (0: no hit carries one, and
        nothing is written)."""
        rows = []
        for qid in self._queries:
            hits = self.ranking(qid)
            if hits.relevance is None:
                continue
            rows += [f"{qid}\t{d}\t{r}\t{p:.6f}\n"
                     for r, (d, p) in enumerate(zip(hits.doc_ids(), hits.relevance.tolist()), start=1)]
        if not rows:
            return 0
        path = os.fspath(path)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(rows)
        os.replace(tmp, path)
        return len(rows)

    @classmethod
    def read_trec(cls, path: str | os.PathLike) -> Run:
        run = cls()
        queries = run._queries
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                parts = line.split()
                if not parts:
                    continue
                if len(parts) != 6:
                    raise InputError(f"{path}:{lineno}: a TREC run line has 6 fields (qid Q0 docid rank score tag)")
                qid, _, docid, rank, score, _ = parts
                try:
                    hit = Hit(docid, float(score), int(rank))
                except ValueError:
                    raise InputError(f"{path}:{lineno}: rank and score must be numbers: {line.strip()!r}") from None
                queries.setdefault(qid, []).append(hit)
        return run.ranked()

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {qid: dict(zip(hits.doc_ids(), hits.scores.tolist())) if isinstance(hits, Ranked)
                else {h.doc_id: h.score for h in hits} for qid, hits in self._queries.items()}

    def hits_count(self) -> int:
        return sum(len(h) for h in self._queries.values())


TREC_BATCH = 1 << 16  # lines formatted at once by the bulk writer


def _write_lines(f, batch: list[tuple[str, Ranked]], tag: str) -> None:
    if not batch:
        return
    text = trec_lines(batch, tag)
    if text is None:  # a NUL somewhere: one line at a time
        text = "".join(f"{qid} Q0 {hit.doc_id} {hit.rank} {hit.score:.6f} {tag}\n"
                       for qid, r in batch for hit in _hits(r)).encode("utf-8")
    f.write(text)


def _hits(ranked: Ranked) -> list[Hit]:
    """The ``Hit`` objects of a query's arrays (ranks from 1), made in bulk."""
    values = ranked.scores.tolist()
    hits = list(map(Hit, ranked.doc_ids(), values, range(1, len(values) + 1), ranked.stage_dicts(values)))
    if ranked.relevance is not None:
        for hit, p in zip(hits, ranked.relevance.tolist()):
            hit.relevance = p
    return hits


def replace_hit(hit: Hit, **changes) -> Hit:
    return dataclasses.replace(hit, stage_scores=dict(hit.stage_scores), **changes)


def same_length_batches(lengths: Sequence, size: int) -> list[list[int]]:
    """Indices of items grouped by equal length (an int, or a tuple of lengths for pairs; longest first), each group
    cut into batches of at most ``size``: a model run on such batches needs no padding, so what it computes for an
    item does not depend on the other items of its batch (padding changes the last bits of a transformer's output)."""
    groups: dict = {}
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True):
        groups.setdefault(lengths[i], []).append(i)
    return [g[start:start + size] for g in groups.values() for start in range(0, len(g), size)]


def batched(items: Iterable, size: int) -> Iterator[list]:
    batch: list = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
