"""The few types every part of weir shares: documents, queries, hits and runs (TREC run files)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field


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


class Run(dict[str, list[Hit]]):
    """Query id -> ranked hits (best first). Reads and writes TREC run format: ``qid Q0 docid rank score tag``."""

    def __init__(self, hits: Mapping[str, list[Hit]] | None = None, *, timings: dict[str, float] | None = None):
        super().__init__(hits or {})
        # stage name -> wall seconds spent on this run's queries
        self.timings: dict[str, float] = dict(timings or {})

    def ranked(self) -> Run:
        """Sort each query's hits by descending score (ties by docid, for determinism) and renumber ranks from 1."""
        for hits in self.values():
            hits.sort(key=lambda h: (-h.score, h.doc_id))
            for rank, hit in enumerate(hits, start=1):
                hit.rank = rank
        return self

    def truncated(self, k: int) -> Run:
        return Run({qid: hits[:k] for qid, hits in self.items()}, timings=self.timings)

    def without_identical_ids(self) -> Run:
        """Drop hits whose docid equals the qid (BEIR's ignore_identical_ids, needed for ArguAna)."""
        out = Run({qid: [h for h in hits if h.doc_id != qid] for qid, hits in self.items()}, timings=self.timings)
        for hits in out.values():
            for rank, hit in enumerate(hits, start=1):
                hit.rank = rank
        return out

    def write_trec(self, path: str | os.PathLike, tag: str = "weir") -> None:
        """Write atomically (temporary file, then rename): a crash never leaves half a run file."""
        path = os.fspath(path)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            for qid, hits in self.items():
                for hit in hits:
                    f.write(f"{qid} Q0 {hit.doc_id} {hit.rank} {hit.score:.6f} {tag}\n")
        os.replace(tmp, path)

    @classmethod
    def read_trec(cls, path: str | os.PathLike) -> Run:
        run = cls()
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
                run.setdefault(qid, []).append(hit)
        return run.ranked()

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {qid: {h.doc_id: h.score for h in hits} for qid, hits in self.items()}

    def hits_count(self) -> int:
        return sum(len(h) for h in self.values())


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
