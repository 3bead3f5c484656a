"""The driver of a distributed build, in the build's own process: plans a phase, runs the blocks no earlier run
finished in a child process (:mod:`weir.indexer.distributed.pool`), reads the results back and records the phase
for the manifest.

- :func:`score_quality`: the first phase of a pruned build, every document's quality score.
- :func:`compute_blocks`: the second, the term weights and dense vectors of the documents kept, handed to the
  component builders through their :class:`weir.indexer.inputs.BuildInputs`.
- :func:`finish`: once the index is in place, the work directory removed unless it is to be kept.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from weir.core.types import InputError
from weir.indexer.collections import Corpus
from weir.indexer.distributed.blocks import BlockColumn, BlockReader, BlockVectors, open_work, read_block
from weir.indexer.distributed.plan import (ENCODING, PHASES, QUALITY, Block, Phase, RayOptions, block_size,
                                           encoding_plan, model_fingerprints, plan_blocks, quality_plan, read_card,
                                           work_directory)
from weir.indexer.distributed.pool import ERROR, JOB, RESULT
from weir.indexer.inputs import BuildInputs, LearnedWeights


def _run_child(work: Path, job: dict) -> dict:
    """Run the Ray part of the build in a child process (:mod:`weir.indexer.distributed.pool` says why); what it
    reported."""
    spec, result, error = work / JOB, work / RESULT, work / ERROR
    with open(spec, "wb") as f:
        pickle.dump(job, f, protocol=5)
    result.unlink(missing_ok=True)
    error.unlink(missing_ok=True)
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    code = subprocess.run([sys.executable, "-m", "weir.indexer.distributed", str(spec)], env=env,
                          check=False).returncode
    if code != 0 or not result.is_file():
        failure = error.read_text(encoding="utf-8") if error.is_file() else ""
        raise InputError(f"the Ray workers failed (exit code {code}){': ' + failure if failure else ''}; the "
                         f"finished block files are kept in {work}: run the same build again to resume")
    return json.loads(result.read_text(encoding="utf-8"))


def _run_phase(corpus: Corpus, work: Path, phase: Phase, blocks: list[Block], done: set[int],
               ray_options: RayOptions, worker: dict, *, keep=None, statistics: bool = False,
               neural: bool = True) -> dict:
    """Run the blocks that have no file yet through the actor pool (in the child process), after counting the
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
                      "work_dir": str(work.resolve()), "blocks": phase.blocks, **worker}}
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


def _nothing_ran(ray_options: RayOptions, why: str) -> dict:
    return {"ray": ray_options.address, "workers": 0, "blocks": 0, "note": f"{why}: nothing ran on Ray"}


def score_quality(corpus: Corpus, estimator, spec, out: Path, ray_options: RayOptions,
                  device: str | None = None) -> tuple[list[str], np.ndarray, dict]:
    """Score every document of ``corpus`` with the quality ``estimator`` (the one ``spec``, a
    :class:`weir.indexer.quality.prune.PruneSpec`, names) on Ray workers, block by block, resuming from the block
    files of an interrupted run; or read the scores the per-corpus cache holds for it (:mod:`weir.indexer.quality.cache`),
    as a single-process build does. Return the documents' ids, their scores (corpus order) and the scoring record
    (that of :func:`weir.indexer.quality.cache.scores_for`, plus ``distributed``: the phase's manifest entry)."""
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
        return docids, scores, {**meta, "cached": True, "distributed": _nothing_ran(
            ray_options, "the scores came from the per-corpus cache")}
    done = open_work(work, QUALITY, quality_plan(corpus, size, blocks, estimator))
    worker = {"kinds": [], "dense": None, "learned": {}, "device": device,
              "quality": {"estimator": spec.estimator, "seed": int(spec.seed)}}
    ran = _run_phase(corpus, work, QUALITY, blocks, done, ray_options, worker, neural=bool(estimator.neural))
    scores = _read_scores(work, blocks, docids, estimator)
    entry = _entry(ray_options, ran, blocks, done, size, work, started)
    seconds = time.perf_counter() - started
    meta = {"estimator": estimator.card, "card_sha256": estimator.card_sha256, "documents": len(docids),
            "seconds": round(seconds, 3), "passages_per_second": round(len(docids) / max(seconds, 1e-9), 1),
            "quantiles": cache.quantiles(scores)}
    cache.write(path, docids, scores, meta)
    return docids, scores, {**meta, "cached": False, "distributed": entry}


def _read_scores(work: Path, blocks: list[Block], docids: list[str], estimator) -> np.ndarray:
    """The quality scores of the block files, in corpus order, checked to be one finite score per document."""
    scored_ids: list[str] = []
    parts = []
    for block in tqdm(blocks, desc="reading quality block files", unit="block", mininterval=1.0):
        content = read_block(work, block.index, QUALITY.blocks)
        scored_ids.extend(content["docids"])
        parts.append(content["quality"])
    scores = np.concatenate(parts) if parts else np.zeros(0)
    if scored_ids != docids:
        raise InputError(f"{work}: the quality block files do not follow the corpus; remove the work directory and "
                         "build again")
    if scores.shape != (len(docids),) or not np.isfinite(scores).all():
        raise ValueError(f"quality estimator {estimator.name} gave {scores.shape} scores (finite: "
                         f"{bool(np.isfinite(scores).all())}) for {len(docids)} documents")
    return scores


def compute_blocks(corpus: Corpus, inputs: BuildInputs, keep: set[str] | None, out: Path, ray_options: RayOptions,
                   *, device: str | None = None, states_out: Path | None = None) -> dict:
    """Run the per-document steps of ``inputs.components`` on Ray (resuming from the block files of an interrupted
    run), then hand their results to the builders through ``inputs`` (:attr:`BuildInputs.learned_memo`,
    :attr:`BuildInputs.dense_vectors`; the ``attention`` component's states written under ``states_out``); return
    the manifest's ``distributed`` entry."""
    from weir.indexer.document_pass import STATES, pass_input
    from weir.indexer.weighting.build import learned_kinds, model_path

    ray_options.check()
    started = time.perf_counter()
    kinds, dense, learned = learned_kinds(inputs.components), inputs.dense, inputs.learned
    if dense is not None and dense.vectors_from:
        raise InputError("--dense-vectors-from and --ray do not go together: reuse vectors in a single-process build")
    states = STATES in inputs.components
    choice = pass_input(learned, states)
    if not kinds and dense is None and not states:  # bm25 alone: Lucene's multi-threaded indexer is the whole build
        return _nothing_ran(ray_options, "no per-document step (term weighting, dense encoding) asked for")
    size = block_size(ray_options.block_size, dense, bool(kinds) or states)
    work = work_directory(out, ray_options)
    fingerprints = model_fingerprints(kinds, learned)
    needs_statistics = any(_needs_statistics(read_card(kind, learned)) for kind in kinds)
    blocks, _ = plan_blocks(corpus, size, keep, statistics=False)  # the workers count the statistics
    done = open_work(work, ENCODING, encoding_plan(corpus, size, blocks, keep, fingerprints, dense,
                                                   {"input": choice, "states": states}))
    worker = {"kinds": kinds, "dense": dense, "device": device or learned.get("device"),
              "learned": {**{k: str(model_path(k, learned)) for k in kinds}, "batch_size": learned.get("batch_size"),
                          "input": choice, "backend": learned.get("backend")}, "states": states}
    ran = _run_phase(corpus, work, ENCODING, blocks, done, ray_options, worker, keep=keep,
                     statistics=needs_statistics)
    _hand_over(work, blocks, kinds, inputs)
    if states:
        inputs.passage_states = _write_states(work, blocks, states_out / STATES)
    entry = _entry(ray_options, ran, blocks, done, size, work, started)
    if needs_statistics:
        entry["statistics"] = "the whole collection's, counted by the workers block by block and summed"
        if ran.get("statistics"):
            entry["steps"]["statistics"] = ran["statistics"]
    return entry


def _needs_statistics(card: dict) -> bool:
    """Whether a head with this card reads the whole collection's statistics (a BM25-shaped prior, lexical
    features)."""
    return card.get("shape") == "bm25" or bool(card.get("features"))


def _hand_over(work: Path, blocks: list[Block], kinds: list[str], inputs: BuildInputs) -> None:
    """Give the builders the block files' results: the learned weights as the build's memo (columns read from the
    block files as the builders iterate them), the dense vectors as :attr:`BuildInputs.dense_vectors`."""
    if kinds and blocks:
        reader = BlockReader(work)
        models = reader(blocks[0].index)["models"]
        docids = BlockColumn(reader, blocks, "docids")
        for k in kinds:
            inputs.learned_memo[k] = LearnedWeights(docids, BlockColumn(reader, blocks, "weights", k), models[k])
    if inputs.dense is not None:
        inputs.dense_vectors = BlockVectors(work, blocks)


def _write_states(work: Path, blocks: list[Block], out: Path) -> dict:
    """The ``attention`` component from the blocks' passage states, block by block, in corpus order (the single
    build's files: the same blocks of the same pass, stored as the workers quantized them)."""
    from weir.indexer.passage_states import StatesWriter

    reader = BlockReader(work)
    writer = None
    for block in blocks:
        content = reader(block.index)
        if writer is None:
            writer = StatesWriter(out, content["states_dim"], content["states_source"])
        for docid, (codes, scales) in zip(content["docids"], content["states"]):
            writer.add_quantized(docid, codes, scales)
    if writer is None:
        raise InputError("no passage states were computed: the collection has no document to index")
    return writer.close()


def finish(out: Path, ray_options: RayOptions) -> None:
    """After the index is in place: remove the build's work directory unless it is to be kept."""
    work = work_directory(out, ray_options)
    if not ray_options.keep_blocks and any((work / p.plan).is_file() for p in PHASES):
        shutil.rmtree(work, ignore_errors=True)
