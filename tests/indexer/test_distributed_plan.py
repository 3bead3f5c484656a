"""The block plan of a distributed build (no Ray needed): blocks keep the single-process batches, each block reads
back exactly its documents from its byte offset, and bad block sizes are refused."""

from __future__ import annotations

import json

import pytest

from weir.indexer.collections import Corpus
from weir.indexer.dense import DenseConfig
from weir.indexer.distributed import block_size, plan_blocks
from weir.core.types import InputError


def _corpus(tmp_path, n: int) -> Corpus:
    lines = []
    for i in range(n):
        text = "" if i % 7 == 3 else f"passage {i} about caf\u00e9 number {i}"  # empty ones, and non-ASCII bytes
        lines.append(json.dumps({"_id": f"d{i}", "title": "", "text": text}, ensure_ascii=False))
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    return Corpus(path, skip_empty=True)


def test_block_sizes_are_multiples_of_every_steps_batch():
    assert block_size(None, None, True) == 1024
    assert block_size(None, DenseConfig(chunk_size=1000), False) == 2000  # the smallest multiple >= 1024
    assert block_size(None, DenseConfig(chunk_size=384), True) == 1536  # lcm(256, 384) = 768, twice for >= 1024
    assert block_size(512, DenseConfig(chunk_size=256), True) == 512
    with pytest.raises(InputError, match="multiple of 256"):
        block_size(300, None, True)
    with pytest.raises(InputError, match="multiple of 1024"):
        block_size(512, DenseConfig(), True)
    # the quality phase: a multiple of the estimator's chunk (the learned one sorts its batches within 1024)
    assert block_size(None, None, False, 1024) == 1024
    assert block_size(300, None, False, 1) == 300
    with pytest.raises(InputError, match="multiple of 1024"):
        block_size(256, None, False, 1024)


def test_blocks_read_back_the_documents_of_the_stream(tmp_path):
    corpus = _corpus(tmp_path, 700)
    expected = [d.id for d in corpus]
    keep = set(expected[::2])
    for kept in (None, keep):
        blocks, _ = plan_blocks(corpus, 256, kept, statistics=False)
        read = [d.id for b in blocks for d in corpus.read_block(b.offset, b.lineno, b.count, kept)]
        assert read == [d for d in expected if kept is None or d in kept]
        assert all(b.count == 256 for b in blocks[:-1]) and 0 < blocks[-1].count <= 256


def test_the_plan_gathers_the_whole_collections_statistics(tmp_path):
    from weir.indexer.weighting.model import TermStatistics

    corpus = _corpus(tmp_path, 300)
    docs = list(corpus)
    _, stats = plan_blocks(corpus, 256, None, statistics=True)
    whole = TermStatistics(d.contents for d in docs)
    block = TermStatistics([d.contents for d in docs[256:]], collection=stats)
    assert (stats.n_docs, dict(stats.df)) == (whole.n_docs, dict(whole.df))
    assert block.avgdl == whole.avgdl
    terms = ["passag", "caf\u00e9", "280"]
    assert block.bm25(0, terms).tolist() == whole.bm25(256, terms).tolist()


def test_a_block_that_no_longer_matches_the_corpus_is_an_error(tmp_path):
    corpus = _corpus(tmp_path, 300)
    blocks, _ = plan_blocks(corpus, 256, None, statistics=False)
    last = blocks[-1]
    with pytest.raises(InputError, match="the corpus changed"):
        corpus.read_block(last.offset, last.lineno, last.count + 5)


def test_a_work_directory_that_is_not_a_builds_is_never_emptied(tmp_path):
    from weir.indexer.distributed import RayOptions, compute_blocks
    from weir.indexer.inputs import BuildInputs

    corpus = _corpus(tmp_path, 20)
    work = tmp_path / "mine"
    work.mkdir()
    (work / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="not the work directory of a build"):
        compute_blocks(corpus, BuildInputs(components=("deepct",)), None, tmp_path / "index",
                       RayOptions(work_dir=str(work)))
    assert (work / "notes.txt").read_text() == "keep me"


def test_the_phases_keep_their_own_plans_and_block_files(tmp_path):
    """A pruned build's two phases share one work directory: each phase's plan decides only its own block files."""
    from weir.indexer.distributed import ENCODING, QUALITY, open_work, write_block

    work = tmp_path / "work"
    quality = {"blocks": 2, "estimator": "learned"}
    assert open_work(work, QUALITY, quality) == set()
    write_block(work, 0, {"docids": []}, QUALITY.blocks)
    encoding = {"blocks": 1, "kept_sha256": "a"}
    assert open_work(work, ENCODING, encoding) == set()  # the quality plan makes it a build's work directory
    write_block(work, 0, {"docids": []}, ENCODING.blocks)
    assert open_work(work, QUALITY, quality) == {0} and open_work(work, ENCODING, encoding) == {0}
    assert open_work(work, ENCODING, {**encoding, "kept_sha256": "b"}) == set()  # other documents kept
    assert open_work(work, QUALITY, quality) == {0}


def test_an_estimator_that_compares_documents_is_not_scored_in_blocks(tmp_path):
    from weir.indexer.distributed import RayOptions, score_quality
    from weir.indexer.quality import open_estimator
    from weir.indexer.quality.gbdt import SurfaceModelQuality
    from weir.indexer.quality.learned import LearnedQuality
    from weir.indexer.quality.prune import PruneSpec

    assert LearnedQuality.per_document and SurfaceModelQuality.per_document  # (the classes: no model loaded)
    with pytest.raises(InputError, match="compares documents with each other"):
        score_quality(_corpus(tmp_path, 20), open_estimator("duplicates"), PruneSpec("duplicates", 0.1),
                      tmp_path / "index", RayOptions())


def test_the_workers_block_statistics_sum_to_the_whole_collections(tmp_path):
    """What the workers count block by block (``statistics/``), summed, is what one pass over the collection counts:
    the BM25 priors of every block are the single-process build's."""
    from weir.indexer.distributed import StatisticsWorker, collection_statistics

    corpus = _corpus(tmp_path, 700)
    keep = {d.id for d in corpus if not d.id.endswith("5")}
    for kept in (None, keep):
        blocks, whole = plan_blocks(corpus, 256, kept, statistics=True)
        work = tmp_path / f"work-{kept is None}"
        worker = StatisticsWorker(corpus=str(corpus.path), skip_empty=True, keep=kept, work_dir=str(work))
        rows = worker({"index": [b.index for b in blocks], "offset": [b.offset for b in blocks],
                       "lineno": [b.lineno for b in blocks], "count": [b.count for b in blocks]})
        assert sum(rows["documents"]) == sum(b.count for b in blocks)
        summed = collection_statistics(work, blocks)
        assert (summed.n_docs, summed.total_terms, dict(summed.df)) == (whole.n_docs, whole.total_terms,
                                                                        dict(whole.df))


def test_a_shard_hands_the_workers_only_its_documents(tmp_path, monkeypatch):
    """``--shard I/N --ray``: the Ray part is given the shard's documents only, those whose ordinal in the corpus
    stream (after --skip-empty) is I modulo N (the Ray part itself is tested in tests/collections/)."""
    from weir.indexer import distributed
    from weir.indexer.build import build_index
    from weir.indexer.shards import ShardSpec

    corpus = _corpus(tmp_path, 30)
    handed = {}

    class Stop(Exception):
        pass

    def compute_blocks(corpus, inputs, todo, out, ray, **kw):
        handed.update(todo=todo, components=inputs.components)
        raise Stop

    monkeypatch.setattr(distributed, "compute_blocks", compute_blocks)
    with pytest.raises(Stop):
        build_index(corpus.path, tmp_path / "out", components=("bm25", "deepct"), skip_empty=True,
                    shard=ShardSpec(1, 3), ray=distributed.RayOptions())
    streamed = [d.id for d in Corpus(corpus.path, skip_empty=True)]
    assert len(streamed) == 26 and handed["components"] == ("bm25", "deepct")  # 4 of the 30 are empty
    assert handed["todo"] == {d for i, d in enumerate(streamed) if i % 3 == 1}
    assert not (tmp_path / "out").exists()


def test_the_block_files_live_beside_the_index_and_an_earlier_work_directory_starts_afresh(tmp_path):
    """The work directory is ``OUT.blocks`` (``--ray-work-dir`` else); one left by a weir that named the per-block
    files shards (plan version 1, ``shards/``) is a build's work directory, but none of its work is reused."""
    from weir.indexer.distributed import ENCODING, RayOptions, open_work, work_directory, write_block
    from weir.indexer.distributed.plan import PLAN_VERSION

    assert work_directory(tmp_path / "idx", RayOptions()) == tmp_path / "idx.blocks"
    assert work_directory(tmp_path / "idx", RayOptions(work_dir=str(tmp_path / "w"))) == tmp_path / "w"
    work = tmp_path / "old"
    work.mkdir()
    (work / "plan.json").write_text(json.dumps({"version": 1, "blocks": 1}))
    write_block(work, 0, {"docids": []}, "shards")
    write_block(work, 0, {"docids": []}, ENCODING.blocks)
    assert open_work(work, ENCODING, {"version": PLAN_VERSION, "blocks": 1}) == set()


def test_the_dense_vectors_of_the_block_files_follow_the_corpus(tmp_path):
    """The builders read the workers' vectors chunk by chunk, whatever the chunks and blocks; a shard's reader passes
    over the other shards' rows; documents the block files do not hold are an error."""
    import numpy as np

    from weir.core.types import Document
    from weir.indexer.distributed import Block, BlockVectors, write_block

    ids = [f"d{i}" for i in range(7)]
    vectors = np.arange(14, dtype=np.float16).reshape(7, 2)
    blocks = [Block(0, 0, 1, 3), Block(1, 0, 4, 3), Block(2, 0, 7, 1)]
    for b, start in zip(blocks, (0, 3, 6)):
        write_block(tmp_path, b.index, {"docids": ids[start:start + b.count], "dense": vectors[start:start + b.count]})
    docs = [Document(i, "", "text") for i in ids]
    whole = BlockVectors(tmp_path, blocks)
    read = np.concatenate([whole(docs[:2]), whole(docs[2:6]), whole(docs[6:])])
    assert read.dtype == np.float32 and np.array_equal(read, vectors.astype(np.float32))
    shard = whole.for_a_shard()
    assert np.array_equal(shard(docs[1::3]), vectors[1::3].astype(np.float32))
    with pytest.raises(InputError, match="no vector for document 'd9'"):
        BlockVectors(tmp_path, blocks).for_a_shard()([Document("d9", "", "x")])
    with pytest.raises(InputError, match="do not follow the corpus"):
        BlockVectors(tmp_path, blocks)(docs[1:3])


def test_keep_shards_is_a_deprecated_spelling_of_keep_blocks(capsys):
    from weir.cli import parser

    base = ["index", "build", "--collection", "c", "--out", "o", "--ray"]
    assert parser().parse_args(base + ["--keep-blocks"]).keep_blocks is True
    assert "deprecated" not in capsys.readouterr().err
    args = parser().parse_args(base + ["--keep-shards"])
    assert args.keep_blocks is True
    err = capsys.readouterr().err
    assert "weir: warning: --keep-shards is deprecated" in err and "use --keep-blocks" in err
    assert parser().parse_args(base).keep_blocks is False


def test_the_work_directory_is_removed_once_the_index_is_in_place_unless_kept(tmp_path):
    from weir.indexer.distributed import ENCODING, RayOptions, finish, open_work, work_directory

    out = tmp_path / "idx"
    work = work_directory(out, RayOptions())
    open_work(work, ENCODING, {"blocks": 0})
    finish(out, RayOptions(keep_blocks=True))
    assert (work / "plan.json").is_file()
    finish(out, RayOptions())
    assert not work.exists()
