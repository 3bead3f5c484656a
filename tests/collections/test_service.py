"""The gRPC service over ADI on loopback, as callers use it: answers with text and timings, reranking with its own
depth, and under concurrency exactly the answers of sequential calls (8 callers, 2,000 calls per workload, 400 for
the attention reranker alone and with the LTR model stacked on it, whose calls took 13 times as long as BM25's in
the suite, and 400 for an LTR model of several members; 0 errors; also over an index built with a DeepImpact head of
several members, and over SciFact, whose frequent terms start the pruned search at a floor), a pipeline built once
however many callers ask for it first."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from weir.service.client import SearchClient
from weir.service.config import ServiceConfig
from weir.service.server import BackgroundServer
from tests.conftest import collection
from weir.core.trec import read_topics

pytestmark = pytest.mark.data  # every test here reads ../shared/collections

CALLERS, CALLS = 8, 2000
RERANKED_CALLS = {"bm25>>attention": 400,  # 12 rounds of ADI's 35 queries, each reranking 10 passages
                  "bm25>>attention>>ltr": 400, "hybrid>>ltr[members]": 400, "dense>>ltr + hybrid>>ltr": 400}


@pytest.fixture(scope="module")
def server(index_factory):
    config = ServiceConfig.load(index=str(index_factory("adi", "bm25,dense")), port=0, verify_checksums=False)
    with BackgroundServer(config) as s:
        yield s


@pytest.fixture()
def client(server):
    with SearchClient(f"127.0.0.1:{server.port}", timeout=60) as c:
        yield c


def test_search_returns_ranked_hits_with_text_and_timings(client):
    assert client.health() == "SERVING"
    response = client.search("computer information retrieval", k=5, include_text=True)
    assert response.pipeline == "bm25" and [h.rank for h in response.hits] == [1, 2, 3, 4, 5]
    assert all(a.score >= b.score for a, b in zip(response.hits, response.hits[1:]))
    assert all(h.title or h.text for h in response.hits)
    assert response.hits[0].stage_scores["bm25"] == pytest.approx(response.hits[0].score)
    assert [t.stage for t in response.timings] == ["bm25"] and response.timings[0].milliseconds > 0
    info = client.info()
    assert info.collection == "adi" and info.documents == 82 and "hybrid>>attention" in info.pipelines


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


def _answer(response) -> list[tuple]:
    return [(h.doc_id, h.rank, h.score, dict(h.stage_scores), h.title, h.text) for h in response.hits]


@pytest.mark.parametrize("pipeline, k, depth, include_text", [
    ("bm25>>ltr", 10, 20, False),
    ("hybrid>>ltr", 10, 20, False),
    ("bm25>>attention", 10, 10, False),
    ("bm25", 10, 0, True),
])
def test_concurrent_callers_get_the_answers_of_sequential_calls(server, pipeline, k, depth, include_text):
    _concurrent_answers_are_sequential_answers(server, pipeline, k, depth, include_text)


def test_concurrent_callers_of_two_pipelines_sharing_a_reranker_get_sequential_answers(server):
    """``dense>>ltr`` and ``hybrid>>ltr`` run one LTR reranker (a server loads one per model): 8 callers taking the
    two in turn, so that batches of both run the shared reranker at once on the server's two workers, get exactly
    the answers of sequential calls."""
    cache = server.server.service.cache
    assert cache.get("dense>>ltr").stages[-1] is cache.get("hybrid>>ltr").stages[-1]
    _concurrent_answers_are_sequential_answers(server, ("dense>>ltr", "hybrid>>ltr"), 10, 20, False,
                                               calls=RERANKED_CALLS["dense>>ltr + hybrid>>ltr"])


@pytest.fixture(scope="module")
def stored_states_server(index_factory):
    config = ServiceConfig.load(index=str(index_factory("adi", "bm25,dense,attention")), port=0,
                                verify_checksums=False, pipelines=["bm25", "bm25>>attention"])
    with BackgroundServer(config) as s:
        yield s


def test_concurrent_callers_of_attention_over_stored_states_get_sequential_answers(stored_states_server):
    """``bm25>>attention`` over an index with the attention component: the reranker reads the passages' states from
    the memory-mapped component, and under 8 callers (micro-batched) every answer is the sequential one."""
    reranker = stored_states_server.server.service.cache.get("bm25>>attention").stages[-1]
    assert reranker.states_computed_because is None  # the index's states, not computed per query
    _concurrent_answers_are_sequential_answers(stored_states_server, "bm25>>attention", 10, 10, False)


@pytest.fixture(scope="module")
def learned_server(index_factory):
    config = ServiceConfig.load(index=str(index_factory("adi", "bm25,deepct,deepimpact")), port=0,
                                verify_checksums=False)
    with BackgroundServer(config) as s:
        yield s


@pytest.mark.parametrize("pipeline, k", [("deepct", 10), ("deepimpact", 10), ("deepimpact+bm25", 10), ("bm25", 82)])
def test_concurrent_callers_of_the_learned_sparse_stages_get_sequential_answers(learned_server, pipeline, k):
    """The in-process sparse engine (and the memoized term analysis of the learned stages) under 8 callers."""
    _concurrent_answers_are_sequential_answers(learned_server, pipeline, k, 0, False)


@pytest.fixture(scope="module")
def attention_ltr_server(index_factory):
    from weir.core.runtime import MODELS

    config = ServiceConfig.load(index=str(index_factory("adi", "bm25,dense")), port=0, verify_checksums=False,
                                pipelines=["bm25", "bm25>>attention>>ltr"],
                                options={"ltr_model": str(MODELS / "ltr-attention")})
    with BackgroundServer(config) as s:
        yield s


def test_concurrent_callers_of_ltr_over_attention_get_sequential_answers(attention_ltr_server):
    """``bm25>>attention>>ltr`` with the shipped ``models/ltr-attention``, which boosts from the attention stage's
    score of each candidate: under 8 callers (micro-batched), every answer is the sequential one."""
    _concurrent_answers_are_sequential_answers(attention_ltr_server, "bm25>>attention>>ltr", 10, 10, False)


@pytest.fixture(scope="module")
def members_ltr_server(index_factory, tmp_path_factory):
    """A server whose ``ltr`` is a model of 3 members (`weir train ltr --members 3`), trained here on ADI."""
    from weir.ranker.rerankers.ltr import LTRModel
    from weir.training.common import TrainingSet
    from weir.training.ltr import TrainConfig, train

    index = index_factory("adi", "bm25,dense")
    out = tmp_path_factory.mktemp("ltr-members") / "ltr"
    adi = collection("adi")
    train(TrainConfig(sets=[TrainingSet(index=str(index), topics=str(adi / "queries.tsv"), qrels=str(adi / "qrels.txt"),
                                        depth=20)],
                      out=str(out), rounds=60, members=3, rounds_rule="best", init_from="first_score_norm",
                      params={"num_leaves": 7, "min_data_in_leaf": 50}), log=lambda m: None)
    assert len(LTRModel.load(out).boosters) == 3
    config = ServiceConfig.load(index=str(index), port=0, verify_checksums=False, pipelines=["bm25", "hybrid>>ltr"],
                                options={"ltr_model": str(out)})
    with BackgroundServer(config) as s:
        yield s


def test_concurrent_callers_of_a_model_of_several_members_get_sequential_answers(members_ltr_server):
    """``hybrid>>ltr`` with a model of 3 members, whose scores are the mean of 3 boosters: under 8 callers
    (micro-batched), every answer is the sequential one."""
    _concurrent_answers_are_sequential_answers(members_ltr_server, "hybrid>>ltr", 10, 20, False,
                                               calls=RERANKED_CALLS["hybrid>>ltr[members]"])


@pytest.fixture(scope="module")
def members_impact_server(tmp_path_factory):
    """A server over ADI indexed with a DeepImpact head of 2 members shrunk by their disagreement (`weir train
    deepimpact --members 2 --shrink`, trained here on ADI for 2 epochs): its ``deepimpact+bm25`` takes its weights from
    that head's card."""
    from weir.indexer.build import build_index
    from weir.training.term_weighting import TrainConfig, train

    root = tmp_path_factory.mktemp("deepimpact-members")
    adi = collection("adi")
    judged = f"{adi}:{adi / 'queries.tsv'}:{adi / 'qrels.txt'}"
    card = train(TrainConfig(kind="deepimpact", out=str(root / "head"), train=[judged], epochs=2, members=2,
                             shrink=True), log=lambda m: None)
    assert card["members"] == 2 and card["shrink"]["tau2"] >= 0
    build_index(adi, root / "index", components=("bm25", "deepimpact"),
                learned={"deepimpact_model": str(root / "head")})
    manifest = json.loads((root / "index" / "manifest.json").read_text())
    assert manifest["components"]["deepimpact"]["model"]["members"] == 2
    assert manifest["components"]["deepimpact"]["model"]["shrink"] == card["shrink"]["tau2"]
    config = ServiceConfig.load(index=str(root / "index"), port=0, verify_checksums=False,
                                pipelines=["bm25", "deepimpact", "deepimpact+bm25"])
    with BackgroundServer(config) as s:
        yield s


@pytest.mark.parametrize("pipeline", ["deepimpact", "deepimpact+bm25"])
def test_concurrent_callers_of_an_index_of_a_head_of_several_members_get_sequential_answers(members_impact_server,
                                                                                            pipeline):
    """An index whose impacts come from a head of several members is served like any impact index: under 8 callers
    (micro-batched), every answer is the sequential one."""
    _concurrent_answers_are_sequential_answers(members_impact_server, pipeline, 10, 0, False)


@pytest.fixture(scope="module")
def scifact_server(index_factory):
    config = ServiceConfig.load(index=str(index_factory("beir-scifact")), port=0, verify_checksums=False,
                                pipelines=["bm25"])
    with BackgroundServer(config) as s:
        yield s


@pytest.mark.parametrize("k", [10, 100])
def test_concurrent_callers_of_the_pruned_search_started_at_a_floor_get_sequential_answers(index_factory,
                                                                                          scifact_server, k):
    """The pruned kernel starts a query's k-th score at the floor its terms guarantee, which only a term of 10 blocks
    or more has (none of ADI's 82 documents' terms): over SciFact over a third of the queries start at one (117 of 300
    at k=100, whose floor needs 100 blocks), and 8 callers get the sequential answers."""
    import numpy as np

    from weir.indexer.index_dir import Index
    from weir.ranker.retrievers.bm25 import BM25

    bm25 = BM25(Index(index_factory("beir-scifact")))
    engine = bm25.engine
    texts = [q.text for q in read_topics(collection("beir-scifact") / "queries.tsv")]
    floored = sum(bool(np.any(engine.scores.blocks.floor_keys(engine.postings.terms.find(list(w)), k) > 0))
                  for w in bm25.weights(texts))
    assert floored > len(texts) // 3
    _concurrent_answers_are_sequential_answers(scifact_server, "bm25", k, 0, False, calls=1200, topics="beir-scifact")


def _concurrent_answers_are_sequential_answers(server, pipeline, k, depth, include_text, calls=None, topics="adi"):
    """``pipeline``: one name, or several that the calls take in turn (call i the i-th modulo their number);
    ``topics``: the collection whose queries are asked."""
    pipelines = (pipeline,) if isinstance(pipeline, str) else tuple(pipeline)
    topics = [q.text for q in read_topics(collection(topics) / "queries.tsv")]
    target = f"127.0.0.1:{server.port}"
    with SearchClient(target, timeout=120) as c:
        sequential = {(p, q): _answer(c.search(q, k=k, pipeline=p, depth=depth, include_text=include_text))
                      for p in pipelines for q in topics}
    assert all(sequential.values())

    calls = calls or RERANKED_CALLS.get(pipeline, CALLS)

    def caller(n: int) -> tuple[int, int, int]:
        mismatches = errors = batched = 0
        with SearchClient(target, timeout=120) as c:
            for i in range(n, calls, CALLERS):
                q, p = topics[i % len(topics)], pipelines[i % len(pipelines)]
                try:
                    response = c.search(q, k=k, pipeline=p, depth=depth, include_text=include_text)
                except Exception:  # noqa: BLE001 (counted: the test asserts there are none)
                    errors += 1
                    continue
                mismatches += _answer(response) != sequential[p, q]
                batched += response.batch_size > 1
        return mismatches, errors, batched

    with ThreadPoolExecutor(CALLERS) as pool:
        results = list(pool.map(caller, range(CALLERS)))
    mismatches, errors, batched = (sum(r[i] for r in results) for i in range(3))
    print(f"\n{' + '.join(pipelines)}: {calls} calls by {CALLERS} callers, {errors} errors, {mismatches} answers unlike the "
          f"sequential ones, {batched} answered from batches of several queries")
    assert errors == 0 and mismatches == 0
    assert batched > 0  # concurrent calls were micro-batched


def test_simultaneous_first_use_builds_a_pipeline_once(index_factory, monkeypatch):
    from weir.ranker import registry

    builds: list[str] = []
    build = registry.build

    def counted(spec, *args, **kwargs):
        builds.append(spec)
        return build(spec, *args, **kwargs)

    monkeypatch.setattr(registry, "build", counted)
    config = ServiceConfig.load(index=str(index_factory("adi", "bm25,dense")), port=0, verify_checksums=False)
    with BackgroundServer(config) as s:
        start = threading.Barrier(CALLERS)

        def first_call(_):
            with SearchClient(f"127.0.0.1:{s.port}", timeout=120) as c:
                start.wait()
                return c.search("information retrieval", k=5, pipeline="bm25>>ltr", depth=10)

        with ThreadPoolExecutor(CALLERS) as pool:
            answers = list(pool.map(first_call, range(CALLERS)))
    assert builds.count("bm25>>ltr") == 1 and all(_answer(a) == _answer(answers[0]) for a in answers)


FOREIGN_CLIENT = """
import sys
import grpc
from v1 import search_pb2, search_pb2_grpc  # generated from the proto alone, in another directory

channel = grpc.insecure_channel(sys.argv[1])
stub = search_pb2_grpc.SearchServiceStub(channel)
answer = stub.Search(search_pb2.SearchRequest(query="computer information retrieval", k=5, pipeline="hybrid>>ltr"),
                     timeout=120)
assert not any(m == "weir" or m.startswith(("weir.", "service", "ranker", "indexer")) for m in sys.modules)
print(answer.pipeline, [h.doc_id for h in answer.hits], [t.stage for t in answer.timings])
"""


def test_a_client_built_from_the_proto_alone_gets_a_reranked_answer(server, tmp_path):
    """What a user in another code base does: generate stubs from proto/weir/v1/search.proto (grpcio-tools, a
    package of its own) and call Search with a reranking pipeline; no weir module is importable there."""
    import subprocess
    import sys

    from grpc_tools import protoc

    from weir.service.stubs import PROTO

    out = tmp_path / "foreign"
    (out / "v1").mkdir(parents=True)
    proto = out / "v1" / "search.proto"
    proto.write_text(PROTO.read_text())
    assert protoc.main(["protoc", f"-I{out}", f"--python_out={out}", f"--grpc_python_out={out}", str(proto)]) == 0
    (out / "client.py").write_text(FOREIGN_CLIENT)
    (out / "v1" / "__init__.py").write_text("")
    result = subprocess.run([sys.executable, str(out / "client.py"), f"127.0.0.1:{server.port}"], cwd=out,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    pipeline, rest = result.stdout.split(" ", 1)
    assert pipeline == "hybrid>>ltr" and "'ltr'" in rest and rest.count("'") >= 10  # five hits, two stages


@pytest.fixture(scope="module")
def pruned_server(index_factory):
    from weir.indexer.quality.prune import PruneSpec

    path = index_factory("adi", "bm25,dense", prune=PruneSpec("learned", 0.25))
    config = ServiceConfig.load(index=str(path), port=0, verify_checksums=False)
    with BackgroundServer(config) as s:
        yield s, path


def test_a_pruned_index_is_served_as_pruned_and_never_answers_with_a_pruned_document(pruned_server):
    from weir.indexer.quality.prune import read_pruned

    server, path = pruned_server
    gone = set(read_pruned(path / "quality"))
    with SearchClient(f"127.0.0.1:{server.port}", timeout=120) as c:
        info = c.info()
        assert info.documents == 82 - len(gone) and info.pruning.documents_pruned == len(gone) == 21  # floor(0.25 * 82 + 1/2)
        assert info.pruning.estimator == "learned" and info.pruning.fraction == 0.25
        assert info.pruning.documents_scored == 82 and len(info.pruning.estimator_sha256) == 64
        for q in read_topics(collection("adi") / "queries.tsv"):
            for pipeline in ("bm25", "hybrid>>ltr"):
                assert not {h.doc_id for h in c.search(q.text, k=82, pipeline=pipeline).hits} & gone


def test_concurrent_callers_of_a_pruned_index_get_the_answers_of_sequential_calls(pruned_server):
    _concurrent_answers_are_sequential_answers(pruned_server[0], "hybrid>>ltr", 10, 20, True)
