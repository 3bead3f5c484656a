"""Drives a sharded server and a single server side by side through gRPC and writes what they answered (JSON), for
tests/collections/test_sharded_service.py, which runs it in a loopback-only network namespace (Ray binds the
machine's address otherwise) and asserts on what it wrote.

``python -m tests.collections.sharded_harness PLAN.json OUT.json``: PLAN holds ``scenarios``, each with ``whole``
(an index), ``shards`` (its shard indexes), ``ray`` (the [ray] settings), ``pipelines`` (each: ``pipeline``, ``k``,
``depth``, ``queries``, ``concurrent_calls``, ``include_text``), ``errors`` (requests that must fail) and optionally
``kill`` (callers asking ``pipeline`` ``k`` over ``queries`` while one replica of ``deployment`` is killed
``kill_after`` seconds in, until 2 s after the front's Info shows it restarted, ``seconds`` at most; with
``whole_time``, all ``seconds``). A local Ray instance is started once and stopped at the end.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

CALLERS = 8


def _answer(response) -> list:
    return [[h.doc_id, h.rank, h.score, dict(h.stage_scores), h.title, h.text] for h in response.hits]


def _sequential(target: str, spec: dict) -> list:
    from weir.service.client import SearchClient

    with SearchClient(target, timeout=300) as c:
        return [_answer(c.search(q, k=spec["k"], pipeline=spec["pipeline"], depth=spec["depth"],
                                 include_text=spec["include_text"])) for q in spec["queries"]]


def _concurrent(target: str, spec: dict) -> dict:
    """``concurrent_calls`` calls by CALLERS threads, each call a query of the list (caller n asks queries n,
    n + CALLERS, ...): per call (query index, answer or error), and how many came from batches of several."""
    from weir.service.client import SearchClient

    queries, calls = spec["queries"], spec["concurrent_calls"]

    def caller(n: int) -> list:
        out = []
        with SearchClient(target, timeout=300) as c:
            for i in range(n, calls, CALLERS):
                q = i % len(queries)
                try:
                    r = c.search(queries[q], k=spec["k"], pipeline=spec["pipeline"], depth=spec["depth"],
                                 include_text=spec["include_text"])
                    out.append([q, _answer(r), r.batch_size, None])
                except Exception as e:  # noqa: BLE001 (recorded: the test asserts there are none)
                    out.append([q, None, 0, repr(e)])
        return out

    start = time.perf_counter()
    with ThreadPoolExecutor(CALLERS) as pool:
        results = [r for part in pool.map(caller, range(CALLERS)) for r in part]
    return {"calls": results, "seconds": time.perf_counter() - start}


def _replica_actor(deployment: str):
    """The handle of one live replica of ``deployment`` (e.g. ``shard-0``) of this process's applications: Ray
    Serve names its replica actors ``SERVE_REPLICA::APP#DEPLOYMENT#ID`` in the ``serve`` namespace."""
    import ray

    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if a["namespace"] == "serve" and a["name"].startswith("SERVE_REPLICA::")
                   and a["name"].split("#")[1] == deployment)
    assert names, f"no replica of {deployment}"
    return ray.get_actor(names[0], namespace="serve"), names[0]


def _killed(target: str, spec: dict, single: list) -> dict:
    """CALLERS callers ask ``spec``'s queries for ``seconds``; ``kill_after`` seconds in, one replica of
    ``deployment`` is killed (ray.kill: its worker process ends, what it was answering fails). Per call: when it
    began (seconds after the kill), its code, and whether an OK answer equals the single server's; the front's Info
    (replicas running) polled until every deployment is whole again."""
    import grpc
    import ray

    from weir.service.client import SearchClient

    queries, seconds = spec["queries"], spec["seconds"]
    stop_at = [time.monotonic() + seconds]  # at most; 2 s after Info shows the recovery, unless ``whole_time``
    killed_at: list[float] = []

    def caller(n: int) -> list:
        out, i = [], n
        with SearchClient(target, timeout=spec.get("timeout", 10)) as c:
            while time.monotonic() < stop_at[0]:
                q, began = i % len(queries), time.monotonic()
                try:
                    r = c.search(queries[q], k=spec["k"], pipeline=spec["pipeline"])
                    out.append([began, "OK", _answer(r) == single[q], ""])
                except grpc.RpcError as e:
                    out.append([began, e.code().name, None, e.details()])
                    time.sleep(0.05)
                i += CALLERS
        return out

    def watch_info() -> list:
        polls, degraded = [], False
        with SearchClient(target, timeout=5) as c:
            while time.monotonic() < stop_at[0]:
                try:
                    info, healthy = c.info(), c.health()
                    replicas = [[r.deployment, r.running, r.target] for r in info.replicas]
                    polls.append([time.monotonic(), replicas, healthy])
                    whole = all(running == target for _, running, target in replicas)
                    if killed_at and not whole:
                        degraded = True
                    elif degraded and whole and not spec.get("whole_time"):  # recovered: 2 s more, then stop
                        stop_at[0] = min(stop_at[0], time.monotonic() + 2.0)
                except grpc.RpcError as e:
                    polls.append([time.monotonic(), e.code().name, None])
                time.sleep(0.25)
        return polls

    with ThreadPoolExecutor(CALLERS + 1) as pool:
        calls = [pool.submit(caller, n) for n in range(CALLERS)]
        info = pool.submit(watch_info)
        time.sleep(spec["kill_after"])
        actor, name = _replica_actor(spec["deployment"])
        killed_at.append(time.monotonic())
        ray.kill(actor)
        records = [r for f in calls for r in f.result()]
        polls = info.result()
    t0 = killed_at[0]
    return {"killed": name, "calls": [[b - t0, code, same, details] for b, code, same, details in records],
            "info": [[t - t0, replicas, healthy] for t, replicas, healthy in polls]}


def recovered_after(kill: dict) -> float | None:
    """Seconds from the kill to the first Info of ``kill`` (what :func:`_killed` wrote) that shows every replica
    running again after one showing fewer; None: no such Info."""
    degraded = [t for t, replicas, _ in kill["info"] if t >= 0 and isinstance(replicas, list)
                and any(running < target for _, running, target in replicas)]
    whole = [t for t, replicas, _ in kill["info"] if degraded and t > degraded[0] and isinstance(replicas, list)
             and all(running == target for _, running, target in replicas)]
    return whole[0] if whole else None


def _errors(target: str, requests: list[dict]) -> list:
    import grpc

    from weir.service.client import SearchClient

    out = []
    with SearchClient(target, timeout=60) as c:
        for r in requests:
            try:
                c.search(r.get("query", "protein"), k=r.get("k", 10), pipeline=r.get("pipeline", ""),
                         depth=r.get("depth", 0))
                out.append([r, "OK", ""])
            except grpc.RpcError as e:
                out.append([r, e.code().name, e.details()])
    return out


def run_scenario(scenario: dict) -> dict:
    from weir.service.client import SearchClient
    from weir.service.config import ServiceConfig
    from weir.service.server import BackgroundServer
    from weir.service.sharded.server import ShardedServer

    pipelines = sorted({p["pipeline"] for p in scenario["pipelines"]})
    common = {"port": 0, "verify_checksums": False, "pipelines": pipelines, "access_log": False}
    sharded_config = ServiceConfig.load(shards=scenario["shards"], ray=scenario.get("ray", {}), **common)
    single_config = ServiceConfig.load(index=scenario["whole"], **common)
    out: dict = {"pipelines": []}
    start = time.perf_counter()
    with BackgroundServer(sharded_config, ShardedServer(sharded_config)) as sharded:
        out["start_seconds"] = time.perf_counter() - start
        front = f"127.0.0.1:{sharded.port}"
        with SearchClient(front) as c:
            info = c.info()
            out["health"] = c.health()
            out["info"] = {"documents": info.documents, "collection": info.collection,
                           "pipelines": list(info.pipelines)}
        with BackgroundServer(single_config) as single:
            one = f"127.0.0.1:{single.port}"
            with SearchClient(one) as c:
                out["single_info"] = {"documents": c.info().documents, "collection": c.info().collection}
            for spec in scenario["pipelines"]:
                t = time.perf_counter()
                record = {"spec": spec, "single": _sequential(one, spec)}
                record["single_seconds"] = time.perf_counter() - t
                t = time.perf_counter()
                record["sharded"] = _sequential(front, spec)
                record["sharded_seconds"] = time.perf_counter() - t
                if spec.get("concurrent_calls"):
                    record["concurrent"] = _concurrent(front, spec)
                out["pipelines"].append(record)
            if scenario.get("kill"):
                spec = scenario["kill"]
                out["kill"] = _killed(front, spec, _sequential(one, {**spec, "depth": 0, "include_text": False}))
        out["errors"] = _errors(front, scenario.get("errors", []))
        out["reranker_batches"] = {name: {str(size): n for size, n in handle.batch_counts.remote().result().items()}
                                   for name, handle in sharded.server.service.rerankers.items()}
    return out


def main(plan_path: str, out_path: str) -> int:
    import logging

    import ray

    logging.basicConfig(level=logging.WARNING)
    plan = json.loads(open(plan_path, encoding="utf-8").read())
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=plan.get("num_cpus", 2), include_dashboard=False, log_to_driver=False)
    try:
        results = [run_scenario(s) for s in plan["scenarios"]]
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"scenarios": results}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
