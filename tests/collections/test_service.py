"""The gRPC service answers a real client and the health check; bad requests get INVALID_ARGUMENT."""

from __future__ import annotations

import grpc
import pytest

from service.client import SearchClient
from service.server import start
from tests.conftest import collection  # noqa: F401  (the index fixture needs the shared data)

pytestmark = pytest.mark.data  # every test here reads ../shared/collections


@pytest.fixture(scope="module")
def client(index_factory):
    server, port, _ = start(str(index_factory("adi")), host="127.0.0.1", port=0, workers=4)
    with SearchClient(f"127.0.0.1:{port}", timeout=30) as c:
        c.wait_ready(timeout=30)
        yield c
    server.stop(grace=None)


def test_health_is_serving(client):
    assert client.health() == "SERVING"
    assert client.health("weir.v1.SearchService") == "SERVING"


def test_search_returns_ranked_hits_with_text_and_timings(client):
    response = client.search("computer information retrieval", k=5, include_text=True)
    assert response.pipeline == "bm25"
    assert [h.rank for h in response.hits] == [1, 2, 3, 4, 5]
    assert all(a.score >= b.score for a, b in zip(response.hits, response.hits[1:]))
    assert all(h.title or h.text for h in response.hits)
    assert response.hits[0].stage_scores["bm25"] == pytest.approx(response.hits[0].score)
    assert [t.stage for t in response.timings] == ["bm25"] and response.timings[0].milliseconds > 0


def test_attention_reranking_over_grpc(client):
    """bm25>>attention with the shipped model: depth (reranked) is separate from k (returned); the reranked hits are
    BM25's top `depth`, each with both stage scores, ordered by the attention score; both stages are timed."""
    bm25 = client.search("computer information retrieval", k=8)
    response = client.search("computer information retrieval", k=3, pipeline="bm25>>attention", depth=8)
    assert [h.rank for h in response.hits] == [1, 2, 3]
    assert {h.doc_id for h in response.hits} <= {h.doc_id for h in bm25.hits}
    scores = [h.stage_scores["attention"] for h in response.hits]
    assert scores == sorted(scores, reverse=True) and all("bm25" in h.stage_scores for h in response.hits)
    assert [t.stage for t in response.timings] == ["bm25", "attention"]


def test_default_k_is_ten_and_info_describes_the_index(client):
    assert len(client.search("retrieval", k=None).hits) == 10
    info = client.info()
    assert info.collection == "adi" and info.documents == 82 and "bm25" in info.first_stages


@pytest.mark.parametrize("kwargs, message", [
    ({"query": "   "}, "query is empty"),
    ({"query": "retrieval", "k": 0}, "k must be between 1 and 1000"),
    ({"query": "retrieval", "k": -3}, "k must be between 1 and 1000"),
    ({"query": "retrieval", "k": 10**6}, "k must be between 1 and 1000"),
    ({"query": "retrieval", "pipeline": "nonsense"}, "unknown first stage 'nonsense'"),
    ({"query": "retrieval", "pipeline": "bm25>>"}, "empty stage"),
    ({"query": "retrieval", "depth": -1}, "depth must be between"),
])
def test_bad_requests_get_invalid_argument(client, kwargs, message):
    with pytest.raises(grpc.RpcError) as info:
        client.search(**kwargs)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in info.value.details()
    assert client.health() == "SERVING"  # the server goes on
