"""The plan of a distributed build: where and how wide it runs (:class:`RayOptions`), its two phases, the blocks the
corpus is cut into, and the fingerprint of what the block files depend on.

A block is ``block_size`` consecutive documents of those to be indexed, located by the byte offset of its first
line. ``block_size`` is a multiple of every step's batch, so a worker runs exactly the forward passes a single
process runs, over the same documents (:func:`block_size`). The plan written to the work directory
(:func:`encoding_plan`, :func:`quality_plan`) decides whether an earlier run's block files can be reused.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from weir.core.provenance import sha256_file
from weir.core.types import InputError
from weir.indexer.collections import Corpus

# the work directory's plan file, block file directory, live worker list and statistics block files; version 2: the
# per-block files moved from shards/ to blocks/ (a work directory of an earlier version is not resumed: its plan
# differs, so the build starts afresh)
PLAN, BLOCKS, WORKERS, STATISTICS = "plan.json", "blocks", "workers", "statistics"
PLAN_VERSION = 2
LOCAL = "local"


@dataclass(frozen=True)
class Phase:
    """One pass of the workers over the corpus: its plan file and its block file directory in the work directory."""

    name: str
    plan: str
    blocks: str


QUALITY = Phase("quality scoring", "quality-plan.json", "quality-blocks")
ENCODING = Phase("term weighting and dense encoding", PLAN, BLOCKS)
PHASES = (QUALITY, ENCODING)


@dataclass
class RayOptions:
    """Where and how wide a distributed build runs.

    ``address``: ``local`` starts a Ray instance on this machine for the build and stops it after (``workers`` x
    ``cpus_per_worker`` CPUs); ``auto`` joins the running cluster (``RAY_ADDRESS`` or the one started with ``ray
    start``); anything else is a cluster address (``ray://host:10001`` or ``host:6379``)."""

    address: str = LOCAL
    workers: int = 2
    cpus_per_worker: float | None = None   # None: this machine's cores / workers, at least 1 (GPU clusters: 1)
    block_size: int | None = None          # None: the smallest multiple of both batches >= 1024 documents
    work_dir: str | None = None            # None: <out>.blocks beside the index
    keep_blocks: bool = False              # keep the work directory (block files) once the index is in place

    def check(self) -> None:
        if self.workers < 1:
            raise InputError(f"--ray-workers must be >= 1 (got {self.workers})")
        if self.cpus_per_worker is not None and self.cpus_per_worker <= 0:
            raise InputError(f"--ray-cpus-per-worker must be > 0 (got {self.cpus_per_worker})")


@dataclass(frozen=True)
class Block:
    """``count`` documents to be indexed, the first at byte ``offset`` (line ``lineno``) of the corpus file."""

    index: int
    offset: int
    lineno: int
    count: int


def block_size(requested: int | None, dense, weighting: bool, unit: int = 1) -> int:
    """A block length that keeps every step's batches: a multiple of the term weighting batch (when weighting), of
    the dense chunk (when encoding) and of ``unit`` (a quality estimator's :attr:`batch_unit`)."""
    from weir.indexer.document_pass import BATCH

    if weighting:
        unit = math.lcm(unit, BATCH)
    if dense is not None:
        unit = math.lcm(unit, int(dense.chunk_size))
    if requested is None:
        return unit * max(1, math.ceil(1024 / unit))
    if requested < 1 or requested % unit:
        raise InputError(f"--ray-block-size must be a positive multiple of {unit} (the batches of the steps asked "
                         f"for, which a worker must run as one process does); got {requested}")
    return requested


def work_directory(out: Path, ray: RayOptions) -> Path:
    """Where the build keeps its block files: ``--ray-work-dir``, else ``<out>.blocks`` beside the index."""
    return Path(ray.work_dir) if ray.work_dir else Path(out).absolute().with_name(Path(out).name + ".blocks")


def plan_blocks(corpus: Corpus, size: int, keep: set[str] | None, statistics: bool,
                docids: list[str] | None = None):
    """One validating pass over the corpus: the blocks of the documents to index, and (when ``statistics``) the
    whole collection's term statistics over those documents. Their ids are appended to ``docids`` when given."""
    from weir.indexer.weighting.model import CollectionTermCounts

    stats = CollectionTermCounts() if statistics else None
    blocks: list[Block] = []
    start = None
    count = 0
    located = corpus.located()
    for offset, lineno, doc in tqdm(located, desc="planning blocks", unit="doc", mininterval=1.0):
        if keep is not None and doc.id not in keep:
            continue
        if docids is not None:
            docids.append(doc.id)
        if count == 0:
            start = (offset, lineno)
        count += 1
        if stats is not None:
            stats.add(doc.contents)
        if count == size:
            blocks.append(Block(len(blocks), start[0], start[1], count))
            count = 0
    if count:
        blocks.append(Block(len(blocks), start[0], start[1], count))
    return blocks, stats


def read_card(kind: str, learned: dict) -> dict:
    """The model card of learned component ``kind``'s model (``learned``: the build's learned settings)."""
    from weir.indexer.weighting.build import model_path

    return json.loads((model_path(kind, learned) / "card.json").read_text(encoding="utf-8"))


def model_fingerprints(kinds: list[str], learned: dict) -> dict:
    """Each term weighting model's directory and the checksums of its card and head (an InputError for a directory
    that is not a trained model)."""
    from weir.indexer.weighting.build import model_path

    prints = {}
    for kind in kinds:
        path = model_path(kind, learned)
        if not (path / "card.json").is_file() or not (path / "head.pt").is_file():
            raise InputError(f"{path}: not a trained term weighting model (needs card.json and head.pt)")
        prints[kind] = {"path": str(path.resolve()), "card_sha256": sha256_file(path / "card.json"),
                        "head_sha256": sha256_file(path / "head.pt")}
    return prints


def _dense_settings(dense) -> dict | None:
    if dense is None:
        return None
    from weir.core.runtime import model_fingerprint, resolve_model

    settings = {k: v for k, v in asdict(dense).items() if k in ("model", "batch_size", "chunk_size", "max_length")}
    return {**settings, "model_sha256": model_fingerprint(resolve_model(dense.model))}


def _corpus_plan(corpus: Corpus, size: int, blocks: list[Block]) -> dict:
    return {"version": PLAN_VERSION, "corpus": str(corpus.path.resolve()), "corpus_sha256": corpus.stats.sha256,
            "skip_empty": corpus.skip_empty, "block_size": size, "blocks": len(blocks)}


def encoding_plan(corpus: Corpus, size: int, blocks: list[Block], keep: set[str] | None, fingerprints: dict,
                  dense, document_pass: dict | None = None) -> dict:
    """What the encoding phase's block files depend on: the corpus, the documents kept, the block plan, the term
    weighting models (``fingerprints``: :func:`model_fingerprints`) and the encoder's settings."""
    keep_digest = None
    if keep is not None:
        keep_digest = hashlib.sha256("\n".join(sorted(keep)).encode()).hexdigest()
    return {**_corpus_plan(corpus, size, blocks), "kept_sha256": keep_digest, "term_weighting": fingerprints,
            "dense": _dense_settings(dense), **({"document_pass": document_pass} if document_pass else {})}


def quality_plan(corpus: Corpus, size: int, blocks: list[Block], estimator) -> dict:
    """What the quality phase's block files depend on: the corpus, the block plan and the estimator."""
    return {**_corpus_plan(corpus, size, blocks), "phase": "quality", "estimator": estimator.card,
            "card_sha256": estimator.card_sha256}
