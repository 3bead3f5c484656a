"""Distributed index builds on Ray (``weir index build --ray``): the per-document steps run in a Ray Data actor pool.

What costs a build its time is per document: the transformer passes of quality scoring (static pruning), of term
weighting (DeepCT, DeepImpact) and of dense encoding. Here those steps run on Ray workers, block by block, and write
shard files; then :func:`weir.indexer.build.build_index` builds every component from the shards with the code of a
single-process build (Anserini's multi-threaded indexer for the Lucene components, faiss for the dense one). The
result is an ordinary index directory with its manifest; the manifest's ``distributed`` entry says how it was
computed.

- **Two phases.** With ``--prune``, a first pass scores every document's quality on the workers
  (:func:`score_quality`); the driver gathers the scores and chooses the pruned documents exactly as one process does
  (:mod:`weir.indexer.quality.prune`). The second pass (:func:`compute_shards`) weighs and encodes the documents kept.
  Each phase has its own plan and shards, so an interrupted build resumes in the phase it was in. An estimator that
  compares documents with each other (``duplicates``) scores on the driver.

- **Blocks.** The driver reads the corpus once (validating it as every build does) and cuts the documents to be
  indexed into blocks of ``block_size`` consecutive documents, each located by the byte offset of its first line.
  ``block_size`` is a multiple of the term weighting batch (256 documents), of the dense chunk (1024 by default)
  and of the quality estimator's chunk (1024 for ``learned``): a worker runs exactly the forward passes a single
  process runs, over the same documents, so scores, weights and vectors are the same bits (a transformer's output
  for a row changes in its last bits with the other rows of its batch).
- **Statistics.** A BM25-shaped head needs the whole collection's document frequencies and mean length. The
  workers count them first, block by block, into ``statistics/`` (tokenizing is nine tenths of a serial reading
  pass: measured 3.8 s against 0.4 s for the 39,610 DL pool passages); the counts are summed and handed to every
  worker once (``ray.put``) before any block is weighed.
- **Workers.** Ray Data ``map_batches`` over the blocks with an actor pool of ``workers`` actors: one GPU each when
  the cluster has GPUs, else ``cpus_per_worker`` CPUs and as many torch threads. Each actor loads its models once
  and reads its blocks from the corpus file, so the corpus must be on a filesystem every node sees.
- **Shards.** One file per block under the work directory (default: ``<out>.shards`` beside the index), written
  atomically. ``plan.json`` fingerprints what the shards depend on (corpus checksum, components, model checksums,
  encoder settings, block size, the documents kept). A rerun with the same plan computes only the blocks that have
  no shard yet, so an interrupted build resumes; a changed plan starts afresh. A worker that dies has its block
  retried on a restarted actor (Ray actor restarts and task retries). The work directory is removed once the index
  is in place, unless kept.

Written here, not taken from a library: Ray Data gives the pool, the scheduling and the retries. What no library
gives is the block plan that keeps the single-process build's batches, and the shard files that make a build resume.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import shutil
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from weir.indexer.collections import Corpus
from weir.core.provenance import sha256_file
from weir.core.types import InputError

PLAN, SHARDS, WORKERS, STATISTICS = "plan.json", "shards", "workers", "statistics"
PLAN_VERSION = 1
LOCAL = "local"


@dataclass(frozen=True)
class Phase:
    """One pass of the workers over the corpus: its plan file and its shard directory in the work directory."""

    name: str
    plan: str
    shards: str


QUALITY = Phase("quality scoring", "quality-plan.json", "quality-shards")
ENCODING = Phase("term weighting and dense encoding", PLAN, SHARDS)
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
    work_dir: str | None = None            # None: <out>.shards beside the index
    keep_shards: bool = False

    def check(self) -> None:
        if self.workers < 1:
            raise InputError(f"--ray-workers must be >= 1 (got {self.workers})")
        if self.cpus_per_worker is not None and self.cpus_per_worker <= 0:
            raise InputError(f"--ray-cpus-per-worker must be > 0 (got {self.cpus_per_worker})")


@dataclass(frozen=True)
class Block:
    index: int
    offset: int
    lineno: int
    count: int


def block_size(requested: int | None, dense, weighting: bool, unit: int = 1) -> int:
    """A block length that keeps every step's batches: a multiple of the term weighting batch (when weighting), of
    the dense chunk (when encoding) and of ``unit`` (a quality estimator's :attr:`batch_unit`)."""
    from weir.indexer.weighting.build import BATCH

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
    return Path(ray.work_dir) if ray.work_dir else Path(out).absolute().with_name(Path(out).name + ".shards")


def _model_fingerprints(kinds: list[str], options: dict) -> dict:
    from weir.indexer.weighting.build import model_path

    prints = {}
    for kind in kinds:
        path = model_path(kind, options)
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


class StatisticsWorker:
    """A Ray Data actor: per block, the collection statistics of its documents (df, documents, terms), written to
    ``statistics/`` of the work directory; summed by :func:`collection_statistics`."""

    def __init__(self, *, corpus: str, skip_empty: bool, keep, work_dir: str):
        import ray

        self.corpus = Corpus(corpus, skip_empty=skip_empty)
        self.keep = ray.get(keep) if isinstance(keep, ray.ObjectRef) else keep
        self.work = Path(work_dir)

    def __call__(self, batch: dict) -> dict:
        from weir.indexer.weighting.model import CollectionTermCounts

        out: dict[str, list] = {"documents": [], "seconds": []}
        for i, offset, lineno, count in zip(batch["index"], batch["offset"], batch["lineno"], batch["count"]):
            started = time.perf_counter()
            counts = CollectionTermCounts()
            for doc in self.corpus.read_block(int(offset), int(lineno), int(count), self.keep):
                counts.add(doc.contents)
            write_shard(self.work, int(i), counts, STATISTICS)
            out["documents"].append(counts.n_docs)
            out["seconds"].append(time.perf_counter() - started)
        return out


def collection_statistics(work: Path, blocks: list[Block]):
    """The whole collection's statistics: the sum of every block's (``statistics/``)."""
    from weir.indexer.weighting.model import CollectionTermCounts

    total = CollectionTermCounts()
    for block in tqdm(blocks, desc="summing statistics", unit="block", mininterval=1.0):
        total.merge(read_shard(work, block.index, STATISTICS))
    return total


class BlockWorker:
    """A Ray Data actor: loads the models once, then per block reads the documents, runs the steps, writes a shard.

    The steps are the phase's: quality scoring (``quality``: the estimator's name and seed), or term weighting
    (``kinds``) and dense encoding (``dense``)."""

    def __init__(self, *, corpus: str, skip_empty: bool, keep, stats, work_dir: str, learned: dict, kinds: list[str],
                 dense, threads: int | None, device: str | None, shards: str = SHARDS, quality: dict | None = None):
        import ray

        from weir.indexer.encoder import Encoder
        from weir.indexer.weighting.model import Backbone, TermWeighter

        def resolved(value):
            return ray.get(value) if isinstance(value, ray.ObjectRef) else value

        self.corpus = Corpus(corpus, skip_empty=skip_empty)
        self.keep, self.stats = resolved(keep), resolved(stats)
        self.work = Path(work_dir)
        self.shards = shards
        self.quality = None
        if quality is not None:
            from weir.indexer.quality import open_estimator
            from weir.core.runtime import prepare_device

            device = prepare_device(device, threads)
            self.quality = open_estimator(quality["estimator"], seed=int(quality.get("seed", 0)), device=device)
        self.models: dict[str, TermWeighter] = {}
        first = None
        for kind in kinds:
            path = learned[kind]
            card = json.loads((Path(path) / "card.json").read_text(encoding="utf-8"))
            if first is None or card.get("base_model") != first.card["base_model"] or \
                    card.get("max_length") != first.card.get("max_length"):
                backbone = Backbone(card["base_model"], device=device, threads=threads,
                                    max_length=int(card.get("max_length", 256)))
            else:
                backbone = first.backbone
            model = TermWeighter(path, backbone=backbone, batch_size=learned.get("batch_size") or 32)
            self.models[kind] = model
            first = first or model
        self.dense = dense
        self.encoder = None
        if dense is not None:
            options = {"device": device, "batch_size": dense.batch_size, "threads": threads}
            if dense.max_length:
                options["passage_max_length"] = dense.max_length
            self.encoder = Encoder(dense.model, **options)
        (self.work / WORKERS).mkdir(parents=True, exist_ok=True)
        # who is working, for operators (and the tests that stop a worker mid-build)
        (self.work / WORKERS / str(os.getpid())).write_text(socket.gethostname() + "\n", encoding="utf-8")

    def _weights(self, docs) -> tuple[dict, float]:
        from weir.indexer.weighting.build import BATCH
        from weir.indexer.weighting.model import TermStatistics

        if not self.models:
            return {}, 0.0
        started = time.perf_counter()
        stats = TermStatistics([d.contents for d in docs], collection=self.stats) if self.stats is not None else None
        first = next(iter(self.models.values()))
        backbones = {id(m.backbone): m.backbone for m in self.models.values()}
        results: dict[str, list] = {k: [] for k in self.models}
        vectors: dict[int, list] = {}
        for key, backbone in backbones.items():
            vectors[key] = []
            for start in range(0, len(docs), BATCH):
                vectors[key].extend(backbone.term_vectors([d.contents for d in docs[start:start + BATCH]],
                                                          first.batch_size))
        for kind, model in self.models.items():
            for i, (terms, v) in enumerate(vectors[id(model.backbone)]):
                results[kind].append((terms, model.weigh(v, stats, i, terms)))
        return results, time.perf_counter() - started

    def _vectors(self, docs) -> tuple[np.ndarray | None, float]:
        if self.encoder is None:
            return None, 0.0
        started = time.perf_counter()
        size = int(self.dense.chunk_size)
        parts = [self.encoder.encode_passages([d.contents for d in docs[s:s + size]])
                 for s in range(0, len(docs), size)]
        return np.concatenate(parts), time.perf_counter() - started

    def _scores(self, docs) -> tuple[np.ndarray | None, float]:
        if self.quality is None:
            return None, 0.0
        started = time.perf_counter()
        scores = np.asarray(self.quality.score(docs), dtype=np.float64)
        return scores, time.perf_counter() - started

    def __call__(self, batch: dict) -> dict:
        out: dict[str, list] = {"documents": [], "read": [], "quality": [], "term_weighting": [], "dense": [],
                                "worker": []}
        for i, offset, lineno, count in zip(batch["index"], batch["offset"], batch["lineno"], batch["count"]):
            started = time.perf_counter()
            docs = self.corpus.read_block(int(offset), int(lineno), int(count), self.keep)
            read = time.perf_counter() - started
            scores, quality = self._scores(docs)
            weights, weighting = self._weights(docs)
            vectors, dense = self._vectors(docs)
            shard = {"docids": [d.id for d in docs], "quality": scores, "weights": weights, "dense": vectors,
                     "models": {k: {**m.describe(), "card": m.card, "search": m.search_parameters()}
                                for k, m in self.models.items()},
                     "seconds": {"read": read, "quality": quality, "term_weighting": weighting, "dense": dense},
                     "worker": f"{socket.gethostname()}:{os.getpid()}"}
            write_shard(self.work, int(i), shard, self.shards)
            for key, value in (("documents", len(docs)), ("worker", shard["worker"]), *shard["seconds"].items()):
                out[key].append(value)
        return out


def shard_path(work: Path, index: int, shards: str = SHARDS) -> Path:
    return work / shards / f"{index:06d}.pkl"


def write_shard(work: Path, index: int, shard: dict, shards: str = SHARDS) -> None:
    path = shard_path(work, index, shards)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        pickle.dump(shard, f, protocol=5)
    os.replace(tmp, path)


def read_shard(work: Path, index: int, shards: str = SHARDS) -> dict:
    with open(shard_path(work, index, shards), "rb") as f:
        return pickle.load(f)


def _start_ray(ray_options: RayOptions, gpus: bool | None = None):
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        return False
    if ray_options.address == LOCAL:
        cpus = ray_options.workers * _cpus_per_worker(ray_options)
        ray.init(address="local", num_cpus=max(1, math.ceil(cpus)), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    else:
        ray.init(address=ray_options.address, log_to_driver=False)
    return True


def _restartable() -> dict:
    """A worker that dies is restarted and its block retried (Ray actor restarts and task retries)."""
    return {"max_restarts": -1, "max_task_retries": -1}


def _cpus_per_worker(ray_options: RayOptions) -> float:
    if ray_options.cpus_per_worker:
        return float(ray_options.cpus_per_worker)
    return float(max(1, (os.cpu_count() or 1) // ray_options.workers))


def _open_work(work: Path, phase: Phase, plan: dict) -> set[int]:
    """Make ``work`` ready for ``phase`` under ``plan``: reuse its shards when the plan is the one they were computed
    under, else start the phase afresh (a directory that is not a build's work directory is refused, never emptied);
    return the indices of the blocks whose shard is done."""
    previous = None
    if (work / phase.plan).is_file():
        previous = json.loads((work / phase.plan).read_text(encoding="utf-8"))
    if previous != plan:
        if previous is not None:
            tqdm.write(f"{work}: {phase.name} shards of another plan (corpus, models or settings changed); that "
                       "phase starts afresh")
            for part in (phase.shards, WORKERS, *([STATISTICS] if phase is ENCODING else [])):
                shutil.rmtree(work / part, ignore_errors=True)
        elif work.is_dir() and any(work.iterdir()) and not any((work / p.plan).is_file() for p in PHASES):
            raise InputError(f"{work}: not empty, and not the work directory of a build (no {PLAN}); give another "
                             "--ray-work-dir")
        work.mkdir(parents=True, exist_ok=True)
        (work / phase.plan).write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
    return {b for b in range(plan["blocks"]) if shard_path(work, b, phase.shards).is_file()}


def _run_phase(corpus: Corpus, work: Path, phase: Phase, blocks: list[Block], done: set[int],
               ray_options: RayOptions, worker: dict, *, keep=None, statistics: bool = False,
               neural: bool = True) -> dict:
    """Run the blocks that have no shard yet through the actor pool (in the child process), after counting the
    collection's statistics over every block when ``statistics``; what the child reported (rows per block computed,
    CPUs and GPUs per worker, seconds), or nothing when every block was done."""
    pending = [b for b in blocks if b.index not in done]
    if not pending:
        return {}
    job = {"ray": asdict(ray_options), "pending": [asdict(b) for b in pending], "phase": phase.name,
           "neural": neural, "total": sum(b.count for b in blocks),
           "initial": sum(b.count for b in blocks if b.index in done), "keep": keep,
           "statistics": [asdict(b) for b in blocks] if statistics else None,
           "worker": {"corpus": str(corpus.path.resolve()), "skip_empty": corpus.skip_empty,
                      "work_dir": str(work.resolve()), "shards": phase.shards, **worker}}
    return _run_child(work, job)


def _entry(ray_options: RayOptions, ran: dict, blocks: list[Block], done: set[int], size: int, work: Path,
           started: float) -> dict:
    """The manifest's record of a phase: blocks computed and reused, the workers seen, worker-seconds per step."""
    rows = ran.get("rows", [])  # one per block computed now: documents, seconds per step, worker
    steps = {}
    for step in ("quality", "term_weighting", "dense", "read"):
        seconds = float(sum(r[step] for r in rows))
        documents = int(sum(r["documents"] for r in rows))
        if seconds > 0:
            steps[step] = {"worker_seconds": round(seconds, 3), "documents": documents,
                           "passages_per_worker_second": round(documents / seconds, 2)}
    return {"ray": ray_options.address, "workers": ray_options.workers, "cpus_per_worker": ran.get("cpus"),
            "gpus_per_worker": ran.get("gpus"), "block_size": size, "blocks": len(blocks), "blocks_reused": len(done),
            "blocks_computed": len(blocks) - len(done), "workers_seen": sorted({r["worker"] for r in rows}),
            "steps": steps, "ray_seconds": ran.get("seconds"), "wall_seconds": round(time.perf_counter() - started, 3),
            "work_dir": str(work)}


def score_quality(corpus: Corpus, estimator, spec, out: Path, ray_options: RayOptions,
                  device: str | None = None) -> tuple[list[str], np.ndarray, dict]:
    """Score every document of ``corpus`` with the quality ``estimator`` (the one ``spec``, a
    :class:`weir.indexer.quality.prune.PruneSpec`, names) on Ray workers, block by block, resuming from the shards of an
    interrupted run; or read the scores the per-corpus cache holds for it (:mod:`weir.indexer.quality.cache`), as a
    single-process build does. Return the documents' ids, their scores (corpus order) and the scoring record (that
    of :func:`weir.indexer.quality.cache.scores_for`, plus ``distributed``: the phase's manifest entry)."""
    from weir.indexer.quality import cache

    ray_options.check()
    started = time.perf_counter()
    if not estimator.per_document:
        raise InputError(f"the {estimator.name} quality estimator compares documents with each other: it scores "
                         "the whole corpus in one process, not block by block")
    size = block_size(ray_options.block_size, None, False, int(estimator.batch_unit))
    work = work_directory(out, ray_options)
    docids: list[str] = []
    blocks, _ = plan_blocks(corpus, size, None, False, docids)
    path = cache.entry(corpus.stats.sha256, estimator)
    if (hit := cache.read(path, docids)) is not None:
        scores, meta = hit
        return docids, scores, {**meta, "cached": True, "distributed": {
            "ray": ray_options.address, "workers": 0, "blocks": 0,
            "note": "the scores came from the per-corpus cache: nothing ran on Ray"}}
    plan = {"version": PLAN_VERSION, "phase": "quality", "corpus": str(corpus.path.resolve()),
            "corpus_sha256": corpus.stats.sha256, "skip_empty": corpus.skip_empty, "block_size": size,
            "blocks": len(blocks), "estimator": estimator.card, "card_sha256": estimator.card_sha256}
    done = _open_work(work, QUALITY, plan)
    worker = {"kinds": [], "dense": None, "learned": {}, "device": device,
              "quality": {"estimator": spec.estimator, "seed": int(spec.seed)}}
    ran = _run_phase(corpus, work, QUALITY, blocks, done, ray_options, worker, neural=bool(estimator.neural))
    scored_ids: list[str] = []
    parts = []
    for block in tqdm(blocks, desc="reading quality shards", unit="shard", mininterval=1.0):
        shard = read_shard(work, block.index, QUALITY.shards)
        scored_ids.extend(shard["docids"])
        parts.append(shard["quality"])
    scores = np.concatenate(parts) if parts else np.zeros(0)
    if scored_ids != docids:
        raise InputError(f"{work}: the quality shards do not follow the corpus; remove the work directory and build "
                         "again")
    if scores.shape != (len(docids),) or not np.isfinite(scores).all():
        raise ValueError(f"quality estimator {estimator.name} gave {scores.shape} scores (finite: "
                         f"{bool(np.isfinite(scores).all())}) for {len(docids)} documents")
    entry = _entry(ray_options, ran, blocks, done, size, work, started)
    seconds = time.perf_counter() - started
    meta = {"estimator": estimator.card, "card_sha256": estimator.card_sha256, "documents": len(docids),
            "seconds": round(seconds, 3), "passages_per_second": round(len(docids) / max(seconds, 1e-9), 1),
            "quantiles": cache.quantiles(scores)}
    cache.write(path, docids, scores, meta)
    return docids, scores, {**meta, "cached": False, "distributed": entry}


def compute_shards(corpus: Corpus, components: tuple[str, ...], options: dict, keep: set[str] | None, out: Path,
                   ray_options: RayOptions, *, dense=None, device: str | None = None) -> dict:
    """Run the per-document steps of ``components`` on Ray (resuming from the shards of an interrupted run), then
    hand their results to the builders through ``options``; return the manifest's ``distributed`` entry."""
    from weir.indexer.weighting.build import learned_kinds, model_path

    ray_options.check()
    started = time.perf_counter()
    kinds = learned_kinds(components)
    if dense is not None and dense.vectors_from:
        raise InputError("--dense-vectors-from and --ray do not go together: reuse vectors in a single-process build")
    if not kinds and dense is None:  # bm25 alone: Lucene's multi-threaded indexer is the whole build
        return {"ray": ray_options.address, "workers": 0, "blocks": 0,
                "note": "no per-document step (term weighting, dense encoding) asked for: nothing ran on Ray"}
    size = block_size(ray_options.block_size, dense, bool(kinds))
    work = work_directory(out, ray_options)
    learned = options.get("learned") or {}
    fingerprints = _model_fingerprints(kinds, options)
    needs_statistics = False
    for kind in kinds:
        card = json.loads((model_path(kind, options) / "card.json").read_text(encoding="utf-8"))
        needs_statistics |= card.get("shape") == "bm25" or bool(card.get("features"))
    blocks, _ = plan_blocks(corpus, size, keep, statistics=False)  # the workers count the statistics
    keep_digest = None
    if keep is not None:
        keep_digest = hashlib.sha256("\n".join(sorted(keep)).encode()).hexdigest()
    plan = {"version": PLAN_VERSION, "corpus": str(corpus.path.resolve()), "corpus_sha256": corpus.stats.sha256,
            "skip_empty": corpus.skip_empty, "kept_sha256": keep_digest, "block_size": size, "blocks": len(blocks),
            "term_weighting": fingerprints, "dense": _dense_settings(dense)}
    done = _open_work(work, ENCODING, plan)
    worker = {"kinds": kinds, "dense": dense, "device": device or learned.get("device"),
              "learned": {**{k: str(model_path(k, options)) for k in kinds}, "batch_size": learned.get("batch_size")}}
    ran = _run_phase(corpus, work, ENCODING, blocks, done, ray_options, worker, keep=keep,
                     statistics=needs_statistics)
    _hand_over(work, blocks, kinds, dense, options)
    entry = _entry(ray_options, ran, blocks, done, size, work, started)
    if needs_statistics:
        entry["statistics"] = "the whole collection's, counted by the workers block by block and summed"
        if ran.get("statistics"):
            entry["steps"]["statistics"] = ran["statistics"]
    return entry


def _run_child(work: Path, job: dict) -> dict:
    """Run the Ray part of the build in a child process: Ray's signal handlers and the JVM's (Lucene, the analyzer)
    do not share one process safely (a Ray driver started after the JVM was seen to crash it with SIGSEGV here), and
    the driver's own memory stays clear of Ray's."""
    import subprocess
    import sys

    spec, result = work / "job.pkl", work / "job-result.json"
    with open(spec, "wb") as f:
        pickle.dump(job, f, protocol=5)
    result.unlink(missing_ok=True)
    (work / "job-error.txt").unlink(missing_ok=True)
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    code = subprocess.run([sys.executable, "-m", "weir.indexer.distributed", str(spec)], env=env, check=False).returncode
    if code != 0 or not result.is_file():
        failure = (work / "job-error.txt").read_text(encoding="utf-8") if (work / "job-error.txt").is_file() else ""
        raise InputError(f"the Ray workers failed (exit code {code}){': ' + failure if failure else ''}; the "
                         f"finished shards are kept in {work}: run the same build again to resume")
    return json.loads(result.read_text(encoding="utf-8"))


def _exit_with_parent() -> None:
    """Stop (Ray and its workers with us, by SIGTERM's handler) when the build that started this process is gone:
    a driver killed outright must not leave its workers computing."""
    import signal
    import threading

    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _run_job(spec: Path) -> None:
    """The child process: start or join Ray, run the pending blocks of one phase through the actor pool, report."""
    import ray
    import ray.data

    with open(spec, "rb") as f:
        job = pickle.load(f)
    work = spec.parent
    _exit_with_parent()
    options = RayOptions(**job["ray"])
    started = time.perf_counter()
    started_here = _start_ray(options)
    try:
        resources = ray.cluster_resources()
        gpus = 1 if resources.get("GPU", 0) >= 1 and job.get("neural", True) else 0  # no GPU for LightGBM
        cpus = _cpus_per_worker(options) if not gpus else 1.0
        if gpus and resources.get("GPU", 0) < options.workers:
            raise InputError(f"--ray-workers {options.workers}: the cluster has {resources['GPU']:g} GPUs (one per "
                             "worker); ask for fewer workers")
        if options.workers * cpus > resources.get("CPU", 0):
            raise InputError(f"--ray-workers {options.workers} x {cpus:g} CPUs: the cluster has "
                             f"{resources.get('CPU', 0):g} CPUs; ask for fewer workers or --ray-cpus-per-worker")
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        keep = ray.put(job["keep"]) if job["keep"] is not None else None
        stats, counted = None, None
        if job.get("statistics"):
            stats, counted = _count_statistics(work, [Block(**b) for b in job["statistics"]], options, cpus,
                                               {"corpus": job["worker"]["corpus"],
                                                "skip_empty": job["worker"]["skip_empty"], "keep": keep,
                                                "work_dir": job["worker"]["work_dir"]})
            stats = ray.put(stats)
        kwargs = {**job["worker"], "keep": keep, "stats": stats,
                  "threads": None if gpus else max(1, int(cpus)),
                  "device": "cuda" if gpus else (job["worker"]["device"] or "cpu")}
        items = job["pending"]
        ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            BlockWorker, batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=options.workers, max_tasks_in_flight_per_actor=1),
            fn_constructor_kwargs=kwargs, num_cpus=cpus, num_gpus=gpus, ray_remote_args_fn=_restartable)
        steps = "+".join([*job["worker"]["kinds"], *(["dense"] if job["worker"]["dense"] is not None else []),
                          *([f"quality ({job['worker']['quality']['estimator']})"] if job["worker"].get("quality")
                            else [])])
        with tqdm(total=job["total"], initial=job["initial"], desc=f"ray: {steps} on {options.workers} worker(s)",
                  unit="doc", mininterval=1.0) as bar:
            rows = []
            for row in ds.iter_rows():
                rows.append({k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()})
                bar.update(int(row["documents"]))
    finally:
        if started_here:
            ray.shutdown()
    (work / "job-result.json").write_text(json.dumps({"cpus": cpus, "gpus": gpus, "rows": rows, "statistics": counted,
                                                      "seconds": round(time.perf_counter() - started, 3)}))


def _count_statistics(work: Path, blocks: list[Block], options: RayOptions, cpus: float, kwargs: dict):
    """In the child: every block's statistics counted by an actor pool (those counted by an interrupted run kept),
    then summed; and the step's record (worker-seconds, documents, the sum's seconds)."""
    import ray.data

    pending = [asdict(b) for b in blocks if not shard_path(work, b.index, STATISTICS).is_file()]
    seconds = documents = 0.0
    if pending:
        ds = ray.data.from_items(pending, override_num_blocks=len(pending)).map_batches(
            StatisticsWorker, batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=options.workers, max_tasks_in_flight_per_actor=1),
            fn_constructor_kwargs=kwargs, num_cpus=cpus, ray_remote_args_fn=_restartable)
        with tqdm(total=len(blocks), initial=len(blocks) - len(pending), desc="ray: collection statistics",
                  unit="block", mininterval=1.0) as bar:
            for row in ds.iter_rows():
                seconds += float(row["seconds"])
                documents += int(row["documents"])
                bar.update(1)
    started = time.perf_counter()
    total = collection_statistics(work, blocks)
    record = {"worker_seconds": round(seconds, 3), "documents": int(documents), "blocks_counted": len(pending),
              "sum_seconds": round(time.perf_counter() - started, 3)}
    if seconds > 0:
        record["passages_per_worker_second"] = round(documents / seconds, 2)
    return total, record


class ShardVectors:
    """The dense vectors of the shards, chunk by chunk in corpus order (one shard held at a time). ``subset``: the
    chunks hold some of the documents only (one shard of a shard set, in corpus order); the rows of the others are
    passed over."""

    def __init__(self, work: Path, blocks: list[Block], subset: bool = False):
        self.work, self.blocks, self.subset = work, blocks, subset
        self.current = -1
        self.ids: list[str] = []
        self.vectors = None
        self.position = 0

    def _next_shard(self, wanted: str) -> None:
        if self.current + 1 >= len(self.blocks):
            raise InputError(f"{self.work}: the shards have no vector for document {wanted!r}; remove the work "
                             "directory and build again")
        self.current += 1
        shard = read_shard(self.work, self.blocks[self.current].index)
        self.ids, self.vectors, self.position = shard["docids"], shard["dense"], 0

    def _rows_of(self, chunk) -> np.ndarray:
        rows = []
        for doc in chunk:
            while True:
                if self.vectors is None or self.position == len(self.ids):
                    self._next_shard(doc.id)
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
            if self.vectors is None or self.position == len(self.ids):
                self.current += 1
                shard = read_shard(self.work, self.blocks[self.current].index)
                self.ids, self.vectors, self.position = shard["docids"], shard["dense"], 0
            take = min(needed, len(self.ids) - self.position)
            parts.append(self.vectors[self.position:self.position + take])
            ids = self.ids[self.position:self.position + take]
            expected = [d.id for d in chunk[len(chunk) - needed:len(chunk) - needed + take]]
            if ids != expected:
                raise InputError(f"{self.work}: the shards do not follow the corpus (documents {ids[:1]} vs "
                                 f"{expected[:1]}); remove the work directory and build again")
            self.position += take
            needed -= take
        return np.concatenate(parts).astype(np.float32, copy=False)


class _ShardReader:
    """Shards read from the work directory, the last two kept: the columns of one block zipped together (ids with
    weights) read its file once."""

    def __init__(self, work: Path, shards: str = SHARDS):
        self.work, self.shards = work, shards
        self.recent: dict[int, dict] = {}

    def __call__(self, index: int) -> dict:
        if index not in self.recent:
            if len(self.recent) >= 2:
                del self.recent[next(iter(self.recent))]
            self.recent[index] = read_shard(self.work, index, self.shards)
        return self.recent[index]


class ShardColumn:
    """One column of the shards (the document ids, or one model's weights) in corpus order, read a shard at a time
    each time it is iterated. The builders iterate it as they would a list, so the driver holds one shard, never
    every document's weights (as Python lists, about 9 KB a document per learned component on Cranfield: at MS
    MARCO's 8.8M passages, tens of GB)."""

    def __init__(self, reader: _ShardReader, blocks: list[Block], *key: str):
        self.reader, self.blocks, self.key = reader, blocks, key

    def __len__(self) -> int:
        return sum(b.count for b in self.blocks)

    def __iter__(self):
        for block in self.blocks:
            value = self.reader(block.index)
            for k in self.key:
                value = value[k]
            yield from value


def _hand_over(work: Path, blocks: list[Block], kinds: list[str], dense, options: dict) -> None:
    """Give the builders the shards' results: the learned weights as the memo of :mod:`weir.indexer.weighting.build`
    (columns read from the shards as the builders iterate them), the dense vectors as ``options['_dense_vectors']``."""
    if kinds and blocks:
        reader = _ShardReader(work)
        models = reader(blocks[0].index)["models"]
        docids = ShardColumn(reader, blocks, "docids")
        memo = options.setdefault("_learned_memo", {})
        for k in kinds:
            memo[k] = (docids, ShardColumn(reader, blocks, "weights", k), models[k])
    if dense is not None:
        options["_dense_vectors"] = ShardVectors(work, blocks)


def finish(out: Path, ray_options: RayOptions) -> None:
    """After the index is in place: remove the build's work directory unless it is to be kept."""
    work = work_directory(out, ray_options)
    if not ray_options.keep_shards and any((work / p.plan).is_file() for p in PHASES):
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import sys
    import traceback

    job_spec = Path(sys.argv[1])
    try:
        _run_job(job_spec)
    except BaseException as e:  # noqa: BLE001 (the driver reports it, with the shards kept for a resume)
        message = str(e) if isinstance(e, InputError) else "".join(traceback.format_exception_only(e)).strip()
        (job_spec.parent / "job-error.txt").write_text(message, encoding="utf-8")
        traceback.print_exc()
        sys.exit(1)
