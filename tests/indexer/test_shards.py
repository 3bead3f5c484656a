"""Shard indexes on a hand-made corpus: the ordinal-mod-N rule, the manifest's record, the checks of a shard set,
and BM25 with the shard set's statistics scoring every document exactly as one index over the whole corpus."""

from __future__ import annotations

import json

import pytest

from weir.indexer.build import build_index
from weir.indexer.index_dir import Index
from weir.indexer.shards import ShardSpec, global_statistics, read_shard_set
from weir.ranker.retrievers.bm25 import BM25
from weir.core.types import InputError

WORDS = ("protein fold cell mouse vitamin bone density cancer stem gene expression tumour growth signal "
         "pathway receptor immune response blood pressure").split()
QUERIES = ["protein fold", "cancer stem cell", "vitamin bone density", "immune response blood", "gene",
           "tumour growth signal pathway receptor", "mouse mouse protein", "unknownword"]


def _docs(n: int = 23) -> list[dict]:
    # documents of different lengths and term mixes (deterministic), so that df, avgdl and norms all matter
    docs = []
    for i in range(n):
        words = [WORDS[(i * 7 + j * (i % 5 + 1)) % len(WORDS)] for j in range(3 + (i * 5) % 17)]
        docs.append({"id": f"d{i:02d}", "title": WORDS[i % len(WORDS)], "text": " ".join(words)})
    return docs


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    coll = root / "coll"
    coll.mkdir()
    (coll / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in _docs()), encoding="utf-8")
    whole = root / "whole"
    build_index(coll, whole)
    parts = [root / f"shard-{i}" for i in range(3)]
    for i, p in enumerate(parts):
        build_index(coll, p, shard=ShardSpec(i, 3))
    return coll, whole, parts


def test_shard_spec_parses_and_assigns_by_ordinal():
    assert ShardSpec.parse("1/3") == ShardSpec(1, 3)
    assert [i for i in range(10) if ShardSpec(1, 3).takes(i)] == [1, 4, 7]
    for bad in ("3/3", "-1/2", "1", "a/b", "1/0", ""):
        with pytest.raises(InputError):
            ShardSpec.parse(bad)


def test_shards_hold_the_documents_of_their_ordinals_and_record_the_shard(shards):
    _, whole, parts = shards
    ids = [d["id"] for d in _docs()]
    for i, p in enumerate(parts):
        index = Index(p)
        assert index.manifest["shard"] == {"index": i, "count": 3, "rule": "document ordinal mod count",
                                           "collection_documents": len(ids)}
        assert index.num_docs == len(ids[i::3])
        assert sorted(index.postings("bm25").docids) == ids[i::3]
    assert Index(whole).num_docs == len(ids) and "shard" not in Index(whole).manifest


def test_bm25_with_the_shard_sets_statistics_scores_as_the_whole_index(shards):
    """Every document's score and the merged top k (by score, then id) equal the whole index's, bit for bit; each
    shard's own statistics would not."""
    _, whole, parts = shards
    reference = BM25(Index(whole))
    sharded = [BM25(Index(p), statistics=s) for p, s in zip(parts, global_statistics(parts))]
    local = [BM25(Index(p)) for p in parts]
    differs = False
    for query in QUERIES:
        expected = reference.search([query], 50)[0]
        merged = sorted((h for s in sharded for h in s.search([query], 50)[0]), key=lambda h: (-h[1], h[0]))
        assert merged == expected, query
        for k in (1, 3, 5):  # each shard's top k suffices for the global top k
            top = sorted((h for s in sharded for h in s.search([query], k)[0]), key=lambda h: (-h[1], h[0]))[:k]
            assert top == expected[:k], (query, k)
        own = sorted((h for s in local for h in s.search([query], 50)[0]), key=lambda h: (-h[1], h[0]))
        differs |= own != expected
    assert differs  # the test corpus is one where per-shard statistics change scores


def test_a_shard_set_must_be_complete_and_of_one_build(shards, tmp_path):
    coll, whole, parts = shards
    assert [m["shard"]["index"] for m in read_shard_set([parts[2], parts[0], parts[1]])] == [0, 1, 2]
    with pytest.raises(InputError, match="missing"):
        read_shard_set(parts[:2])
    with pytest.raises(InputError, match="both shard"):
        read_shard_set([parts[0], parts[0], parts[1]])
    with pytest.raises(InputError, match="not a shard index"):
        read_shard_set([whole, *parts])
    other = tmp_path / "two-0"
    build_index(coll, other, shard=ShardSpec(0, 2))
    with pytest.raises(InputError, match="different builds"):
        read_shard_set([*parts, other])


def test_deepct_with_the_shard_sets_statistics_scores_as_the_whole_index(learned_tiny, tmp_path):
    """DeepCT is BM25 over term frequencies a model gave each document on its own: with the shard set's statistics
    of the deepct component, two shards' merged hits are the whole index's."""
    from weir.ranker.retrievers.learned_sparse import DeepCTRetriever
    from tests.conftest import WEIGHTING_QUERIES

    coll, models, whole = learned_tiny
    parts = [tmp_path / f"shard-{i}" for i in range(2)]
    for i, p in enumerate(parts):
        build_index(coll, p, components=("bm25", "deepct"), learned={"deepct_model": str(models["deepct"])},
                    shard=ShardSpec(i, 2))
    reference = DeepCTRetriever(Index(whole))
    sharded = [DeepCTRetriever(Index(p), statistics=s) for p, s in zip(parts, global_statistics(parts, "deepct"))]
    found = 0
    for _, query in WEIGHTING_QUERIES + [("q4", "protein mice vitamin")]:
        expected = reference.search([query], 10)[0]
        merged = sorted((h for s in sharded for h in s.search([query], 10)[0]), key=lambda h: (-h[1], h[0]))
        assert merged == expected, query
        found += len(expected)
    assert found >= 4


def test_a_shard_set_holds_the_whole_index_impacts_and_shards_built_alone_do_not(learned_tiny, tmp_path):
    """``build_shard_set``: the learned weights are computed once over the whole collection, so each shard
    quantizes with the whole collection's largest impact and two shards' merged DeepImpact hits are the whole
    index's, ids and integer scores; shards built one by one (``--shard I/N``) each have their own scale, and
    :func:`incomparable_learned` says so (a DeepCT head without lexical features is comparable either way)."""
    from weir.indexer.shard_set import build_shard_set
    from weir.indexer.shards import incomparable_learned
    from weir.ranker.retrievers.learned_sparse import ImpactRetriever
    from weir.cli import main
    from tests.conftest import WEIGHTING_QUERIES

    coll, models, whole = learned_tiny
    learned = {f"{k}_model": str(v) for k, v in models.items()}
    components = ("bm25", "deepct", "deepimpact")
    manifests = build_shard_set(coll, tmp_path / "set", 2, components=components, learned=learned)
    parts = [tmp_path / "set" / f"shard-{i}-of-2" for i in range(2)]
    assert [m["shard"]["index"] for m in read_shard_set(parts)] == [0, 1]
    assert [m["counts"]["documents"] for m in manifests] == [2, 2]
    scale = Index(whole).manifest["components"]["deepimpact"]["parameters"]["quantization"]["scale"]
    for m in manifests:
        assert m["shard"]["learned_weights"] == "collection"
        assert m["components"]["deepimpact"]["parameters"]["quantization"]["scale"] == scale
        assert m["components"]["deepimpact"]["parameters"]["quantization"]["max_impact_of"] == "collection"
    assert incomparable_learned(manifests) == {}
    reference = ImpactRetriever(Index(whole))
    sharded = [ImpactRetriever(Index(p)) for p in parts]
    found = 0
    for _, query in WEIGHTING_QUERIES + [("q4", "protein mice vitamin bone")]:
        expected = reference.search([query], 10)[0]
        merged = sorted((h for s in sharded for h in s.search([query], 10)[0]), key=lambda h: (-h[1], h[0]))
        assert merged == expected, query
        found += len(expected)
    assert found >= 3  # not vacuous: under int8 weights (a CPU without bf16) the untrained head gives q1 no hit

    alone = [tmp_path / f"alone-{i}" for i in range(2)]
    for i, p in enumerate(alone):
        build_index(coll, p, components=components, learned=learned, shard=ShardSpec(i, 2))
    loose = read_shard_set(alone)
    assert [m["shard"]["learned_weights"] for m in loose] == ["shard", "shard"]
    reasons = incomparable_learned(loose)
    assert set(reasons) == {"deepimpact"} and "--shard-set" in reasons["deepimpact"]
    scales = {m["components"]["deepimpact"]["parameters"]["quantization"]["scale"] for m in loose}
    assert len(scales) == 2  # each shard's own largest impact
    tampered = json.loads(json.dumps(manifests))
    tampered[1]["components"]["deepimpact"]["parameters"]["quantization"]["scale"] *= 2
    assert "different scales" in incomparable_learned(tampered)["deepimpact"]
    featured = json.loads(json.dumps(loose))  # a DeepCT head reading idf: its weights depend on the shard too
    for m in featured:
        m["components"]["deepct"]["model"]["card"]["features"] = ["idf"]
    assert set(incomparable_learned(featured)) == {"deepct", "deepimpact"}

    out = tmp_path / "refused"
    assert main(["index", "build", "--collection", str(coll), "--out", str(out), "--shard-set", "2",
                 "--shard", "0/2"]) != 0
    assert main(["index", "build", "--collection", str(coll), "--out", str(out), "--shard-set", "0"]) != 0
    assert not out.exists()
