"""Fusion on arrays gives what the per-document fusion (rrf, linear) gives, bit for bit, ties included; a fusion whose
weight is all on one stage serves it alone, with the same ranking and scores."""

from __future__ import annotations

import numpy as np
import pytest

from weir.core.hits import DocIds, Ranked
from weir.core.types import Hit, Query, Run
from weir.ranker.retrievers.hybrid import HybridRetriever, fuse, linear, rrf
from weir.ranker.stage import Retriever

IDS = [f"d{i}" for i in range(300)]


def stage_ranking(rng, table: DocIds, name: str, n: int) -> Ranked:
    """A stage's ranking as its engine gives it: scores with many ties, best first, ties by docid."""
    docs = rng.choice(len(table), size=n, replace=False)
    scores = (rng.integers(1, 40, size=n) / 4).astype(np.float32)
    order = np.lexsort((table.rank[docs], -scores))
    return Ranked.of_stage(table, docs[order], scores[order], name)


def reference(rankings, method, weights, depth, name="hybrid"):
    """The per-document fusion: rrf / linear over {docid: score}, sorted by (-score, docid), stage scores merged."""
    lists = [dict(zip(r.doc_ids(), r.scores.tolist())) for r in rankings]
    fused = rrf([list(s) for s in lists], weights) if method == "rrf" else linear(lists, weights, method)
    stage_scores: dict[str, dict] = {}
    for r in rankings:
        for h in Run({"q": r})["q"]:
            stage_scores.setdefault(h.doc_id, {}).update(h.stage_scores)
    hits = sorted(((d, s) for d, s in fused.items()), key=lambda p: (-p[1], p[0]))[:depth]
    return [(d, s, {**stage_scores[d], name: s}) for d, s in hits]


@pytest.mark.parametrize("method", ["rrf", "minmax", "zscore"])
@pytest.mark.parametrize("weights", [None, [0.3, 0.7], [1.0, 0.0], [0.0, 2.0]])
def test_array_fusion_is_the_per_document_fusion(method, weights):
    rng = np.random.default_rng(3)
    shuffled = list(IDS)
    rng.shuffle(shuffled)
    tables = [DocIds(IDS), DocIds(shuffled)]  # two stages numbering the documents differently
    for trial in range(20):
        rankings = [stage_ranking(rng, tables[0], "a", int(rng.integers(0, 120))),
                    stage_ranking(rng, tables[trial % 2], "b", int(rng.integers(1, 120)))]
        out = Run({"q": fuse(rankings, method=method, weights=weights, depth=100)})["q"]
        assert [(h.doc_id, h.score, h.stage_scores) for h in out] == reference(rankings, method, weights, 100)
        assert [h.rank for h in out] == list(range(1, len(out) + 1))


def test_fusion_of_hit_runs_numbers_their_documents_per_query():
    a = Run({"q": [Hit("x", 3.0, 1, {"a": 3.0}), Hit("y", 1.0, 2, {"a": 1.0})]})
    b = Run({"q": [Hit("z", 5.0, 1, {"b": 5.0}), Hit("x", 4.0, 2, {"b": 4.0})]})
    out = Run({"q": fuse([a.ranking("q"), b.ranking("q")], method="minmax")})["q"]
    assert [(h.doc_id, h.score, h.stage_scores) for h in out] == \
        reference([a.ranking("q"), b.ranking("q")], "minmax", None, None)


class Stage(Retriever):
    def __init__(self, name, table, seed, n):
        self.name, self.table, self.seed, self.n, self.asked = name, table, seed, n, []

    def retrieve(self, queries, k):
        self.asked.append([q.id for q in queries])
        out = Run()
        for q in queries:
            rng = np.random.default_rng([self.seed, int(q.id)])
            out[q.id] = stage_ranking(rng, self.table, self.name, min(k, self.n[int(q.id)]))
        return out


@pytest.mark.parametrize("method", ["rrf", "minmax", "zscore"])
def test_a_weight_of_zero_leaves_its_stage_unsearched_where_it_cannot_change_the_top_k(method):
    table = DocIds(IDS)
    sizes = [120, 30, 200, 61, 150]  # query 1 and 3: fewer than k documents of the weighted stage above its floor
    queries = [Query(str(i), "x") for i in range(len(sizes))]
    a, b = Stage("a", table, 1, sizes), Stage("b", table, 2, [100] * len(sizes))
    alone = HybridRetriever([a, b], method=method, weights=[1.0, 0.0], depth=150)(queries, k=60)
    assert b.asked and "0" not in b.asked[0] and "1" in b.asked[0]
    fused = HybridRetriever([Stage("a", table, 1, sizes), Stage("b", table, 2, [100] * len(sizes))], method=method,
                            weights=[1.0, 0.0], depth=150)
    fused.alone = lambda: None  # fuse both stages for every query, as before
    both = fused(queries, k=60)
    for q in queries:
        assert [(h.doc_id, h.score, h.rank) for h in alone[q.id]] == [(h.doc_id, h.score, h.rank) for h in both[q.id]]
        assert all("b" not in h.stage_scores for h in alone[q.id])
