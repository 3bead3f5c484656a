"""Micro-batching: queries of concurrent requests for the same pipeline (and k, depth) run as one batch, as Triton's
dynamic batcher and Ray Serve's ``@serve.batch`` do. A batch starts when ``max_batch`` queries are waiting or when
the first has waited ``max_wait``; it runs on a worker thread, and every query gets its own hits back. Pipelines work
on batches of queries, so the model work (query encoding, reranker forward passes, LTR features) of a batch runs
together; the stages compute each query's scores independently of its batch (:func:`weir.core.types.same_length_batches`),
so a query gets the same answer alone or batched.

Written here rather than taken from a library: Ray Serve's batcher needs Ray Serve around the service, and the
asyncio primitives (futures, ``call_later``, ``run_in_executor``) make the whole of it a page.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field


@dataclass
class Item:
    """One query waiting for a batch: its text, whether its hits need text, when its caller stops waiting, and the
    relevance its hits are cut at."""

    query: str
    include_text: bool = False
    deadline: float | None = None  # time.monotonic()
    min_relevance: float | None = None  # only the hits at or above it (a calibrated pipeline's)
    abandoned: threading.Event = field(default_factory=threading.Event)
    enqueued: float = field(default_factory=time.monotonic)

    def wanted(self, now: float) -> bool:
        return not self.abandoned.is_set() and (self.deadline is None or now < self.deadline)


class Abandoned(Exception):
    """A query's caller went away or its deadline passed before its batch finished: its work stopped."""


class Shed(Exception):
    """A query taken off the queue unrun: its batch, by the server's estimate, would finish after its deadline."""

    def __init__(self, expected: float, remaining: float):
        super().__init__(f"its batch would take about {expected * 1000:.0f} ms and its deadline is "
                         f"{remaining * 1000:.0f} ms away")
        self.expected, self.remaining = expected, remaining


# run(key, items) -> one result (or exception) per item, on a worker thread
RunBatch = Callable[[Hashable, list[Item]], Sequence[object]]
# on_start(key, items, now) as a batch starts; on_done(key, queries answered (all when none), seconds) when it has
# finished;
# cost(key) -> the expected seconds a query of key takes in a batch (None: no estimate)
OnStart = Callable[[Hashable, list[Item], float], None]
OnDone = Callable[[Hashable, int, float], None]
Cost = Callable[[Hashable], "float | None"]


class MicroBatcher:
    """Batches of at most ``max_batch`` queries per key, started on at most ``workers`` threads at once (per lane:
    ``lane(key)`` names a key's lane, ``lanes`` the workers of each lane other than the default one): a key's
    queries are ready when ``max_batch`` of them wait or the first has waited ``max_wait``; a ready batch starts as
    soon as a worker is free, taking every query of its key waiting by then (up to ``max_batch``), so that under
    load batches grow instead of queueing one by one."""

    def __init__(self, run: RunBatch, executor: Executor, *, workers: int, max_batch: int = 16,
                 max_wait: float = 0.002, on_start: OnStart | None = None, on_done: OnDone | None = None,
                 cost: Cost | None = None, lanes: dict[str, int] | None = None,
                 lane: Callable[[Hashable], str] | None = None):
        self.run, self.executor, self.workers = run, executor, workers
        self.lanes = {"": workers, **(lanes or {})}  # workers per lane; "" the default lane
        self.lane = lane or (lambda key: "")
        self.max_batch, self.max_wait = max_batch, max_wait
        self.on_start, self.on_done, self.cost = on_start, on_done, cost
        self._pending: dict[Hashable, list[tuple[Item, asyncio.Future]]] = {}
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._ready: dict[Hashable, None] = {}  # keys whose queries may start, oldest first
        self._running: dict[int, tuple[Hashable, int, float]] = {}  # batch -> (key, queries, started)

    @property
    def running(self) -> int:
        """Batches running."""
        return len(self._running)

    def _running_in(self, lane: str) -> int:
        return sum(self.lane(key) == lane for key, _, _ in self._running.values())

    @property
    def queued(self) -> int:
        return sum(len(p) for p in self._pending.values())

    def backlog(self) -> tuple[dict[Hashable, int], list[tuple[Hashable, int, float]]]:
        """What is waiting (queries per key) and what runs ((key, queries, started) per batch)."""
        return {key: len(p) for key, p in self._pending.items() if p}, list(self._running.values())

    def earliest_deadline(self, key: Hashable) -> float | None:
        """The nearest deadline of the queries of ``key`` waiting (None: none waits with one)."""
        deadlines = [item.deadline for item, future in self._pending.get(key, ()) if item.deadline is not None
                     and not future.done()]
        return min(deadlines, default=None)

    async def submit(self, key: Hashable, items: Sequence[Item]) -> list[object]:
        """The results of ``items`` (in order), each run in a batch with other queries of the same ``key``. An
        exception a batch raised is raised here; cancelling the caller marks its items abandoned."""
        loop = asyncio.get_running_loop()
        futures = []
        pending = self._pending.setdefault(key, [])
        for item in items:
            future = loop.create_future()
            pending.append((item, future))
            futures.append(future)
        if len(pending) >= self.max_batch:
            self._make_ready(key)
        elif key not in self._timers and key not in self._ready:
            self._timers[key] = loop.call_later(self.max_wait, self._make_ready, key)
        try:
            return list(await asyncio.gather(*futures))
        except BaseException:
            for item in items:
                item.abandoned.set()
            raise

    def _make_ready(self, key: Hashable) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._ready[key] = None
        self._dispatch()

    def workers_of(self, key: Hashable) -> int:
        """The workers of ``key``'s lane."""
        return self.lanes[self.lane(key)]

    def _free(self) -> Hashable | None:
        """The oldest ready key whose lane has a free worker (None: none)."""
        for key in self._ready:
            lane = self.lane(key)
            if self._running_in(lane) < self.lanes[lane]:
                return key
        return None

    def _dispatch(self) -> None:
        """Start ready batches while their lanes have free workers."""
        while (key := self._free()) is not None:
            pending = self._pending.get(key, [])
            batch, pending[:] = pending[:self.max_batch], pending[self.max_batch:]
            if not pending:
                del self._ready[key]
                self._pending.pop(key, None)
            now = time.monotonic()
            for item, future in batch:
                if not future.done() and not item.wanted(now):  # the caller has gone, or its deadline passed
                    future.set_exception(Abandoned())
            batch = self._shed([(item, future) for item, future in batch if not future.done()], key, now)
            if batch:
                self._start(key, batch)

    def _shed(self, batch: list[tuple[Item, asyncio.Future]], key: Hashable, now: float) -> list:
        """``batch`` without the queries that, by ``cost``, it would answer after their deadline (each told
        :class:`Shed`): the most queries whose deadlines all fall after the batch's expected end, so that a batch is
        what the server can still do in time, not work for answers nobody waits for."""
        per_query = self.cost(key) if self.cost is not None else None
        if per_query is None:
            return batch
        left = sorted(((item.deadline - now if item.deadline is not None else float("inf")), n)
                      for n, (item, _) in enumerate(batch))[::-1]  # the most time left first
        keep = 0
        while keep < len(left) and left[keep][0] >= per_query * (keep + 1):
            keep += 1
        kept = {n for _, n in left[:keep]}
        for n, (item, future) in enumerate(batch):
            if n not in kept:
                future.set_exception(Shed(per_query * keep if keep else per_query, item.deadline - now))
        return [pair for n, pair in enumerate(batch) if n in kept]

    def _start(self, key: Hashable, batch: list[tuple[Item, asyncio.Future]]) -> None:
        loop = asyncio.get_running_loop()
        items, started = [item for item, _ in batch], time.monotonic()
        if self.on_start is not None:
            self.on_start(key, items, started)
        work = loop.run_in_executor(self.executor, self.run, key, items)
        self._running[id(work)] = (key, len(items), started)

        def deliver(done: asyncio.Future) -> None:
            del self._running[id(work)]
            error = done.exception()
            results = None if error is not None else done.result()
            answered = 0 if results is None else sum(not isinstance(r, BaseException) for r in results)
            if self.on_done is not None and results is not None:
                # a batch whose callers all left stopped early: its time shared by all its queries, a lower bound
                self.on_done(key, answered or len(items), time.monotonic() - started)
            for i, (_, future) in enumerate(batch):
                if future.done():
                    continue
                if error is not None:
                    future.set_exception(error)
                elif isinstance(results[i], BaseException):
                    future.set_exception(results[i])
                else:
                    future.set_result(results[i])
            self._dispatch()

        work.add_done_callback(deliver)
