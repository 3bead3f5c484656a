"""The dense component (flat, HNSW, IVF-PQ) on ADI, and the published all-MiniLM-L6-v2 figure on SciFact reproduced
(it encodes the 5,183 SciFact passages once, a few minutes on two CPU cores)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import collection
from weir.core.types import InputError, Query

pytestmark = pytest.mark.data  # every test here reads ../shared/collections


def test_dense_component_on_adi(tmp_path):
    """Every index type builds from a streamed corpus, with a docid map, float16 vectors and recorded parameters."""
    from weir.indexer.build import build_index
    from weir.indexer.dense import DenseConfig
    from weir.indexer.index_dir import Index, verify
    from weir.ranker.retrievers.dense import DenseRetriever

    adi = collection("adi")
    exact = None
    for kind, extra in (("flat", {}), ("hnsw", {"hnsw_m": 8, "ef_search": 64}), ("ivfpq", {"nbits": 4, "pq_m": 48})):
        out = tmp_path / kind
        manifest = build_index(adi, out, components=("dense",), dense=DenseConfig(index=kind, chunk_size=16, **extra))
        entry = manifest["components"]["dense"]
        assert entry["type"] == f"faiss-{kind}" and entry["documents"] == manifest["counts"]["documents"] == 82
        assert entry["encoder"]["pooling"] == "mean" and entry["encoder"]["passage_max_length"] == 256
        verify(out)
        vectors = np.load(out / "dense" / "vectors.npy")
        assert vectors.shape == (82, 384) and vectors.dtype == np.float16
        docids = (out / "dense" / "docids.txt").read_text().split()
        assert len(docids) == 82 and docids[0] == json.loads(open(adi / "corpus.jsonl").readline())["id"]
        if kind == "hnsw":
            assert entry["parameters"]["M"] == 8 and entry["parameters"]["efSearch"] == 64
        if kind == "ivfpq":
            assert entry["parameters"]["nlist"] == 2 and entry["parameters"]["nbits"] == 4
        run = DenseRetriever(Index(out), ef_search=32, nprobe=2)([Query("q", "computer information retrieval")], k=5)
        assert [h.rank for h in run["q"]] == [1, 2, 3, 4, 5]
        assert run["q"][0].stage_scores["dense"] == run["q"][0].score
        if kind == "flat":
            exact = [h.doc_id for h in run["q"]]
            # the stored float16 vectors give (nearly) the same scores as the exact index
            q = DenseRetriever(Index(out)).encode([Query("q", "computer information retrieval")])[0]
            row = docids.index(exact[0])
            assert float(vectors[row].astype(np.float32) @ q) == pytest.approx(run["q"][0].score, abs=2e-3)
        elif kind == "hnsw":
            assert [h.doc_id for h in run["q"]] == exact  # 82 points: HNSW finds the exact neighbours
    with pytest.raises(InputError, match="nbits"):
        build_index(adi, tmp_path / "bad", components=("dense",), dense=DenseConfig(index="ivfpq"))
    assert not (tmp_path / "bad").exists()


@pytest.mark.data
@pytest.mark.reproduce  # the whole of SciFact encoded in fp32; `make test` builds ADI's dense component instead
def test_dense_and_hybrid_reproduce_on_scifact(index_factory):
    """Dense, in fp32 (``onnx``) as published: all-MiniLM-L6-v2's nDCG@10 on SciFact (0.6451 +- 0.005); hybrid (BM25 +
    dense, default fusion, untuned): above BM25 (0.6789) on nDCG@10 and R@100 (0.9253)."""
    import faiss

    from weir.indexer.dense import index_from_vectors, open_dense
    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.evaluation.measures import evaluate
    from weir.core.trec import read_qrels, read_topics

    root = collection("beir-scifact")
    index = Index(index_factory("beir-scifact", "bm25,dense", dense={"backend": "onnx"}))
    assert index.manifest["components"]["dense"]["encoder"]["backend"] == "onnx"
    topics, qrels = read_topics(root / "queries.tsv"), read_qrels(root / "qrels.txt")
    dense = registry.build("dense", index)
    dense_run = dense(topics, k=1000)
    scores = evaluate(dense_run, qrels, ["nDCG@10", "R@100"])
    print(f"\ndense SciFact: nDCG@10 {scores['nDCG@10']:.4f} R@100 {scores['R@100']:.4f}")
    assert scores["nDCG@10"] == pytest.approx(0.6451, abs=0.005)

    # default hybrid (no tuning file in this index), stage runs of depth 1000 each
    hybrid = evaluate(registry.build("hybrid", index)(topics, k=1000), qrels, ["nDCG@10", "R@100"])
    print(f"hybrid SciFact (default fusion): nDCG@10 {hybrid['nDCG@10']:.4f} R@100 {hybrid['R@100']:.4f}")
    assert hybrid["nDCG@10"] > 0.6789 and hybrid["R@100"] > 0.9253

    # HNSW against exact search over the same stored embeddings: recall@10 of the exact top 10
    stored = open_dense(index)
    queries = dense.stages[0].encode(topics)
    _, exact = index_from_vectors(stored.vectors, "flat", {}).search(queries, 10)  # same float16-stored vectors
    hnsw = index_from_vectors(stored.vectors, "hnsw", {"M": 32, "efConstruction": 200, "efSearch": 128})
    _, approx = hnsw.search(queries, 10)
    recall = np.mean([len(set(e) & set(a)) / 10 for e, a in zip(exact.tolist(), approx.tolist())])
    print(f"HNSW (M=32, efC=200, efS=128) recall@10 vs exact on SciFact: {recall:.4f}")
    assert isinstance(hnsw, faiss.IndexHNSWFlat)
    assert recall > 0.95


@pytest.fixture(scope="module")
def adi_flat(tmp_path_factory):
    """A flat dense index of ADI, whose vectors the IVF builds below reuse (--dense-vectors-from)."""
    from weir.indexer.build import build_index
    from weir.indexer.dense import DenseConfig

    out = tmp_path_factory.mktemp("adi-flat") / "flat"
    build_index(collection("adi"), out, components=("dense",), dense=DenseConfig(chunk_size=16))
    return out


def test_an_on_disk_ivf_index_searches_as_the_one_in_memory(adi_flat, tmp_path):
    """IVF-Flat with its lists in index.ivfdata (built in parts, merged, memory-mapped at search, found beside
    index.faiss after the build's directory is renamed into place) gives the in-memory index's hits, ids and scores,
    for every ADI query, also to 8 concurrent callers."""
    from concurrent.futures import ThreadPoolExecutor

    from weir.indexer.build import build_index
    from weir.indexer.dense import DenseConfig, index_parameters, open_dense, write_on_disk_index
    from weir.indexer.index_dir import Index, verify
    from weir.ranker.retrievers.dense import DenseRetriever
    from weir.core.trec import read_topics

    adi = collection("adi")
    indexes = {}
    for on_disk in (False, True):
        out = tmp_path / f"ivf-{'disk' if on_disk else 'memory'}"
        manifest = build_index(adi, out, components=("dense",),
                               dense=DenseConfig(index="ivfflat", nlist=2, nprobe=1, on_disk=on_disk,
                                                 vectors_from=str(adi_flat)))
        verify(out)
        assert (out / "dense" / "index.ivfdata").is_file() == on_disk
        assert manifest["components"]["dense"]["parameters"]["on_disk"] == on_disk
        indexes[on_disk] = Index(out)
    # more parts than one: 82 vectors in parts of 20, merged into the lists of the in-memory index
    dense = open_dense(indexes[True])
    parts = write_on_disk_index(np.load(adi_flat / "dense" / "vectors.npy"), "ivfflat",
                                index_parameters(DenseConfig(index="ivfflat", nlist=2, nprobe=1), 82, 384),
                                tmp_path / "parts", part_rows=20)
    assert parts == 5
    queries = read_topics(adi / "queries.tsv")
    memory = DenseRetriever(indexes[False])(queries, k=10)
    assert sum(len(h) for h in memory.values()) == 10 * len(queries)
    disk = DenseRetriever(indexes[True])
    for q in queries:
        assert [(h.doc_id, h.score) for h in disk([q], k=10)[q.id]] == [(h.doc_id, h.score) for h in memory[q.id]]
    import faiss

    merged = faiss.read_index(str(tmp_path / "parts" / "index.faiss"), faiss.IO_FLAG_ONDISK_SAME_DIR)
    vectors = DenseRetriever(indexes[True]).encode(queries)
    assert np.array_equal(merged.search(vectors, 10)[1], dense.search(vectors, 10)[1])

    def ask(q):
        return q.id, [(h.doc_id, h.score) for h in disk([q], k=10)[q.id]]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, queries * 4))
    assert all(hits == [(h.doc_id, h.score) for h in memory[qid]] for qid, hits in answers)


@pytest.mark.parametrize("settings", [{"index": "ivfflat", "on_disk": True},
                                      {"index": "ivfpq", "nbits": 4, "pq_m": 48, "rerank": 50}],
                         ids=["ivfflat-on-disk", "ivfpq-rescored"])
def test_ivf_shards_merge_into_the_flat_index_top_k(adi_flat, tmp_path, settings):
    """Two IVF shards of ADI (``--shard I/2``, every list probed): an on-disk IVF-Flat shard scores the vectors it
    finds exactly, an IVF-PQ shard (its own codebooks) re-scores its candidates exactly from its stored vectors, so
    the shards' merged top 10 (by score, then id, as the sharded front merges) is the flat whole index's for every
    query, as the sharded server serves such shards, and 8 concurrent callers get the sequential answers. (Scores to
    1e-4: an IVF index is filled from, and a re-scored one reads, the float16 vectors stored in vectors.npy; the flat
    index holds the float32 ones.)"""
    from concurrent.futures import ThreadPoolExecutor

    from weir.indexer.build import build_index
    from weir.indexer.dense import DenseConfig
    from weir.indexer.index_dir import Index
    from weir.indexer.shards import ShardSpec
    from weir.ranker.retrievers.dense import DenseRetriever
    from weir.core.trec import read_topics

    adi = collection("adi")
    shards = []
    for i in range(2):
        out = tmp_path / f"shard-{i}"
        build_index(adi, out, components=("dense",), shard=ShardSpec(i, 2),
                    dense=DenseConfig(nlist=2, nprobe=2, vectors_from=str(adi_flat), **settings))
        shards.append(DenseRetriever(Index(out)))
    queries = read_topics(adi / "queries.tsv")
    whole = DenseRetriever(Index(adi_flat))(queries, k=10)

    def merged(q):
        found = [s([q], k=10)[q.id] for s in shards]
        return sorted(((h.doc_id, h.score) for f in found for h in f), key=lambda h: (-h[1], h[0]))[:10]

    sequential = {q.id: merged(q) for q in queries}
    for q in queries:
        assert [d for d, _ in sequential[q.id]] == [h.doc_id for h in whole[q.id]], q.id
        assert [s for _, s in sequential[q.id]] == pytest.approx([h.score for h in whole[q.id]], abs=1e-4)
    with ThreadPoolExecutor(8) as pool:  # the memory-mapped lists of both shards searched by 8 threads at once
        answers = list(pool.map(lambda q: (q.id, merged(q)), queries * 4))
    assert all(hits == sequential[qid] for qid, hits in answers)


def test_auto_is_flat_for_a_small_collection_and_rescored_ivfpq_above_its_limit(adi_flat, tmp_path, monkeypatch,
                                                                                  caplog):
    """``auto`` (the default) builds a flat index up to :data:`AUTO_FLAT_MAX` passages and IVF-PQ above it (here a
    limit of 40 for ADI's 82), which re-scores its top candidates exactly from the stored vectors: every score is the
    cosine with the stored float16 vector (the codes' own scores are not), and with every list probed the hits are
    the flat index's. A flat index past half the machine's memory is built with a warning that says what to use."""
    import logging

    from weir.indexer import dense as dense_module
    from weir.indexer import dense_build
    from weir.indexer.build import build_index
    from weir.indexer.dense import DenseConfig, open_dense
    from weir.indexer.index_dir import Index, verify
    from weir.ranker.retrievers.dense import DenseRetriever
    from weir.core.trec import read_topics

    adi = collection("adi")
    flat = Index(adi_flat).manifest["components"]["dense"]
    assert flat["index"] == "flat" and flat["type"] == "faiss-flat"  # the fixture's default: auto
    monkeypatch.setattr(dense_module, "AUTO_FLAT_MAX", 40)
    monkeypatch.setattr(dense_build, "_physical_memory", lambda: 60 * 384 * 4)  # half of it: 30 vectors
    out = tmp_path / "auto"
    entry = build_index(adi, out, components=("dense",),
                        dense=DenseConfig(chunk_size=16, nbits=4, pq_m=48, nprobe=2, nlist=2,
                                          vectors_from=str(adi_flat)))["components"]["dense"]
    verify(out)
    assert entry["index"] == "ivfpq" and entry["type"] == "faiss-ivfpq"
    assert entry["parameters"]["rerank"] == 1000 and entry["parameters"]["train_vectors"] == 82
    with caplog.at_level(logging.WARNING):
        build_index(adi, tmp_path / "big-flat", components=("dense",),
                    dense=DenseConfig(index="flat", chunk_size=16, vectors_from=str(adi_flat)))
    assert "half of this machine's memory" in caplog.text and "--dense-index auto or ivfpq" in caplog.text

    queries = read_topics(adi / "queries.tsv")
    rescored, exact = DenseRetriever(Index(out)), DenseRetriever(Index(adi_flat))
    stored = open_dense(Index(out))
    vectors = rescored.encode(queries)
    codes_scores, codes_rows = stored.faiss.search(vectors, 10)  # what the codes alone would say
    scores, rows = stored.search(vectors, 10)
    expected = np.einsum("qd,qkd->qk", vectors, stored.vectors[rows].astype(np.float32))
    assert np.allclose(scores, expected, atol=1e-6)
    assert not np.allclose(codes_scores, np.einsum("qd,qkd->qk", vectors, stored.vectors[codes_rows].astype(np.float32)),
                           atol=1e-3)
    got, want = rescored(queries, k=10), exact(queries, k=10)
    for q in queries:
        assert [h.doc_id for h in got[q.id]] == [h.doc_id for h in want[q.id]], q.id
        assert [h.score for h in got[q.id]] == pytest.approx([h.score for h in want[q.id]], abs=1e-3)
