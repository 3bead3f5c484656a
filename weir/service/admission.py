"""Admission: which calls a server takes on, and how long their queries may wait. At most ``max_in_flight +
max_queued`` calls are admitted at once and the next is refused at once (RESOURCE_EXHAUSTED); none once the server
drains (UNAVAILABLE). An admitted call's queries go to the micro-batcher (:mod:`weir.service.batching`) with the
call's deadline; when it passes, or the batch gives them up, the call is DEADLINE_EXCEEDED and its work is marked
abandoned, so it stops before its next stage. The count of admitted calls feeds the metrics and tells a drain when
the server is idle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable, Sequence

import grpc

from weir.service.batching import Abandoned, Item, MicroBatcher
from weir.service.config import Limits
from weir.service.failures import Failure
from weir.service.metrics import Metrics


class Admission:
    """The admission state of one servicer: calls admitted, draining or not, idle or not."""

    def __init__(self, limits: Limits, batcher: MicroBatcher, metrics: Metrics):
        self.limits, self.batcher, self.metrics = limits, batcher, metrics
        self.admitted = 0
        self.draining = False
        self.idle = asyncio.Event()
        self.idle.set()

    def check_open(self) -> None:
        """Failure(UNAVAILABLE) once the server drains."""
        if self.draining:
            raise Failure(grpc.StatusCode.UNAVAILABLE, "the server is shutting down; try another replica")

    async def run(self, key: Hashable, texts: Sequence[str], include_text: bool, remaining: float | None) -> list:
        """Admit one call and run its ``texts`` in batches of ``key`` within ``remaining`` seconds (None: no
        deadline); their results in order. Failure(RESOURCE_EXHAUSTED) beyond the limit, Failure(DEADLINE_EXCEEDED)
        when the deadline passes first; what a batch raises is raised here."""
        limit = self.limits.max_in_flight + self.limits.max_queued
        if self.admitted >= limit:
            self.metrics.rejected.labels("overload").inc()
            raise Failure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"the server has {self.admitted} requests in flight or queued (limit {limit}); retry later")
        deadline = time.monotonic() + remaining if remaining is not None else None
        items = [Item(t, include_text, deadline) for t in texts]
        self.admitted += 1
        self.idle.clear()
        self.metrics.in_flight.set(self.admitted)
        try:
            return await asyncio.wait_for(self.batcher.submit(key, items), timeout=remaining)
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
