"""A calibrated pipeline end to end, on a copy of the service tests' small index calibrated by `weir tune calibration`
on made-up training judgments: its hits carry P(relevant) in the Python API, the command line and over gRPC (the
same values), `min_relevance` keeps the prefix at or above it (for concurrent callers in one micro-batch each their
own), an uncalibrated pipeline or a changed option is refused or served uncalibrated, never cut wrongly."""

from __future__ import annotations

import json
import shutil
import threading

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weir.cli import main
from weir.core.types import InputError, Query, Run
from weir.indexer.index_dir import Index
from weir.ranker import registry
from weir.service.client import SearchClient
from weir.service.config import ServiceConfig
from weir.service.server import BackgroundServer
from weir.service.stubs import search_pb2

JUDGED = {  # query -> documents of tests.ranker.test_stage_contract.TEXTS judged relevant
    "coffee liver disease": ["d0", "d6"], "caffeine sleep": ["d3"], "heart disease": ["d7", "d8"],
    "type 2 diabetes": ["d5"], "green tea": ["d1"], "espresso coffee beans": ["d9", "d2"],
    "chocolate caffeine": ["d11"], "exercise blood pressure": ["d8"], "rain in spain": ["d4"],
    "liver caffeine clearance": ["d6"], "coffee tea": ["d10"], "disease risk": ["d5", "d7"],
}
QUERIES = list(JUDGED)


@pytest.fixture(scope="module")
def calibrated(small_index, tmp_path_factory):
    root = tmp_path_factory.mktemp("calibrated")
    path = shutil.copytree(small_index, root / "index")
    (root / "topics.tsv").write_text("".join(f"t{i}\t{q}\n" for i, q in enumerate(QUERIES)))
    (root / "qrels.txt").write_text("".join(f"t{i} 0 {d} 1\n" for i, q in enumerate(QUERIES) for d in JUDGED[q]))
    assert main(["tune", "calibration", "--index", str(path), "--pipelines", "bm25", "--topics",
                 str(root / "topics.tsv"), "--qrels", str(root / "qrels.txt")]) == 0
    return Index(path)


def test_the_python_api_carries_relevance_and_cuts_a_prefix(calibrated):
    pipeline = registry.build("bm25", calibrated)
    assert pipeline.calibration is not None and pipeline.describe()["calibration"]["tuned_on"]["queries"] == 12
    queries = [Query(f"q{i}", q) for i, q in enumerate(QUERIES)]
    run = pipeline(queries, k=3)
    for q in queries:
        hits = run.ranking(q.id)
        assert len(hits) <= 3 and hits.relevance is not None and (np.diff(hits.relevance) <= 0).all()
        assert [h.relevance for h in run[q.id]] == hits.relevance.tolist()
    deeper = pipeline(queries, k=12)  # relevance does not depend on k
    assert all(np.array_equal(run.ranking(q.id).relevance, deeper.ranking(q.id).relevance[:len(run.ranking(q.id))])
               for q in queries)
    middle = float(np.median(np.concatenate([deeper.ranking(q.id).relevance for q in queries])))
    cut = pipeline(queries, k=12, min_relevance=middle)
    for q in queries:
        kept, all_hits = cut.ranking(q.id), deeper.ranking(q.id)
        assert kept.doc_ids() == all_hits.doc_ids()[:int((all_hits.relevance >= middle).sum())]
    assert 0 < cut.hits_count() < deeper.hits_count()
    with pytest.raises(InputError, match="not calibrated"):
        registry.build("dense", calibrated)(queries, k=3, min_relevance=0.5)
    with pytest.raises(InputError, match="between 0 and 1"):
        pipeline(queries, k=3, min_relevance=1.5)
    assert registry.pipeline("bm25", calibrated, k1=1.2).calibration is None  # other scores


def test_weir_run_writes_the_relevance_beside_the_run(calibrated, tmp_path, capsys):
    topics = tmp_path / "topics.tsv"
    topics.write_text("a\tcoffee liver disease\nb\theart disease\n")
    out = tmp_path / "run.trec"
    assert main(["run", "--index", str(calibrated.path), "--topics", str(topics), "--out", str(out), "-k", "5",
                 "--min-relevance", "0.2"]) == 0
    rows = [line.split("\t") for line in (tmp_path / "run.trec.relevance.tsv").read_text().splitlines()]
    run = Run.read_trec(out)
    assert [(r[0], r[1]) for r in rows] == [(q, h.doc_id) for q in run for h in run[q]]
    assert all(float(r[3]) >= 0.2 for r in rows)
    assert main(["search", "--index", str(calibrated.path), "--format", "json", "coffee"]) == 0
    assert '"relevance"' in capsys.readouterr().out


@pytest.fixture(scope="module")
def server(calibrated):
    config = ServiceConfig.load(index=str(calibrated.path), port=0, verify_checksums=False,
                                pipelines=["bm25", "dense", "hybrid", "bm25>>ltr"])
    with BackgroundServer(config) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with SearchClient(f"127.0.0.1:{server.port}", timeout=30) as c:
        yield c


def _answer(response) -> bytes:
    """A response's bytes without what depends on the batch it ran in (timings, batch size)."""
    response.ClearField("timings")
    response.batch_size = 0
    return response.SerializeToString(deterministic=True)


def test_concurrent_callers_get_the_relevance_and_reasons_of_sequential_calls(client):
    """Calibrated bm25 (relevance, cutoffs) and explained hybrid and bm25>>ltr (a fusion's shares, TreeSHAP per
    query of a batch): 8 callers at once, each call answered byte for byte as when it was asked alone."""
    calls = [(q, pipeline, cutoff, explain) for q in QUERIES
             for pipeline, cutoff, explain in (("bm25", None, False), ("bm25", 0.2, True), ("hybrid", None, True),
                                               ("bm25>>ltr", None, True))]
    sequential = [_answer(client.search(q, k=5, pipeline=p, min_relevance=m, explain=e)) for q, p, m, e in calls]
    assert any(h.reasons for h in search_pb2.SearchResponse.FromString(sequential[-1]).hits)

    def ask(q, p, m, e) -> bytes:
        return _answer(client.search(q, k=5, pipeline=p, min_relevance=m, explain=e))

    assert _concurrently(calls * 2, ask) == sequential * 2


def _concurrently(calls: list[tuple], ask, callers: int = 8) -> list:
    """``ask(*call)`` of every call, taken in turn by ``callers`` threads at once; the answers in the calls' order."""
    answers: dict[int, object] = {}
    lock = threading.Lock()
    order = iter(range(len(calls)))

    def caller() -> None:
        while True:
            with lock:
                i = next(order, None)
            if i is None:
                return
            answer = ask(*calls[i])
            with lock:
                answers[i] = answer

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [answers[i] for i in range(len(calls))]


def test_weir_query_asks_for_a_cutoff_and_reasons(server, capsys):
    address = f"127.0.0.1:{server.port}"
    assert main(["query", "--server", address, "--min-relevance", "0.05", "coffee liver disease"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all("P(rel)" in line for line in lines)
    assert main(["query", "--server", address, "--pipeline", "hybrid", "--explain", "-k", "2", "coffee"]) == 0
    out = capsys.readouterr().out
    assert out.count("hybrid ") == 4 and "bm25" in out and "dense" in out  # two hits, two fused stages each
    assert main(["query", "--server", address, "--pipeline", "dense", "--min-relevance", "0.5", "coffee"]) == 2
    assert "INVALID_ARGUMENT" in capsys.readouterr().err


def test_grpc_hits_carry_the_same_relevance_and_callers_get_their_own_cut(calibrated, client):
    assert list(client.info().calibrated_pipelines) == ["bm25"]  # not dense, not hybrid
    local = registry.build("bm25", calibrated)([Query("q", "coffee liver disease")], k=10).ranking("q")
    hits = client.search("coffee liver disease", k=10).hits
    assert [h.doc_id for h in hits] == local.doc_ids() and all(h.HasField("relevance") for h in hits)
    assert [h.relevance for h in hits] == local.relevance.astype(np.float32).tolist()
    assert not any(h.HasField("relevance") for h in client.search("coffee", pipeline="dense").hits)
    assert len(client.search("coffee liver disease", min_relevance=1.0).hits) == 0  # nothing that likely: no hit

    cutoffs = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, None, 0.2] * 2
    answers: dict[int, list] = {}

    def call(i: int) -> None:
        answers[i] = list(client.search("coffee liver disease", k=10, min_relevance=cutoffs[i]).hits)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(cutoffs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, m in enumerate(cutoffs):
        expected = [h.doc_id for h in hits if m is None or h.relevance >= np.float32(m)]
        assert [h.doc_id for h in answers[i]] == expected, m
    batch = client.batch_search(["coffee liver disease", "heart disease"], k=10, min_relevance=0.3)
    assert all(h.relevance >= np.float32(0.3) for r in batch.results for h in r.hits)


@pytest.mark.parametrize("kwargs, message", [
    ({"pipeline": "dense", "min_relevance": 0.5}, "pipeline 'dense' is not calibrated on this server"),
    ({"min_relevance": 1.5}, "min_relevance is a probability, 0 to 1 (got 1.5)"),
    ({"min_relevance": float("nan")}, "min_relevance is a probability"),
    ({"min_relevance": -0.1}, "min_relevance is a probability"),
])
def test_a_cutoff_the_server_cannot_make_is_invalid_argument(client, kwargs, message):
    with pytest.raises(grpc.RpcError) as info:
        client.search("coffee", **kwargs)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in info.value.details()


def test_weir_explain_prints_reasons_for_a_query_and_sums_them_up_over_topics(calibrated, tmp_path, capsys):
    assert main(["explain", "--index", str(calibrated.path), "--pipeline", "hybrid", "-k", "3", "--format", "json",
                 "coffee liver disease"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 3 and all({r["part"] for r in row["reasons"]} == {"bm25", "dense"} for row in rows)
    assert all(abs(sum(r["contribution"] for r in row["reasons"]) - row["score"]) < 1e-9 for row in rows)
    assert "relevance" not in rows[0]  # hybrid is not calibrated here
    topics = tmp_path / "topics.tsv"
    topics.write_text("a\tcoffee liver disease\nb\theart disease\n")
    assert main(["explain", "--index", str(calibrated.path), "--pipeline", "hybrid", "--topics", str(topics)]) == 0
    out = capsys.readouterr().out
    assert "hybrid" in out and "bm25" in out and "largest in" in out
    assert main(["explain", "--index", str(calibrated.path)]) == 2  # neither a query nor --topics
    assert "give a query" in capsys.readouterr().err


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(min_relevance=st.floats(width=32), k=st.integers(1, 12), explain=st.booleans())
def test_generated_cutoffs_answer_a_prefix_or_are_refused(client, min_relevance, k, explain):
    """Any float32 cutoff: within 0..1 the answer is the prefix of the uncut ranking at or above it, else
    INVALID_ARGUMENT; explained or not."""
    whole = client.search("coffee liver disease", k=k).hits
    try:
        hits = client.search("coffee liver disease", k=k, min_relevance=min_relevance, explain=explain).hits
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and not 0.0 <= min_relevance <= 1.0
        return
    assert 0.0 <= min_relevance <= 1.0
    assert [h.doc_id for h in hits] == [h.doc_id for h in whole][:len(hits)]
    assert all(h.relevance >= np.float32(min_relevance) for h in hits)
    assert all(h.relevance <= np.float32(min_relevance) for h in whole[len(hits):len(hits) + 1])  # float32 on the wire


def test_concurrent_callers_of_a_risk_aware_ltr_get_its_spread_and_reasons_of_sequential_calls(calibrated):
    """A server whose ltr is the seed ensemble (``ltr_model = "ltr-members"``): each hit of bm25>>ltr carries the
    members' spread beside their risk-aware score, explained with the risk's penalty; 8 callers at once get each
    answer byte for byte as when it was asked alone."""
    config = ServiceConfig.load(index=str(calibrated.path), port=0, verify_checksums=False, pipelines=["bm25>>ltr"],
                                default_pipeline="bm25>>ltr", options={"ltr_model": "ltr-members"})
    with BackgroundServer(config) as s, SearchClient(f"127.0.0.1:{s.port}", timeout=30) as client:
        calls = [(q, e) for q in QUERIES for e in (False, True)]
        sequential = [_answer(client.search(q, k=5, pipeline="bm25>>ltr", explain=e)) for q, e in calls]
        first = search_pb2.SearchResponse.FromString(sequential[1]).hits
        assert all(h.stage_scores["ltr_spread"] > 0 for h in first)
        for h in first:
            assert any(r.part == "(risk)" and r.contribution < 0 for r in h.reasons)
            assert sum(r.contribution for r in h.reasons if r.stage == "ltr") == pytest.approx(
                h.stage_scores["ltr"], abs=1e-4)

        def ask(q, e) -> bytes:
            return _answer(client.search(q, k=5, pipeline="bm25>>ltr", explain=e))

        assert _concurrently(calls * 2, ask) == sequential * 2
