"""The block files of a distributed build: one file per block and phase in the work directory, written atomically by
the workers (``blocks/``, ``quality-blocks/``, and ``statistics/`` for the collection statistics), found again when
an interrupted build resumes (:func:`open_work`), and read back by the driver one block at a time as the builders
iterate them (:class:`BlockColumn`, :class:`BlockVectors`, :func:`collection_statistics`).

A build's results are never all held by the driver: as Python lists the learned weights take about 9 KB a document
per learned component (Cranfield), tens of GB at MS MARCO's 8.8M passages.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
from tqdm import tqdm

from weir.core.types import InputError
from weir.indexer.distributed.plan import BLOCKS, ENCODING, PHASES, PLAN, STATISTICS, WORKERS, Block, Phase


def block_path(work: Path, index: int, directory: str = BLOCKS) -> Path:
    return work / directory / f"{index:06d}.pkl"


def write_block(work: Path, index: int, content, directory: str = BLOCKS) -> None:
    """Write block ``index``'s file in ``directory`` of the work directory, atomically (a file is whole or absent)."""
    path = block_path(work, index, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        pickle.dump(content, f, protocol=5)
    os.replace(tmp, path)


def read_block(work: Path, index: int, directory: str = BLOCKS):
    with open(block_path(work, index, directory), "rb") as f:
        return pickle.load(f)


def open_work(work: Path, phase: Phase, plan: dict) -> set[int]:
    """Make ``work`` ready for ``phase`` under ``plan``: reuse its block files when the plan is the one they were
    computed under, else start the phase afresh (a directory that is not a build's work directory is refused, never
    emptied); return the indices of the blocks whose file is done."""
    previous = None
    if (work / phase.plan).is_file():
        previous = json.loads((work / phase.plan).read_text(encoding="utf-8"))
    if previous != plan:
        if previous is not None:
            tqdm.write(f"{work}: {phase.name} block files of another plan (corpus, models or settings changed); "
                       "that phase starts afresh")
            for part in (phase.blocks, WORKERS, *([STATISTICS] if phase is ENCODING else [])):
                shutil.rmtree(work / part, ignore_errors=True)
        elif work.is_dir() and any(work.iterdir()) and not any((work / p.plan).is_file() for p in PHASES):
            raise InputError(f"{work}: not empty, and not the work directory of a build (no {PLAN}); give another "
                             "--ray-work-dir")
        work.mkdir(parents=True, exist_ok=True)
        (work / phase.plan).write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
    return {b for b in range(plan["blocks"]) if block_path(work, b, phase.blocks).is_file()}


def collection_statistics(work: Path, blocks: list[Block]):
    """The whole collection's statistics: the sum of every block's (``statistics/``)."""
    from weir.indexer.weighting.model import CollectionTermCounts

    total = CollectionTermCounts()
    for block in tqdm(blocks, desc="summing statistics", unit="block", mininterval=1.0):
        total.merge(read_block(work, block.index, STATISTICS))
    return total


class BlockReader:
    """Block files read from the work directory, the last two kept: the columns of one block zipped together (ids
    with weights) read its file once."""

    def __init__(self, work: Path, directory: str = BLOCKS):
        self.work, self.directory = work, directory
        self.recent: dict[int, dict] = {}

    def __call__(self, index: int) -> dict:
        if index not in self.recent:
            if len(self.recent) >= 2:
                del self.recent[next(iter(self.recent))]
            self.recent[index] = read_block(self.work, index, self.directory)
        return self.recent[index]


class BlockColumn:
    """One column of the block files (the document ids, or one model's weights) in corpus order, read a block at a
    time each time it is iterated. The builders iterate it as they would a list, so the driver holds one block, never
    every document's weights."""

    def __init__(self, reader: BlockReader, blocks: list[Block], *key: str):
        self.reader, self.blocks, self.key = reader, blocks, key

    def __len__(self) -> int:
        return sum(b.count for b in self.blocks)

    def __iter__(self):
        for block in self.blocks:
            value = self.reader(block.index)
            for k in self.key:
                value = value[k]
            yield from value


class BlockVectors:
    """The dense vectors of the block files, chunk by chunk in corpus order (one block held at a time). ``subset``:
    the chunks hold some of the documents only (one shard of a shard set, in corpus order); the rows of the others
    are passed over."""

    def __init__(self, work: Path, blocks: list[Block], subset: bool = False):
        self.work, self.blocks, self.subset = work, blocks, subset
        self.current = -1
        self.ids: list[str] = []
        self.vectors = None
        self.position = 0

    def for_a_shard(self) -> BlockVectors:
        """A new reader of the same block files for the documents of one shard of a shard set."""
        return BlockVectors(self.work, self.blocks, subset=True)

    def _next_block(self, wanted: str) -> None:
        """Read the next block's vectors, for document ``wanted`` (an error when no block is left)."""
        if self.current + 1 >= len(self.blocks):
            raise InputError(f"{self.work}: the block files have no vector for document {wanted!r}; remove the work "
                             "directory and build again")
        self.current += 1
        block = read_block(self.work, self.blocks[self.current].index)
        self.ids, self.vectors, self.position = block["docids"], block["dense"], 0

    def _block_used_up(self) -> bool:
        return self.vectors is None or self.position == len(self.ids)

    def _rows_of(self, chunk) -> np.ndarray:
        rows = []
        for doc in chunk:
            while True:
                if self._block_used_up():
                    self._next_block(doc.id)
                self.position += 1
                if self.ids[self.position - 1] == doc.id:
                    rows.append(self.vectors[self.position - 1])
                    break
        return np.stack(rows).astype(np.float32, copy=False)

    def __call__(self, chunk) -> np.ndarray:
        if self.subset:
            return self._rows_of(chunk)
        parts = []
        needed = len(chunk)
        while needed:
            first = len(chunk) - needed
            if self._block_used_up():
                self._next_block(chunk[first].id)
            take = min(needed, len(self.ids) - self.position)
            parts.append(self.vectors[self.position:self.position + take])
            ids = self.ids[self.position:self.position + take]
            expected = [d.id for d in chunk[first:first + take]]
            if ids != expected:
                raise InputError(f"{self.work}: the block files do not follow the corpus (documents {ids[:1]} vs "
                                 f"{expected[:1]}); remove the work directory and build again")
            self.position += take
            needed -= take
        return np.concatenate(parts).astype(np.float32, copy=False)
