"""Sharded serving on Ray Serve (weir/service/sharded/) against one server over the whole index, through gRPC: the 2-shard
top 10 of every SciFact test topic is the single server's (BM25, each shard replicated twice), ranks and float scores
alike; over a shard set of ADI (``--shard-set 2``) a flat dense index, DeepImpact, the fusions hybrid and
deepimpact+bm25, and BM25 >> attention (reranked once after the merge, on 8 queries) too, and over an IVF-PQ shard
set of ADI (re-scored) dense and hybrid; 8 concurrent callers of the
sharded front get exactly the sequential answers; unsupported pipelines and bad fields get their status codes.

Ray and both servers run in a child process (tests/collections/sharded_harness.py) inside a loopback-only network
namespace (``unshare -n``, then ``ip link set lo up``): there Ray binds 127.0.0.1 only (outside one it binds the
machine's address, see ../shared/DESIGN.md). Without root or ``unshare`` the child runs in this namespace, its gRPC
servers bound to 127.0.0.1. The shard indexes are built once per session (BM25 of SciFact: seconds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from weir.indexer.build import build_index
from weir.indexer.shard_set import build_shard_set, shard_name
from weir.indexer.collections import Collection
from weir.indexer.shards import ShardSpec
from tests.conftest import ROOT, collection, in_loopback_namespace
from weir.core.trec import read_topics

pytestmark = pytest.mark.data

ATTENTION_QUERIES, ATTENTION_DEPTH = 8, 20
KILL_SECONDS = 30  # at most: callers ask until 2 s after the killed replica's restart (about 7-10 s after the kill here)
# IVF-PQ shards, each with codebooks of its own, re-scoring their candidates from their stored vectors (the default)
IVFPQ = {"index": "ivfpq", "nlist": 2, "nprobe": 2, "nbits": 4, "pq_m": 48}


@pytest.fixture(scope="session")
def shard_factory(tmp_path_factory):
    """The N shard indexes of a shared collection (built once per session): one by one (``--shard I/N``), or as
    one shard set (``--shard-set N``, ``together=True``)."""
    built: dict[tuple, list[str]] = {}

    def make(name: str, components: str, n: int = 2, together: bool = False, dense: dict | None = None) -> list[str]:
        key = (name, components, n, together, json.dumps(dense, sort_keys=True))
        if key not in built:
            root = tmp_path_factory.mktemp(f"shards-{name}")
            if together:
                build_shard_set(collection(name), root / "set", n, components=tuple(components.split(",")),
                                dense=dense)
                built[key] = [str(root / "set" / shard_name(i, n)) for i in range(n)]
            else:
                built[key] = []
                for i in range(n):
                    out = root / f"{name}-{i}-of-{n}"
                    build_index(collection(name), out, components=tuple(components.split(",")),
                                shard=ShardSpec(i, n), dense=dense)
                    built[key].append(str(out))
        return built[key]

    return make


@pytest.fixture(scope="module")
def results(index_factory, shard_factory, tmp_path_factory):
    topics = [q.text for q in Collection.open(collection("beir-scifact")).topics("test")]
    adi_topics = [q.text for q in read_topics(collection("adi") / "queries.tsv")]
    ray = {"num_cpus": 2, "shard_num_cpus": 0.25, "reranker_num_cpus": 0.5}

    def adi(pipeline: str, concurrent_calls: int, **spec) -> dict:  # a pipeline asked every ADI topic
        return {"pipeline": pipeline, "k": 10, "depth": 0, "queries": adi_topics, "include_text": False,
                "concurrent_calls": concurrent_calls, **spec}

    plan = {"num_cpus": 2, "scenarios": [
        {"whole": str(index_factory("beir-scifact", "bm25")), "shards": shard_factory("beir-scifact", "bm25"),
         "ray": {**ray, "shard_replicas": 2},  # replicated: concurrent calls reach both replicas of each shard
         "pipelines": [
             {"pipeline": "bm25", "k": 10, "depth": 0, "queries": topics, "include_text": False,
              "concurrent_calls": 800},
             {"pipeline": "bm25", "k": 10, "depth": 0, "queries": topics[:20], "include_text": True,
              "concurrent_calls": 0}],
         "errors": [{"pipeline": "bm25>>ltr"}, {"pipeline": "deepimpact+bm25"}, {"pipeline": "nonsense"}, {"k": 0},
                    {"query": " "}, {"depth": 5000}],
         # a replica of shard 0 killed under 8 callers: the other replica answers
         "kill": {"pipeline": "bm25", "k": 10, "queries": topics, "deployment": "shard-0", "kill_after": 2,
                  "seconds": KILL_SECONDS}},
        {"whole": str(index_factory("adi", "bm25,dense,deepimpact")),
         "shards": shard_factory("adi", "bm25,dense,deepimpact", together=True),
         "ray": ray,
         "pipelines": [adi("dense", 80), adi("bm25", 0, k=82), adi("hybrid", 80), adi("deepimpact", 80),
                       adi("deepimpact+bm25", 80),
                       adi("bm25>>attention", 40, depth=ATTENTION_DEPTH, queries=adi_topics[:ATTENTION_QUERIES])],
         # the only replica of the reranker killed: UNAVAILABLE naming it until restarted, then exact again
         "kill": {"pipeline": "bm25>>attention", "k": 10, "queries": adi_topics[:ATTENTION_QUERIES],
                  "deployment": "attention", "kill_after": 2, "seconds": KILL_SECONDS}},
        {"whole": str(index_factory("adi", "bm25,dense", dense=IVFPQ)),
         "shards": shard_factory("adi", "bm25,dense", together=True, dense=IVFPQ),
         "ray": ray,
         "pipelines": [adi("bm25", 0), adi("dense", 80), adi("hybrid", 0)],
         # the only replica of shard 1 killed: UNAVAILABLE until Ray Serve has restarted it, then exact again
         "kill": {"pipeline": "bm25", "k": 10, "queries": adi_topics, "deployment": "shard-1", "kill_after": 2,
                  "seconds": KILL_SECONDS}},
    ]}
    work = tmp_path_factory.mktemp("sharded-harness")
    (work / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    command, where = in_loopback_namespace(
        [sys.executable, "-m", "tests.collections.sharded_harness", str(work / "plan.json"), str(work / "out.json")])
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        pytest.fail(f"the harness failed ({where}), exit {done.returncode}:\n{done.stdout[-3000:]}\n"
                    f"{done.stderr[-6000:]}")
    out = json.loads((work / "out.json").read_text(encoding="utf-8"))
    for s in out["scenarios"]:
        phases = ", ".join(f"{p['spec']['pipeline']} {p['single_seconds']:.1f}s / {p['sharded_seconds']:.1f}s"
                           for p in s["pipelines"])
        print(f"\nharness in {where}: sharded server up in {s['start_seconds']:.1f}s; sequential single / sharded: "
              f"{phases}; reranker batch sizes: {s['reranker_batches']}")
    return out["scenarios"]


def _pipeline(results, scenario: int, name: str, include_text: bool = False) -> dict:
    return next(p for p in results[scenario]["pipelines"]
                if p["spec"]["pipeline"] == name and p["spec"]["include_text"] == include_text)


def test_two_shards_give_the_whole_index_top_10_for_every_scifact_test_topic(results):
    record = _pipeline(results, 0, "bm25")
    assert len(record["single"]) == 300 and all(record["single"])
    assert record["sharded"] == record["single"]  # doc ids, ranks, float scores, stage scores: equal
    info, single = results[0]["info"], results[0]["single_info"]
    assert results[0]["health"] == "SERVING"
    assert info["documents"] == single["documents"] == 5183 and info["collection"] == single["collection"]


def test_stored_text_comes_back_from_the_shard_holding_each_hit(results):
    record = _pipeline(results, 0, "bm25", include_text=True)
    assert record["sharded"] == record["single"]
    assert all(hit[4] or hit[5] for answer in record["sharded"] for hit in answer)


def test_reranking_once_after_the_merge_gives_the_single_servers_answers(results):
    record = _pipeline(results, 1, "bm25>>attention")
    assert len(record["single"]) == ATTENTION_QUERIES
    assert record["sharded"] == record["single"]
    assert all(set(hit[3]) == {"bm25", "attention"} for answer in record["sharded"] for hit in answer)
    sizes = {int(size) for size in results[1]["reranker_batches"]["attention"]}
    assert max(sizes) > 1  # @serve.batch reranked concurrent queries together


def test_flat_dense_shards_merge_into_the_whole_index_top_k(results):
    dense = _pipeline(results, 1, "dense")
    assert [[h[0] for h in a] for a in dense["sharded"]] == [[h[0] for h in a] for a in dense["single"]]
    for a, b in zip(dense["sharded"], dense["single"]):  # faiss inner products of the same vectors
        assert [h[2] for h in a] == pytest.approx([h[2] for h in b], abs=1e-6)
    whole = _pipeline(results, 1, "bm25")  # every document of ADI ranked: the full orders agree
    assert whole["sharded"] == whole["single"]


def test_hybrid_fuses_the_merged_lists_as_one_index_fuses_its_own(results):
    """BM25 and dense each merged over the shards (the whole index's lists), then fused at the front: the single
    server's hybrid (default z-score fusion, depth 1000). Dense inner products differ in their last bits between a
    shard's faiss index and the whole one, so scores are compared to 1e-5."""
    record = _pipeline(results, 1, "hybrid")
    assert len(record["single"]) == 35 and all(record["single"])
    for a, b in zip(record["sharded"], record["single"]):
        assert [h[0] for h in a] == [h[0] for h in b] and [h[1] for h in a] == [h[1] for h in b]
        assert [h[2] for h in a] == pytest.approx([h[2] for h in b], abs=1e-5)
        assert all("hybrid" in h[3] and set(h[3]) <= {"bm25", "dense", "hybrid"} for h in a)  # a stage's own hits
        for ha, hb in zip(a, b):
            assert ha[3] == pytest.approx(hb[3], abs=1e-5)


def test_a_shard_sets_impacts_merge_into_the_whole_index_top_k(results):
    """DeepImpact over a shard set (weighed in one pass, one impact scale): the merged top 10 is the single
    server's, ids, ranks and integer scores; deepimpact+bm25 fused at the front as the single index fuses it."""
    impact = _pipeline(results, 1, "deepimpact")
    assert len(impact["single"]) == 35 and sum(map(bool, impact["single"])) >= 30
    assert impact["sharded"] == impact["single"]
    fused = _pipeline(results, 1, "deepimpact+bm25")
    assert all(fused["single"])
    for a, b in zip(fused["sharded"], fused["single"]):
        assert [h[0] for h in a] == [h[0] for h in b] and [h[1] for h in a] == [h[1] for h in b]
        assert [h[2] for h in a] == pytest.approx([h[2] for h in b], abs=1e-9)
        assert all(set(h[3]) <= {"deepimpact", "bm25", "deepimpact+bm25"} for h in a)


def test_rescored_ivfpq_shards_merge_into_the_whole_index_top_k(results):
    """IVF-PQ shards trained apart (codebooks of their own) re-score their candidates exactly from their stored
    vectors: the merged dense top 10, and hybrid fused from it, are the single IVF-PQ server's, to the bit."""
    for pipeline in ("dense", "hybrid"):
        record = _pipeline(results, 2, pipeline)
        assert len(record["single"]) == 35 and all(record["single"])
        assert record["sharded"] == record["single"], pipeline


@pytest.mark.parametrize("scenario, pipeline", [(0, "bm25"), (1, "dense"), (1, "hybrid"), (1, "deepimpact"),
                                                (1, "deepimpact+bm25"), (1, "bm25>>attention"), (2, "dense")])
def test_concurrent_callers_get_the_sequential_answers(results, scenario, pipeline):
    record = _pipeline(results, scenario, pipeline)
    concurrent = record["concurrent"]
    errors = [c[3] for c in concurrent["calls"] if c[3]]
    mismatches = sum(c[1] != record["sharded"][c[0]] for c in concurrent["calls"] if c[1] is not None)
    batched = sum(c[2] > 1 for c in concurrent["calls"])
    print(f"\n{pipeline}: {len(concurrent['calls'])} calls by 8 callers in {concurrent['seconds']:.1f}s, "
          f"{len(errors)} errors, {mismatches} unlike the sequential answers, {batched} from batches of several")
    assert len(concurrent["calls"]) == record["spec"]["concurrent_calls"]
    assert errors == [] and mismatches == 0
    assert batched > 0  # the front micro-batched concurrent calls


def test_unsupported_pipelines_and_bad_fields_get_their_status_codes(results):
    codes = {json.dumps(r, sort_keys=True): (code, message) for r, code, message in results[0]["errors"]}

    def code(**request):
        return codes[json.dumps(request, sort_keys=True)]

    assert code(pipeline="bm25>>ltr")[0] == "INVALID_ARGUMENT" and "ltr" in code(pipeline="bm25>>ltr")[1]
    assert "whole-index statistics" in code(pipeline="bm25>>ltr")[1]
    assert code(pipeline="deepimpact+bm25")[0] == "INVALID_ARGUMENT"  # these shards have no deepimpact
    assert "not served here" in code(pipeline="deepimpact+bm25")[1]
    assert code(pipeline="nonsense")[0] == "INVALID_ARGUMENT"
    assert code(k=0)[0] == code(query=" ")[0] == code(depth=5000)[0] == "INVALID_ARGUMENT"


def _after_the_kill(kill: dict) -> tuple[dict, float | None, list]:
    """(codes of the calls begun after the kill, seconds from the kill to the first Info that shows every replica
    running again after one showing fewer (None: no such Info), the errors' details)."""
    from collections import Counter

    from tests.collections.sharded_harness import recovered_after

    calls = [c for c in kill["calls"] if c[0] >= 0]
    codes = Counter(c[1] for c in calls)
    return dict(codes), recovered_after(kill), [c[3] for c in calls if c[1] != "OK"]


def test_a_killed_replica_of_a_replicated_shard_leaves_every_answer_whole(results):
    """Shard 0 of SciFact, 2 replicas, one killed under 8 callers: every OK answer is the single server's top 10;
    a call the dead replica held is asked again of the other; what fails is UNAVAILABLE naming the shard."""
    kill = results[0]["kill"]
    codes, recovered, errors = _after_the_kill(kill)
    wrong = sum(1 for c in kill["calls"] if c[1] == "OK" and not c[2])
    print(f"\nkilled {kill['killed']}: after the kill {codes}, {wrong} answers unlike the single server's; Info "
          f"showed every replica again {recovered if recovered is None else f'{recovered:.1f} s'} after the kill; "
          f"errors: {sorted(set(errors))[:3]}")
    assert wrong == 0
    assert codes.get("OK", 0) > 0 and set(codes) <= {"OK", "UNAVAILABLE"}
    assert all("shard 0" in e for e in errors)
    assert recovered is not None  # Ray Serve restarted it; Info told of the loss, then of the recovery


@pytest.mark.parametrize("scenario, deployment", [(2, "shard 1"), (1, "reranker attention")])
def test_a_killed_replica_of_a_deployment_alone_is_unavailable_until_restarted_then_exact_again(results, scenario,
                                                                                                deployment):
    """Shard 1 of an ADI shard set, or the attention reranker, 1 replica, killed: calls are UNAVAILABLE naming it
    (at once once the front has seen the loss, the health service NOT_SERVING meanwhile), never a partial or
    unreranked top 10; once Ray Serve has restarted it, every answer is the single server's again."""
    kill = results[scenario]["kill"]
    codes, recovered, errors = _after_the_kill(kill)
    wrong = sum(1 for c in kill["calls"] if c[1] == "OK" and not c[2])
    not_serving = [t for t, _, healthy in kill["info"] if t >= 0 and healthy is not None and healthy != "SERVING"]
    print(f"\nkilled {kill['killed']}: after the kill {codes}, {wrong} answers unlike the single server's; "
          f"recovered {recovered if recovered is None else f'{recovered:.1f} s'} after the kill; health not serving "
          f"at {len(not_serving)} polls; errors: {sorted(set(errors))[:3]}")
    assert wrong == 0
    assert set(codes) <= {"OK", "UNAVAILABLE"} and codes.get("UNAVAILABLE", 0) > 0
    assert all(deployment in e for e in errors)
    assert recovered is not None and not_serving
    assert any(c[1] == "OK" for c in kill["calls"] if c[0] > recovered)  # exact again after the restart
