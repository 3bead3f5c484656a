"""The in-process sparse engine on a tiny index: Lucene's answers, its tie-break, blocks, bad weights, candidates."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from weir.ranker.retrievers import inverted
from weir.ranker.retrievers.bm25 import BM25
from weir.ranker.retrievers.inverted import BM25Scores, ImpactScores, InvertedIndex
from weir.ranker.retrievers.lucene import LuceneBM25Searcher
from weir.core.types import Query

QUERIES = ["apple banana", "banana banana bread", "cherry", "recipe for apple pie", "nothing matches this"]


def test_bm25_answers_as_lucene_does(tiny_index):
    bm25 = BM25(tiny_index)
    reference = LuceneBM25Searcher(tiny_index.component_path("bm25"))
    assert bm25.search(QUERIES, 10) == reference.search_many(QUERIES, 10)
    run = bm25.retrieve([Query("q", "banana")], 10)
    assert [h.rank for h in run["q"]] == [1, 2] and run["q"][0].stage_scores == {"bm25": run["q"][0].score}


def test_scores_precomputed_in_blocks_equal_one_block(tiny_index, monkeypatch):
    postings = tiny_index.postings("bm25")
    whole = BM25Scores(postings, 0.9, 0.4).unit
    monkeypatch.setattr(inverted, "BLOCK", 3)
    assert np.array_equal(BM25Scores(postings, 0.9, 0.4).unit, whole)


def test_hits_are_ranked_by_score_then_collection_id(tiny_index):
    engine = InvertedIndex(ImpactScores(tiny_index.postings("bm25")))  # score = term frequency
    hits = engine.search({"appl": 1, "banana": 1, "bread": 1}, 10)
    assert len({s for _, s in hits}) < len(hits)  # a tie: d1 (2 + 2) and d3 (1 + 1 + 2)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    for (a, sa), (b, sb) in itertools.pairwise(hits):
        assert sa > sb or a < b
    query = {"appl": 1, "banana": 1, "bread": 1}
    assert engine.search(query, 1) == hits[:1] and engine.search(query, 0) == []


def test_weights_must_be_positive_and_unknown_terms_are_ignored(tiny_index):
    engine = InvertedIndex(BM25Scores(tiny_index.postings("bm25"), 0.9, 0.4))
    with pytest.raises(ValueError, match="must be positive"):
        engine.search({"appl": 0}, 10)
    with pytest.raises(ValueError, match="must be positive"):
        engine.search({"appl": -1.0}, 10)
    assert engine.search({"zzzunknown": 1}, 10) == []
    assert engine.search({"appl": 1, "zzzunknown": 1}, 10) == engine.search({"appl": 1}, 10)


def test_candidate_scores_for_the_ltr_features(tiny_index):
    engine = InvertedIndex(BM25Scores(tiny_index.postings("bm25"), 0.9, 0.4))
    hits = dict(engine.search({"banana": 1}, 10))
    scores = engine.score({"banana": 1}, ["d1", "d2", "d3", "no-such-doc"])
    assert scores == [hits["d1"], 0.0, hits["d3"], 0.0]
    assert engine.score({"zzzunknown": 1}, ["d1"]) == [0.0]


def _random_postings(n_docs: int, n_terms: int, seed: int):
    """Postings with Zipf-like document frequencies, random frequencies 1..5 (impacts that tie often) and norms."""
    from weir.indexer.postings import Postings

    rng = np.random.default_rng(seed)
    dfs = np.minimum((n_docs * 0.3 / np.arange(1, n_terms + 1) ** 1.1).astype(np.int64) + 1, n_docs)
    docs = np.concatenate([np.sort(rng.choice(n_docs, df, replace=False)) for df in dfs]).astype(np.int32)
    offsets = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(dfs, out=offsets[1:])
    freqs = rng.integers(1, 6, len(docs)).astype(np.uint8)
    norms = rng.integers(1, 60, n_docs).astype(np.uint8)
    docids = [str(i) for i in rng.permutation(n_docs)]  # string order differs from doc number order
    return Postings("contents", [f"t{i:05d}" for i in range(n_terms)], offsets, docs, freqs, norms, n_docs, n_docs,
                    int(freqs.sum()), docids)


@pytest.mark.parametrize("scores", ["bm25", "impact"])
def test_pruned_search_equals_the_exhaustive_one(scores):
    """Block-max MaxScore skips postings, never a hit: every rank and score bit of the exhaustive scorer, at k from 1
    to 1000, with repeated query terms (weights other than 1) and many ties (impacts 1..5); half the queries of
    frequent terms, whose floors (the k-th largest block maxima) start the search above nothing."""
    postings = _random_postings(60_000, 3000, seed=1)
    engine = InvertedIndex(BM25Scores(postings, 0.9, 0.4) if scores == "bm25" else ImpactScores(postings))
    rng = np.random.default_rng(2)
    different = []
    for query in range(120):
        terms = rng.choice(3000 if query % 2 else 60, rng.integers(1, 8), replace=False)
        weights = {f"t{t:05d}": 1 if rng.random() < 0.8 else int(rng.integers(2, 4)) for t in terms}
        for k in (1, 10, 100, 1000):
            pruned, exhaustive = engine.top(weights, k, exhaustive=False), engine.top(weights, k, exhaustive=True)
            if not (np.array_equal(pruned[0], exhaustive[0]) and np.array_equal(pruned[1], exhaustive[1])):
                different.append((weights, k))
    assert not different, f"{len(different)} answers differ, first: {different[0]}"


@pytest.mark.parametrize("scores", ["bm25", "impact"])
def test_a_terms_floor_is_at_most_the_k_th_score_of_its_query(scores):
    """The floor the pruned search starts from: the L-th largest block maximum of a term is at most the L-th largest
    score of its postings, so at most the k-th score of any query holding the term, for each k up to L."""
    from weir.ranker.retrievers.maxscore import FLOOR_LEVELS, _score

    postings = _random_postings(60_000, 3000, seed=1)
    similarity = BM25Scores(postings, 0.9, 0.4) if scores == "bm25" else ImpactScores(postings)
    engine, blocks = InvertedIndex(similarity), similarity.blocks
    floored = 0
    for t in range(40):
        for level in FLOOR_LEVELS:
            key = blocks.floor_keys(np.array([t]), level)[0]
            if key == 0:
                continue
            floored += 1
            weight = similarity.weight(t, 1.0)
            _, exhaustive = engine.top({f"t{t:05d}": 1.0}, level, exhaustive=True)
            assert _score(similarity.kind, weight, key) <= exhaustive[level - 1]
    assert floored >= 40  # every one of these terms has a floor at k=10, some at 100 and 1000


def test_candidate_scores_are_the_searched_scores():
    """The LTR features' candidate scores, looked up in each term's postings, are the scores a search gives them."""
    postings = _random_postings(20_000, 500, seed=3)
    engine = InvertedIndex(BM25Scores(postings, 0.9, 0.4))
    weights = {"t00003": 1, "t00040": 2, "t00200": 1}
    docs, scores = engine.top(weights, 300)
    ids = engine.docids_of(docs)
    unmatched = next(d for d in postings.docids if d not in set(ids) and d not in
                     set(engine.docids_of(engine.top(weights, 20_000)[0])))
    assert engine.score(weights, ids + [unmatched, "no-such-doc"]) == scores.tolist() + [0.0, 0.0]
