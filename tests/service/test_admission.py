"""Deadline-aware admission: a call that cannot be answered before its deadline is refused before any stage runs,
with RESOURCE_EXHAUSTED, a retry pushback and a count in the metrics; the estimate follows the server's own batches."""

from __future__ import annotations

import re
import threading
import time

import grpc
import pytest

from weir.service.client import SearchClient
from weir.service.config import ServiceConfig
from weir.service.server import BackgroundServer


def _config(index, **settings) -> ServiceConfig:
    return ServiceConfig.load(index=str(index), port=0, verify_checksums=False, **settings)


def test_costs_follow_the_batches_and_the_expected_wait_shares_the_backlog_between_workers():
    from weir.service.admission import Admission, Costs
    from weir.service.config import Limits
    from weir.service.metrics import Metrics

    costs = Costs(alpha=0.5)
    assert costs.of("a") is None
    costs.observe("a", 4, 0.4)  # 0.1 s a query
    costs.observe("a", 2, 0.4)  # 0.2 s a query: the mean moves halfway
    assert costs.of("a") == pytest.approx(0.15)

    class Backlog:
        workers, max_batch = 2, 8

        def lane(self, key):
            return ""

        def workers_of(self, key):
            return self.workers

        def backlog(self):  # 6 queries of "a" and 4 of "b" waiting; a batch of 2 of "b" running for 0.1 s of its 0.4
            return {"a": 6, "b": 4}, [("b", 2, time.monotonic() - 0.1)]

    costs.observe("b", 1, 0.2)
    admission = Admission(Limits(), Backlog(), Metrics(), costs)
    wait, own = admission.expected("a", 3)  # joins the 6 of "a" waiting: a batch of 8, 1 query left for the next
    assert wait == pytest.approx((4 * 0.2 + (2 * 0.2 - 0.1) + 1 * 0.15) / 2, abs=0.01)
    assert own == pytest.approx(8 * 0.15)
    assert admission.expected("c", 1) is None  # never run: no estimate, admitted
    stale = Costs(max_age=0.05)
    stale.observe("a", 1, 5.0)
    time.sleep(0.1)
    assert stale.of("a") is None  # not renewed: forgotten, so that the next calls are measured again


def test_admission_keeps_a_margin_of_the_batches_spread():
    """The costs' weighted variance (Finch 2009: v <- (1 - a)(v + a d^2)) is kept beside their mean; a call is
    admitted only when it would end in time with the cost ``admit_sigmas`` standard deviations above the mean: at 0 a
    call that fits at the mean is admitted, at 2 the same call is refused, with the margin in its message."""
    from weir.core.types import InputError
    from weir.service.admission import Admission, Costs
    from weir.service.config import Limits
    from weir.service.failures import Failure
    from weir.service.metrics import Metrics

    costs = Costs(alpha=0.5)
    assert costs.spread("a") == 0.0
    costs.observe("a", 1, 0.1)
    assert costs.spread("a") == 0.0  # one batch: no spread yet
    costs.observe("a", 1, 0.3)  # d = 0.2: mean 0.2, variance 0.5 * (0 + 0.5 * 0.04) = 0.01
    assert costs.of("a") == pytest.approx(0.2) and costs.spread("a") == pytest.approx(0.1 / 0.2)

    class Idle:
        max_batch = 8

        def lane(self, key):
            return ""

        def workers_of(self, key):
            return 1

        def backlog(self):
            return {}, []

        def earliest_deadline(self, key):
            return None

    metrics = Metrics()
    Admission(Limits(admit_sigmas=0), Idle(), metrics, costs).check_time("a", 1, 0.25)  # 0.2 s at the mean: in time
    with pytest.raises(Failure) as refused:  # 0.2 * (1 + 2 * 0.5) = 0.4 s with the margin: not
        Admission(Limits(admit_sigmas=2), Idle(), metrics, costs).check_time("a", 1, 0.25)
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "400 ms" in refused.value.message
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(InputError, match="admit_sigmas"):
            Limits(admit_sigmas=bad)


class _Slow:
    """Every batch of a server takes ``seconds`` longer; ``batches`` counts the batches that ran."""

    def __init__(self, service, seconds: float):
        self.run, self.seconds, self.batches = service.batcher.run, seconds, 0
        service.batcher.run = self._slow

    def _slow(self, key, items):
        self.batches += 1
        time.sleep(self.seconds)
        return self.run(key, items)


def _rejected(server, reason: str) -> float:
    return server.server.metrics.registry.get_sample_value("weir_requests_rejected_total", {"reason": reason}) or 0.0


def test_a_call_that_cannot_meet_its_deadline_is_refused_before_any_stage_runs(small_index):
    with BackgroundServer(_config(small_index)) as s, SearchClient(f"127.0.0.1:{s.port}") as c:
        slow = _Slow(s.server.service, 0.3)
        assert c.search("coffee", k=2).hits  # the server learns what a bm25 k=2 query costs: about 0.3 s
        ran = slow.batches
        start = time.perf_counter()
        with pytest.raises(grpc.RpcError) as info:
            c.search("coffee", k=2, timeout=0.1)
        assert time.perf_counter() - start < 0.1  # at once, not after waiting out its deadline
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert re.search(r"would answer in about \d+ ms .* after its deadline \(\d+ ms\)", info.value.details())
        assert dict(info.value.trailing_metadata())["grpc-retry-pushback-ms"].isdigit()
        assert slow.batches == ran  # no stage ran for it
        assert _rejected(s, "deadline") == 1
        assert c.search("coffee", k=2, timeout=5).hits  # a deadline it can meet: answered
        assert s.server.metrics.registry.get_sample_value("weir_queue_seconds_count", {"pipeline": "bm25"}) >= 2
        with pytest.raises(grpc.RpcError):
            c.search("coffee", k=2, pipeline="no such thing")
        # each call's time from arrival to its answer or refusal, by pipeline and outcome; the refusal within 100 ms
        assert _decided(s, "bm25", "ok") == 2 and _decided(s, "bm25", "deadline") == 1
        assert _decided(s, "-", "invalid") == 1  # the caller's own pipeline text is never a label
        refusal = {"method": "Search", "pipeline": "bm25", "outcome": "deadline"}
        assert s.server.metrics.registry.get_sample_value("weir_call_seconds_bucket", {**refusal, "le": "0.1"}) == 1


def _decided(server, pipeline: str, outcome: str) -> float:
    return server.server.metrics.registry.get_sample_value(
        "weir_call_seconds_count", {"method": "Search", "pipeline": pipeline, "outcome": outcome}) or 0.0


def test_a_call_without_a_deadline_is_refused_when_it_would_wait_beyond_the_default_budget(small_index):
    from weir.service.stubs import search_pb2

    with BackgroundServer(_config(small_index, limits={"default_budget_ms": 100})) as s, \
            SearchClient(f"127.0.0.1:{s.port}") as c:
        _Slow(s.server.service, 0.8)
        assert c.search("coffee", k=2).hits  # learnt: 0.8 s a query; alone, nothing ahead of it: admitted
        held = threading.Thread(target=lambda: c.search("tea", k=2))
        held.start()
        time.sleep(0.2)  # a batch runs, about 0.6 s of it left, on one of two workers: 0.3 s ahead of the next
        with pytest.raises(grpc.RpcError) as info:  # the stub itself: the client's calls have a default deadline
            c.stub.Search(search_pb2.SearchRequest(query="coffee", k=2))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "the budget of a call without a deadline (100 ms)" in info.value.details()
        assert _rejected(s, "budget") == 1
        held.join(10)
        assert c.search("coffee", k=2).hits  # nothing ahead any more


def test_a_batch_keeps_the_most_queries_it_can_answer_in_time_and_sheds_the_rest():
    """The controlled-delay rule of the queue: at a batch's start, queries whose deadline falls before the batch's
    expected end are taken off unrun (Shed), keeping as many as can be answered in time."""
    import asyncio

    from weir.service.batching import Item, MicroBatcher, Shed

    async def main():
        loop = asyncio.get_running_loop()
        batcher = MicroBatcher(lambda key, items: [i.query for i in items], None, workers=1, cost=lambda key: 0.1)
        now = time.monotonic()
        items = [Item("near", deadline=now + 0.15), Item("far", deadline=now + 1.0), Item("none"),
                 Item("mid", deadline=now + 0.35)]
        pairs = [(item, loop.create_future()) for item in items]
        kept = batcher._shed(pairs, "k", now)
        # by time left: none (inf), far (1.0), mid (0.35 >= 3 x 0.1), near (0.15 < 4 x 0.1): near is shed
        assert [item.query for item, _ in kept] == ["far", "none", "mid"]
        assert isinstance(pairs[0][1].exception(), Shed) and "300 ms" in str(pairs[0][1].exception())
        assert MicroBatcher(None, None, workers=1)._shed(pairs[1:], "k", now) == pairs[1:]  # no estimate: all kept

    asyncio.run(main())


def test_a_flood_of_an_expensive_pipeline_leaves_the_cheap_ones_their_own_workers(small_index):
    """Lanes: with bm25>>ltr the expensive lane (one worker), its batches held, queued ones waiting, bm25 is answered
    at once on the default lane's workers."""
    config = _config(small_index, pipelines=["bm25", "bm25>>ltr"],
                     batching={"expensive": ["ltr"], "expensive_workers": 1, "max_batch": 1})
    assert config.batching.lane("bm25>>ltr") == "expensive" and config.batching.lane("bm25") == ""
    with BackgroundServer(config) as s, SearchClient(f"127.0.0.1:{s.port}") as c:
        batcher, release, held = s.server.service.batcher, threading.Event(), threading.Semaphore(0)
        run = batcher.run

        def gated(key, items):
            if key[0] == "bm25>>ltr":
                held.release()
                release.wait(30)
            return run(key, items)

        batcher.run = gated
        flood = [threading.Thread(target=lambda: c.search("coffee", k=2, pipeline="bm25>>ltr")) for _ in range(3)]
        for t in flood:
            t.start()
        assert held.acquire(timeout=10)  # one expensive batch runs (held); the others wait for the lane's worker
        time.sleep(0.2)
        assert batcher.running == 1 and batcher.queued >= 1
        start = time.perf_counter()
        assert c.search("coffee", k=2).hits
        assert time.perf_counter() - start < 2.0  # not behind the expensive batches
        release.set()
        for t in flood:
            t.join(30)
