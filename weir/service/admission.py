"""Admission: which calls a server takes on, and how long their queries may wait. At most ``max_in_flight +
max_queued`` calls are admitted at once and the next is refused at once (RESOURCE_EXHAUSTED); none once the server
drains (UNAVAILABLE). An admitted call's queries go to the micro-batcher (:mod:`weir.service.batching`) with the
call's deadline; when it passes, or the batch gives them up, the call is DEADLINE_EXCEEDED and its work is marked
abandoned, so it stops before its next stage. The count of admitted calls feeds the metrics and tells a drain when
the server is idle.

**Deadline-aware.** A call that cannot be answered before its deadline is refused before any work, with
RESOURCE_EXHAUSTED and a retry pushback (``grpc-retry-pushback-ms``, gRPC's server pushback), instead of waiting in
the queue to expire: under overload, first-in-first-out queueing had turned all of the server's time into answers
nobody waited for (32 callers of a 200 ms deadline: 1% of one caller's goodput). What a call will take is estimated
from the server's own recent batches (:class:`Costs`: seconds per answered query, per pipeline, k and depth): the
work waiting and running, shared by the workers, then the call's own queries, with a margin: the call must end in
time even if its batches ran ``admit_sigmas`` (default 2) standard deviations slower than their recent mean. At the
mean alone, a call admitted on a lucky estimate waited and was then shed from its batch (a refusal after 80-150 ms)
or expired. Side by side (``bench/load.py ... --concurrency 1,32 --rounds 2 --compare "--admit-sigmas 0" ""``, 32
callers, 200 ms deadlines, SciFact bm25+dense, 2 cores), at 0 -> 2: bm25 k=1000 with text, admitted calls that
expired 1.4-1.5% -> 0.8-1.0%, the server's refusal p99 84-147 -> 0.7-108 ms, 0.93x the answers in time;
hybrid>>ltr k=10, expired 3.7-8.1% -> 1.6-3.6%, refusal p99 80-149 -> 0.5 ms, 0.99x the answers. A pipeline not run
yet has no estimate and is admitted. A call without a deadline is refused when it would wait longer than
``default_budget_ms`` to start. Anchors: "Fail at Scale" (ACM Queue, 2015), Triton's queue policy, gRPC's
``grpc-retry-pushback-ms``; written here because grpc.aio has no admission control of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable, Sequence

import grpc

from weir.service.batching import Abandoned, Item, MicroBatcher, Shed
from weir.service.config import Limits
from weir.service.failures import Failure
from weir.service.metrics import Metrics


class Costs:
    """Seconds per answered query of each batch key, from the server's own batches: an exponentially weighted mean
    (weight ``alpha`` to the newest batch) of a batch's wall time over the queries it answered, and the exponentially
    weighted variance about it (:meth:`spread`). A batch's time is shared by its queries, so under load, when batches
    grow, a query costs less: the estimate follows. An estimate not renewed for ``max_age`` seconds is forgotten (the
    next calls are admitted and measured): a cost estimated too high, which would refuse every call and so never be
    measured again, lasts that long at most."""

    def __init__(self, alpha: float = 0.3, max_age: float = 10.0):
        self.alpha, self.max_age = alpha, max_age
        # key -> (seconds a query, the variance of that, when last renewed)
        self._per_query: dict[Hashable, tuple[float, float, float]] = {}

    def observe(self, key: Hashable, queries: int, seconds: float) -> None:
        value, now = seconds / queries, time.monotonic()
        if self.of(key) is None:
            self._per_query[key] = (value, 0.0, now)
            return
        mean, variance, _ = self._per_query[key]
        delta = value - mean  # the exponentially weighted variance of Finch, "Incremental calculation of weighted
        # mean and variance" (2009), eq. 143
        self._per_query[key] = (mean + self.alpha * delta, (1 - self.alpha) * (variance + self.alpha * delta ** 2),
                                now)

    def of(self, key: Hashable) -> float | None:
        """The estimate for ``key`` (None: no batch of it has finished in the last ``max_age`` seconds)."""
        value, _, renewed = self._per_query.get(key, (None, 0.0, 0.0))
        return value if value is not None and time.monotonic() - renewed <= self.max_age else None

    def spread(self, key: Hashable) -> float:
        """How much a batch of ``key`` strays from the estimate: the weighted standard deviation over the mean (0
        without an estimate)."""
        mean = self.of(key)
        return (self._per_query[key][1] ** 0.5) / mean if mean else 0.0


class Admission:
    """The admission state of one servicer: calls admitted, draining or not, idle or not."""

    def __init__(self, limits: Limits, batcher: MicroBatcher, metrics: Metrics, costs: Costs | None = None):
        self.limits, self.batcher, self.metrics = limits, batcher, metrics
        self.costs = costs or Costs()
        self.admitted = 0
        self.draining = False
        self.idle = asyncio.Event()
        self.idle.set()

    def check_open(self) -> None:
        """Failure(UNAVAILABLE) once the server drains."""
        if self.draining:
            raise Failure(grpc.StatusCode.UNAVAILABLE, "the server is shutting down; try another replica")

    async def run(self, key: Hashable, texts: Sequence[str], include_text: bool, remaining: float | None,
                  min_relevance: float | None = None) -> list:
        """Admit one call and run its ``texts`` in batches of ``key`` within ``remaining`` seconds (None: no
        deadline); their results in order. Failure(RESOURCE_EXHAUSTED) beyond the limit, Failure(DEADLINE_EXCEEDED)
        when the deadline passes first; what a batch raises is raised here."""
        limit = self.limits.max_in_flight + self.limits.max_queued
        if self.admitted >= limit:
            self.metrics.rejected.labels("overload").inc()
            raise Failure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"the server has {self.admitted} requests in flight or queued (limit {limit}); retry later",
                          reason="overload")
        self.check_time(key, len(texts), remaining)
        deadline = time.monotonic() + remaining if remaining is not None else None
        items = [Item(t, include_text, deadline, min_relevance) for t in texts]
        self.admitted += 1
        self.idle.clear()
        self.metrics.in_flight.set(self.admitted)
        try:
            return await asyncio.wait_for(self.batcher.submit(key, items), timeout=remaining)
        except Shed as shed:
            for item in items:
                item.abandoned.set()
            self.metrics.rejected.labels("shed").inc()
            raise Failure(grpc.StatusCode.RESOURCE_EXHAUSTED, f"taken off the queue unrun: {shed}; retry later",
                          pushback_ms=max(1, round(shed.expected * 1000)), reason="shed") from None
        except (asyncio.TimeoutError, Abandoned):
            for item in items:
                item.abandoned.set()
            raise Failure(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed; the work for it stopped") from None
        finally:
            self.admitted -= 1
            self.metrics.in_flight.set(self.admitted)
            self.metrics.queued.set(self.batcher.queued)
            if self.admitted == 0:
                self.idle.set()

    def expected(self, key: Hashable, queries: int) -> tuple[float, float] | None:
        """(seconds until a call of ``queries`` queries of ``key`` would start, seconds its batch would then take),
        from :class:`Costs`; None when ``key`` has no estimate yet. The call joins the batch of the queries of its
        key already waiting (up to ``max_batch``; those beyond wait with the rest), after the work of other keys
        waiting and what runs in its lane, shared by the lane's workers."""
        own = self.costs.of(key)
        if own is None:
            return None
        waiting, running = self.batcher.backlog()
        lane, now, max_batch = self.batcher.lane(key), time.monotonic(), self.batcher.max_batch
        workers = self.batcher.workers_of(key)
        waiting = {k: n for k, n in waiting.items() if self.batcher.lane(k) == lane}  # other lanes: other workers
        work = sum(n * (self.costs.of(k) or own) for k, n in waiting.items() if k != key)
        work += sum(max(0.0, n * (self.costs.of(k) or own) - (now - started)) for k, n, started in running
                    if self.batcher.lane(k) == lane)
        together = waiting.get(key, 0) + queries
        work += max(0, together - max_batch) * own
        return work / workers, min(together, max_batch) * own

    def check_time(self, key: Hashable, queries: int, remaining: float | None) -> None:
        """Failure(RESOURCE_EXHAUSTED, with a retry pushback) when the call would not be answered within ``remaining``
        seconds (its batches ``admit_sigmas`` standard deviations slower than their mean), or would make the batch it
        joins end after the deadline of a query already waiting in it (first come, first served: the newcomer is refused
        at once rather than a waiting query shed later), or, without a deadline, would wait longer than
        ``default_budget_ms`` to start. The pushback is how much sooner the call would have had to be answered (the work
        ahead of it must drain that long before the same call fits), and at least its own batch's time. A pushback of
        the wait alone, often a millisecond when the refusal was a waiting query's deadline, had 32 callers of bm25
        k=1000 with text (200 ms deadlines) refused about 240 times a second, the refusals taking the event loop's time
        from the answers; this pushback halves the refusals and gives 1.13x the answers in time (bench/load.py, side by
        side)."""
        expected = self.expected(key, queries)
        if expected is None:
            return
        wait, own = expected
        self.metrics.expected_wait.set(wait)
        margin = ""
        if remaining is None:
            needed, budget, what = wait, self.limits.default_budget_ms / 1000, "the budget of a call without a deadline"
        else:
            slack = self.limits.admit_sigmas * self.costs.spread(key)  # the margin, a share of the time needed
            needed, budget, what = (wait + own) * (1 + slack), remaining, "its deadline"
            margin = ", with a margin for the spread of its batches" if slack else ""
            earliest = self.batcher.earliest_deadline(key)
            if earliest is not None and earliest - time.monotonic() < budget:
                budget, what = earliest - time.monotonic(), "the deadline of a query waiting for the same batch"
        if needed <= budget:
            return
        reason = "deadline" if remaining is not None else "budget"
        self.metrics.rejected.labels(reason).inc()
        raise Failure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                      f"the server would answer in about {needed * 1000:.0f} ms ({wait * 1000:.0f} ms waiting for "
                      f"work ahead of it{margin}), after {what} ({budget * 1000:.0f} ms); retry later",
                      pushback_ms=max(1, round(max(needed - budget, own) * 1000)), reason=reason)

    def close(self) -> None:
        """Admit no more calls (a drain has begun)."""
        self.draining = True

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is admitted, at most ``timeout`` seconds; whether none is."""
        if not self.idle.is_set():
            try:
                await asyncio.wait_for(self.idle.wait(), timeout=timeout)
            except asyncio.TimeoutError:
                return False
        return True
