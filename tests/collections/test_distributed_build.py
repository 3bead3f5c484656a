"""The distributed build on Ray (``weir index build --ray``, :mod:`weir.indexer.distributed`) gives the single-process
index: the first 300 documents of Cranfield (real text) in blocks of 256 (the term weighting batch) on 2 local
workers, so one block of 256 and one of 44. The transformer passes are what these tests wait on, so all but the first
ten documents are cut to their first 48 words (a quarter of the average); the ten whole ones keep passages that span
several term-weighting windows in the first block. Killed as a whole after its first block file, a build of bm25, deepct
and deepimpact run again resumes from it and gives the single-process index: every run of every component equal, ids,
order and scores. Killed at each phase its driver runs after the blocks (Lucene, the postings export, the dense index;
``WEIR_KILL_EVERY_PHASE=1``, three more builds: 59 s here, 2026-12-07), a build over an index leaves it untouched and
verified, and the next run reuses every block and gives the single-process index. A shard set built on Ray (``--shard-set 2``, bm25, deepct, deepimpact and dense) with one worker
killed mid-build holds the single index's postings and vectors (the same bits) in its two shards, the killed
worker's block retried on a restarted actor. (What ``--shard I/N --ray`` hands the workers is checked without Ray,
in tests/indexer/test_distributed_plan.py.)

With ``--prune learned:0.25`` the quality scoring runs on the workers too: over the whole of Cranfield, cut as above
(1,398 non-empty documents, two blocks of the learned estimator's 1024) its scores must be the single-process build's
bits, prune the same documents and give the same BM25 runs; run again, the build reuses the quality block files.

Ray runs in a child process of the build, started here through the command line in a loopback-only network
namespace where one can be made (root and ``unshare``): there Ray binds 127.0.0.1 only (../shared/DESIGN.md).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, collection, in_loopback_namespace

pytestmark = pytest.mark.data

DOCUMENTS, BLOCK = 300, 256
WHOLE, WORDS = 10, 48  # the first WHOLE documents as they are, the others cut to their first WORDS words
COMPONENTS = "bm25,deepct,deepimpact,dense,attention"
LEXICAL = "bm25,deepct,deepimpact,attention"  # (the attention states: a pass of their own, the heads reading words)
TIMEOUT = 900


def _build(coll: Path, out: Path, work: Path, components: str = COMPONENTS, extra: tuple[str, ...] = ()) -> list[str]:
    command = [sys.executable, "-m", "weir.cli", "index", "build", "--collection", str(coll), "--out", str(out),
               "--with", components, "--skip-empty", "--dense-chunk-size", str(BLOCK), "--ray", "--ray-workers", "2",
               "--ray-cpus-per-worker", "1", "--ray-block-size", str(BLOCK), "--ray-work-dir", str(work),
               "--keep-blocks", *extra]
    return in_loopback_namespace(command)[0]


def _wait_for(predicate, proc: subprocess.Popen, what: str, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        if proc.poll() is not None:
            pytest.fail(f"the build ended (exit code {proc.returncode}) before {what}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"no {what} within {timeout}s")


def _block_files(work: Path) -> list[Path]:
    return sorted(p for p in (work / "blocks").glob("*.pkl")) if (work / "blocks").is_dir() else []


def _cut_cranfield(root: Path, documents: int | None) -> Path:
    """The first ``documents`` of Cranfield (all: None) under ``root``, all but the first WHOLE cut to WORDS words."""
    source = collection("cranfield")
    coll = root / f"cranfield-{documents or 'all'}"
    coll.mkdir()
    with open(source / "corpus.jsonl", encoding="utf-8") as f:
        docs = [json.loads(line) for _, line in zip(range(documents or 1 << 30), f)]
    for doc in docs[WHOLE:]:
        doc["text"] = " ".join(doc["text"].split()[:WORDS])
    (coll / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    for name in ("queries.tsv", "qrels.txt"):
        shutil.copy(source / name, coll / name)
    return coll


@pytest.fixture(scope="module")
def subset(tmp_path_factory) -> Path:
    return _cut_cranfield(tmp_path_factory.mktemp("distributed"), DOCUMENTS)


@pytest.fixture(scope="module")
def single(subset, tmp_path_factory) -> Path:
    from weir.indexer.build import build_index
    from weir.indexer.dense import DenseConfig

    out = tmp_path_factory.mktemp("single") / "index"
    build_index(subset, out, components=tuple(COMPONENTS.split(",")), skip_empty=True,
                dense=DenseConfig(chunk_size=BLOCK))
    return out


def assert_same_index(single: Path, distributed: Path, coll: Path) -> None:
    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.core.trec import read_topics

    a, b = Index(single), Index(distributed)
    queries = read_topics(coll / "queries.tsv")
    assert a.manifest["counts"] == b.manifest["counts"]
    assert b.manifest["counts"]["documents"] == DOCUMENTS
    built = [c for c in COMPONENTS.split(",") if c in b.manifest["components"]]
    for name in [c for c in built if c != "attention"]:
        ra, rb = registry.build(name, a)(queries, k=100), registry.build(name, b)(queries, k=100)
        for q in queries:
            assert [(h.doc_id, h.score) for h in ra[q.id]] == [(h.doc_id, h.score) for h in rb[q.id]], (name, q.id)
    if "dense" in built:
        va = np.load(a.component_path("dense") / "vectors.npy")
        vb = np.load(b.component_path("dense") / "vectors.npy")
        assert np.array_equal(va, vb)
    for kind in ("deepct", "deepimpact"):
        assert a.manifest["components"][kind]["postings"] == b.manifest["components"][kind]["postings"]
    if "attention" in built:  # the passage states of the same pass: to 1e-6 (the same bits where the backend is)
        ids = list(a.passage_states.docids)
        assert list(b.passage_states.docids) == ids
        for x, y in zip(a.passage_states.get(ids), b.passage_states.get(ids)):
            np.testing.assert_allclose(x, y, atol=1e-6)


def _kill_a_worker(work: Path, proc: subprocess.Popen) -> None:
    """Once the first block file is written, SIGKILL a worker other than the one that wrote it (the one still
    busy)."""
    first = _wait_for(lambda: _block_files(work), proc, "first block file")[0]
    with open(first, "rb") as f:
        writer = pickle.load(f)["worker"].rsplit(":", 1)[1]
    others = [p.name for p in (work / "workers").iterdir() if p.name != writer]
    victim = int(others[0]) if others else int(writer)
    os.kill(victim, signal.SIGKILL)


def test_a_build_killed_midway_resumes_from_its_block_files(subset, single, tmp_path):
    out, work, log = tmp_path / "index", tmp_path / "work", tmp_path / "build.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(_build(subset, out, work, LEXICAL), cwd=ROOT, stdout=stderr, stderr=stderr,
                                start_new_session=True)
        _wait_for(lambda: _block_files(work), proc, "first block file")
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its Ray child and the workers, at once
        proc.wait(timeout=60)
    finished = len(_block_files(work))
    assert finished == 1
    _kill_leftover_ray(work)
    with open(log, "ab") as stderr:
        rerun = subprocess.run(_build(subset, out, work, LEXICAL), cwd=ROOT, stdout=stderr, stderr=stderr,
                               timeout=TIMEOUT, check=False)
    assert rerun.returncode == 0, log.read_text(errors="replace")[-3000:]
    distributed = json.loads((out / "manifest.json").read_text())["distributed"]
    assert distributed["blocks_reused"] == finished
    assert distributed["blocks_computed"] == 2 - finished
    assert_same_index(single, out, subset)


def _kill_leftover_ray(work: Path) -> None:
    """Ray's own processes outlive a SIGKILL of the session that started them (they are daemons of their own
    session): stop the workers this build registered."""
    for p in (work / "workers").iterdir() if (work / "workers").is_dir() else []:
        try:
            os.kill(int(p.name), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_quality_scoring_on_the_workers_prunes_as_one_process(tmp_path):
    """The first phase of a pruned distributed build: learned quality scores computed block by block on 2 workers."""
    from weir.indexer.build import build_index
    from weir.indexer.index_dir import Index
    from weir.indexer.quality.prune import PruneSpec
    from weir.ranker import registry
    from weir.core.trec import read_topics

    coll = _cut_cranfield(tmp_path, None)
    single = tmp_path / "single"
    build_index(coll, single, skip_empty=True, prune=PruneSpec("learned", fraction=0.25))
    out, work, log = tmp_path / "index", tmp_path / "work", tmp_path / "build.log"
    command = in_loopback_namespace(
        [sys.executable, "-m", "weir.cli", "index", "build", "--collection", str(coll), "--out", str(out),
         "--with", "bm25", "--skip-empty", "--prune", "learned:0.25", "--ray", "--ray-workers", "2",
         "--ray-cpus-per-worker", "1", "--ray-work-dir", str(work), "--keep-blocks", "--overwrite"])[0]
    for cache in ("first", "second"):  # a cache of its own: the scores are computed (then read from the block files)
        env = {**os.environ, "WEIR_CACHE": str(tmp_path / cache)}
        with open(log, "ab") as stderr:
            done = subprocess.run(command, cwd=ROOT, stdout=stderr, stderr=stderr, env=env, timeout=TIMEOUT,
                                  check=False)
        assert done.returncode == 0, log.read_text(errors="replace")[-3000:]
        scoring = json.loads((out / "manifest.json").read_text())["pruning"]["scoring"]
        assert scoring["where"] == "ray workers" and not scoring["cached"]
        ran = scoring["distributed"]
        assert (ran["blocks"], ran["block_size"]) == (2, 1024)
        assert ran["blocks_computed" if cache == "first" else "blocks_reused"] == 2
        if cache == "first":
            # a block of this reader takes a fraction of a second: one worker may take both before the other starts
            assert 1 <= len(ran["workers_seen"]) <= 2 and ran["steps"]["quality"]["documents"] == 1398
        # the same scores but for the last bits (workers of one thread, the single process two: 3 of 1,398 scores
        # 2.4e-7 apart on this machine), and the same documents pruned
        assert np.allclose(np.load(single / "quality" / "scores.npy"), np.load(out / "quality" / "scores.npy"),
                           rtol=0, atol=1e-6)
        assert (single / "quality" / "pruned.txt").read_text() == (out / "quality" / "pruned.txt").read_text()
    a, b = Index(single), Index(out)
    assert a.manifest["counts"] == b.manifest["counts"] and b.manifest["counts"]["pruned"] == 350
    queries = read_topics(coll / "queries.tsv")
    ra, rb = registry.build("bm25", a)(queries, k=100), registry.build("bm25", b)(queries, k=100)
    for q in queries:
        assert [(h.doc_id, h.score) for h in ra[q.id]] == [(h.doc_id, h.score) for h in rb[q.id]], q.id


def test_a_shard_set_built_on_ray_with_a_worker_killed_holds_the_single_index(subset, single, tmp_path):
    """``--shard-set 2 --ray``, one worker killed mid-build: the workers weigh and encode the 300 documents once (2
    blocks; the killed worker's block is retried on a restarted actor), and each shard takes its documents' rows. The
    shards' merged hits (BM25 and DeepCT with the set's statistics, DeepImpact as it is) are the single index's for
    every query, ids and scores, on the single index's impact scale, and their dense vectors are its rows, the same
    bits."""
    from weir.indexer.index_dir import Index
    from weir.indexer.shards import global_statistics, read_shard_set
    from weir.ranker.retrievers.bm25 import BM25
    from weir.ranker.retrievers.learned_sparse import DeepCTRetriever, ImpactRetriever
    from weir.core.trec import read_topics

    out, work, log = tmp_path / "set", tmp_path / "work", tmp_path / "build.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(_build(subset, out, work, COMPONENTS, ("--shard-set", "2")), cwd=ROOT,
                                stdout=stderr, stderr=stderr)
        _kill_a_worker(work, proc)
        assert proc.wait(timeout=TIMEOUT) == 0, log.read_text(errors="replace")[-3000:]
    # the killed actor was restarted: a third worker process registered itself
    assert len(list((work / "workers").iterdir())) >= 3
    parts = [out / f"shard-{i}-of-2" for i in range(2)]
    manifests = read_shard_set(parts)
    whole = Index(single)
    scale = whole.manifest["components"]["deepimpact"]["parameters"]["quantization"]["scale"]
    for m in manifests:
        assert m["distributed"]["blocks"] == 2 and m["distributed"]["blocks_computed"] == 2
        assert m["shard"]["learned_weights"] == "collection"
        assert m["components"]["deepimpact"]["parameters"]["quantization"]["scale"] == scale
    assert sum(m["counts"]["documents"] for m in manifests) == DOCUMENTS
    shards = [Index(p) for p in parts]
    stages = {
        "bm25": (BM25(whole), [BM25(s, statistics=t) for s, t in zip(shards, global_statistics(parts))]),
        "deepct": (DeepCTRetriever(whole), [DeepCTRetriever(s, statistics=t)
                                            for s, t in zip(shards, global_statistics(parts, "deepct"))]),
        "deepimpact": (ImpactRetriever(whole), [ImpactRetriever(s) for s in shards]),
    }
    texts = [q.text for q in read_topics(subset / "queries.tsv")]
    for name, (reference, sharded) in stages.items():
        expected = reference.search(texts, 100)
        found = [s.search(texts, 100) for s in sharded]
        for row, text in enumerate(texts):
            merged = sorted((h for f in found for h in f[row]), key=lambda h: (-h[1], h[0]))[:100]
            assert merged == expected[row], (name, text)
    vectors = np.load(single / "dense" / "vectors.npy")
    row_of = {d: i for i, d in enumerate((single / "dense" / "docids.txt").read_text().split())}
    for p in parts:
        ids = (p / "dense" / "docids.txt").read_text().split()
        assert np.array_equal(np.load(p / "dense" / "vectors.npy"), vectors[[row_of[d] for d in ids]])
    # the passage states: each shard's own pass (the passage alone decides them), in batches of its own documents, so
    # equal to the single index's to the int8 rounding of a state where a last bit of the forward differs
    from weir.indexer.passage_states import ShardStates

    ids = list(whole.passage_states.docids)
    shard_states = ShardStates([Index(p).passage_states for p in parts])
    assert len(shard_states) == len(ids)
    for x, y in zip(whole.passage_states.get(ids), shard_states.get(ids)):
        np.testing.assert_allclose(x, y, atol=5e-3)


# the phases a Ray build runs in its driver once every block file is written, as its progress names them
DRIVER_PHASES = ("bm25 index", "postings bm25", "dense index")


@pytest.mark.skipif(os.environ.get("WEIR_KILL_EVERY_PHASE") != "1",
                    reason="three more Ray builds (about 3 min): WEIR_KILL_EVERY_PHASE=1 runs them once; make test "
                    "keeps the kill after the first block file")
def test_a_ray_build_killed_at_each_driver_phase_leaves_the_old_index_and_resumes_from_every_block(subset, single,
                                                                                                   tmp_path):
    """`weir index build --ray --overwrite` over an index it built, SIGKILLed as a whole once the driver reports each
    phase after the blocks (Lucene, the postings export, the dense index): the old index is untouched and verifies
    each time; the next uninterrupted run reuses every block file and gives the single-process index."""
    from weir.indexer.index_dir import verify

    out, work, log = tmp_path / "index", tmp_path / "work", tmp_path / "build.log"
    first = subprocess.run(_build(subset, out, work), cwd=ROOT, capture_output=True, timeout=TIMEOUT, check=False)
    assert first.returncode == 0, first.stderr[-3000:]
    manifest = (out / "manifest.json").read_bytes()
    for phase in DRIVER_PHASES:
        with open(log, "wb") as stderr:
            proc = subprocess.Popen(_build(subset, out, work, extra=("--overwrite",)), cwd=ROOT, stdout=stderr,
                                    stderr=stderr, start_new_session=True)
            _wait_for(lambda: phase in log.read_text(errors="replace"), proc, f"the {phase} phase")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        _kill_leftover_ray(work)
        assert (out / "manifest.json").read_bytes() == manifest, phase  # the old index, untouched
        verify(out)  # every checksum
        assert len(_block_files(work)) == 2, phase  # every block was written before the driver's phases
    with open(log, "wb") as stderr:
        rerun = subprocess.run(_build(subset, out, work, extra=("--overwrite",)), cwd=ROOT, stdout=stderr,
                               stderr=stderr, timeout=TIMEOUT, check=False)
    assert rerun.returncode == 0, log.read_text(errors="replace")[-3000:]
    distributed = json.loads((out / "manifest.json").read_text())["distributed"]
    assert (distributed["blocks_reused"], distributed["blocks_computed"]) == (2, 0)
    assert_same_index(single, out, subset)
