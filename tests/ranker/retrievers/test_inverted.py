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
