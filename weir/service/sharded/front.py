"""The front of sharded serving: the single server's servicer (:class:`weir.service.server.SearchService`:
validation, limits, admission, deadlines, micro-batching, every status code) whose batches scatter the first stage
to every shard deployment, merge the shards' top k by (score, doc id) into the whole collection's top k, fuse there
what a fusion fuses, rerank once in the reranker deployments, and read the stored text from the shards that hold
it."""

from __future__ import annotations

import logging
import math
import time

import grpc

from weir.core.types import Document, Hit, InputError, Run
from weir.ranker import registry
from weir.service.answers import Answer, responses
from weir.service.batching import Abandoned, Item
from weir.service.config import ServiceConfig
from weir.service.failures import Failure
from weir.service.metrics import Metrics
from weir.service.process import freeze_long_lived
from weir.service.server import SearchService
from weir.service.sharded.pipelines import Plan, unsupported_reason
from weir.service.sharded.replicas import ReplicaWatch
from weir.service.stubs import search_pb2

log = logging.getLogger("weir.service.sharded")
RETRY_WAIT = 1.0  # seconds a call asked again (its replica failed) waits for another replica
WATCH_SLICE = 0.25  # seconds between looks at the replicas while a call to a deployment is waited for


def _wanted(items: list[Item], rows: list[int]) -> list[int]:
    """Those of ``rows`` whose queries are still wanted (their callers there, their deadlines ahead)."""
    now = time.monotonic()
    return [i for i in rows if items[i].wanted(now)]


class ShardedSearchService(SearchService):
    """:class:`SearchService` whose batches run over shard and reranker deployments (see
    :mod:`weir.service.sharded`)."""

    def __init__(self, config: ServiceConfig, plan: Plan, metrics: Metrics, searchers: list, rerankers: dict,
                 watch: ReplicaWatch | None = None):
        self.shards, self.index = plan.shards, plan.shards[0]
        self.options, self.refused, self.fusions = plan.options, plan.refused, plan.fusions
        self.searchers, self.rerankers = searchers, rerankers
        self.watch = watch  # the deployments' replicas (None: not watched; every call is sent)
        self.directories = [(shard.path, "<shard>") for shard in plan.shards]  # hidden from error messages
        self.calibrated = ()  # a calibration is fitted over one index's scores: a shard set's are not calibrated
        self._start(config, metrics, plan.served, "weir-front")

    def _check(self, request):
        try:
            return super()._check(request)
        except Failure as f:
            spec = request.pipeline.strip()
            try:
                reason = unsupported_reason(spec, self.refused) if spec else None
            except InputError:
                reason = None
            if reason:
                raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                              f"{reason}; served: {', '.join(self.allowed)}") from None
            raise f

    def _check_explain(self, request) -> bool:
        if request.explain:
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT, "a sharded server does not explain its hits (explain); "
                          "ask a server over one index")
        return False

    def warm_up(self) -> None:
        for spec in self.warm_specs():  # through the deployments: each shard's searcher, each reranker's replica
            self._run_batch((spec, 1, None, False), [Item("warm up")])
        freeze_long_lived()

    # --- one batch, on a worker thread of the front --------------------------------------------------------------

    @staticmethod
    def _timeout(items: list[Item]) -> float | None:
        deadlines = [i.deadline for i in items]
        if any(d is None for d in deadlines):
            return None
        return max(0.001, max(deadlines) - time.monotonic())

    def _require(self, what: str) -> None:
        """Failure(UNAVAILABLE) at once when deployment ``what`` has no replica running (:mod:`.replicas`)."""
        if self.watch is not None:
            self.watch.check(what)

    def _result(self, response, timeout: float | None, what: str, again=None, *,
                deadline_left: float | None = None):
        """The result of ``response``, a call to deployment ``what``, within ``timeout`` seconds. A replica that
        fails or dies while it answers: the call is sent once more (``again()``; Ray Serve routes it to a replica
        alive) while time is left, and waits at most RETRY_WAIT seconds for it (a deployment whose only replica died
        has none until Ray Serve has started another: its callers are told so, not kept waiting); else UNAVAILABLE
        naming the deployment. (``deadline_left``: what was left of the deadline when a retry was sent.)"""
        start = time.monotonic()
        try:
            return self._waited(response, timeout, what)
        except TimeoutError:
            if deadline_left is not None and timeout is not None and timeout < deadline_left:
                raise Failure(grpc.StatusCode.UNAVAILABLE, f"{what} failed and no replica of it answered within "
                              f"{RETRY_WAIT:g} s; try again shortly") from None  # a retry's wait, not the deadline
            raise Failure(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed; the work for it stopped") from None
        except Failure:  # the deployment lost every replica while the call waited
            raise
        except Exception as e:  # a replica that failed or died: Ray's error, logged here, not shown to callers
            left = None if timeout is None else timeout - (time.monotonic() - start)
            if again is not None and (left is None or left > 0.001):
                log.warning("%s failed (%s); asking it again", what, type(e).__name__)
                self._require(what)
                wait = RETRY_WAIT if left is None else min(left, RETRY_WAIT)
                return self._result(again(), wait, what, deadline_left=math.inf if left is None else left)
            log.error("%s failed: %s", what, e)
            raise Failure(grpc.StatusCode.UNAVAILABLE, f"{what} failed or is unavailable; try again") from None

    def _waited(self, response, timeout: float | None, what: str):
        """``response.result()`` within ``timeout`` seconds, waited for in slices of WATCH_SLICE seconds: a call held
        by Ray Serve for a deployment that has lost every replica (it waits for one to start) is given up as soon
        as the watch has seen the loss, UNAVAILABLE naming the deployment, not held until its deadline."""
        if self.watch is None:
            return response.result(timeout_s=timeout)
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            try:
                return response.result(timeout_s=WATCH_SLICE if left is None else min(left, WATCH_SLICE))
            except TimeoutError:
                try:
                    self._require(what)
                except Failure:
                    response.cancel()
                    raise

    def _observe(self, costs, key, queries: int, seconds: float) -> None:
        """As a single server's, but a batch that ran while a deployment lost or regained replicas teaches the
        admission nothing (it may have waited for a replica to start)."""
        if self.watch is not None and not self.watch.steady_since(time.monotonic() - seconds):
            return
        super()._observe(costs, key, queries, seconds)

    def _hand_on(self, names: list[str], position: int, k: int, depth: int | None) -> int:
        """How many hits stage ``position`` of ``names`` hands on, as a Pipeline does: what the next stage reranks."""
        if position == len(names) - 1:
            return k
        following = getattr(self.options, registry.RERANKERS[names[position + 1]].options).depth
        return max(k, depth or following)

    def _run_batch(self, key, items: list[Item]) -> list:
        spec, k, depth, _ = key  # explain: refused before (_check_explain)
        names = registry.parse(spec)
        timings: dict[str, float] = {}
        results: dict[int, list[tuple]] = {}  # per item still wanted, its (doc_id, score, stage_scores), best first
        owner: dict[str, int] = {}  # which shard holds each hit
        live = _wanted(items, list(range(len(items))))
        if live:
            start = time.perf_counter()
            timeout = self._timeout([items[i] for i in live])
            lists = self._first_stage(names[0], [items[i].query for i in live], self._hand_on(names, 0, k, depth),
                                      timeout, owner)
            results.update(zip(live, lists))
            timings[names[0]] = time.perf_counter() - start
        for position, name in enumerate(names[1:], start=1):  # each reranker once
            live = _wanted(items, live)
            if not live:
                break
            start = time.perf_counter()
            self._rerank(name, items, live, results, self._hand_on(names, position, k, depth), depth)
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
        live = _wanted(items, live)
        self.metrics.batch(spec, len(items), timings)
        docs = self._stored(items, live, results, owner)
        alive = set(live)
        return responses(spec, [
            Answer.of(item, [Hit(d, s, r, dict(st)) for r, (d, s, st) in enumerate(results[i], start=1)], docs,
                      timings, len(items)) if i in alive else Abandoned() for i, item in enumerate(items)])

    def _first_stage(self, first: str, texts: list[str], n: int, timeout: float | None,
                     owner: dict[str, int]) -> list[list[tuple]]:
        """Per text, the whole collection's top ``n`` of first stage ``first`` as (doc_id, score, stage_scores):
        scattered to every shard, merged by (score, doc id); a fusion fuses the merged lists."""
        if first in self.fusions:
            return self._fused(first, texts, n, timeout, owner)
        return [[(d, s, {first: s}) for d, s in hits] for hits in self._scatter(first, texts, n, timeout, owner)]

    def _rerank(self, name: str, items: list[Item], live: list[int], results: dict[int, list[tuple]], n: int,
                depth: int | None) -> None:
        """Rerank the ``results`` of the ``live`` items with reranker ``name`` (in place), each query a request of
        its own that ``@serve.batch`` batches with the requests of other batches."""
        timeout = self._timeout([items[i] for i in live])
        handle, what = self.rerankers[name], f"reranker {name}"
        self._require(what)
        requests = {i: (items[i].query, results[i], n, depth or 0) for i in live}
        calls = [(i, handle.rerank.remote(requests[i])) for i in live]
        for i, call in calls:
            results[i], _ = self._result(call, timeout, what, lambda i=i: handle.rerank.remote(requests[i]))

    def _stored(self, items: list[Item], live: list[int], results: dict[int, list[tuple]],
                owner: dict[str, int]) -> dict[str, Document]:
        """The stored documents of the hits of the ``live`` items that asked for text, each read from its shard."""
        docs: dict[str, Document] = {}
        wanted = [d for i in live if items[i].include_text for d, _, _ in results[i]]
        if wanted:
            by_shard: dict[int, list[str]] = {}
            for d in dict.fromkeys(wanted):
                by_shard.setdefault(owner[d], []).append(d)
            timeout = self._timeout([items[i] for i in live])
            for j in by_shard:
                self._require(f"shard {j}")
            calls = [(j, self.searchers[j].documents.remote(ids)) for j, ids in by_shard.items()]
            for j, call in calls:
                found = self._result(call, timeout, f"shard {j}",
                                     lambda j=j: self.searchers[j].documents.remote(by_shard[j]))
                docs.update((d, Document(d, t, x)) for d, (t, x) in found.items())
        return docs

    def _send(self, stage: str, texts: list[str], n: int) -> list:
        """Ask every shard for its top ``n`` of ``stage`` per text (the calls run while the caller sends others);
        UNAVAILABLE at once, nothing sent, when a shard has no replica running."""
        for j in range(len(self.searchers)):
            self._require(f"shard {j}")
        return [s.search.remote(stage, texts, n) for s in self.searchers]

    def _scatter(self, stage: str, texts: list[str], n: int, timeout: float | None,
                 owner: dict[str, int], calls: list | None = None) -> list[list[tuple[str, float]]]:
        """Per text, the whole collection's top ``n`` of ``stage``: every shard's top ``n`` (``calls`` already
        sent, else sent now), merged by (score, doc id); ``owner`` learns which shard holds each hit."""
        calls = calls if calls is not None else self._send(stage, texts, n)
        per_shard = [self._result(c, timeout, f"shard {j}",
                                  lambda j=j: self.searchers[j].search.remote(stage, texts, n))
                     for j, c in enumerate(calls)]
        out = []
        for row in range(len(texts)):
            merged = []
            for j, hits in enumerate(per_shard):
                merged.extend(hits[row])
                owner.update((d, j) for d, _ in hits[row])
            merged.sort(key=lambda h: (-h[1], h[0]))
            out.append(merged[:n])
        return out

    def _fused(self, name: str, texts: list[str], n: int, timeout: float | None,
               owner: dict[str, int]) -> list[list[tuple]]:
        """``hybrid`` or ``deepimpact+bm25`` over shards: each fused stage's whole-collection list (its shards'
        merged top k, to the stage's depth), fused as one index fuses them
        (:func:`weir.ranker.retrievers.hybrid.fuse_runs`, with the settings the first shard's index gives: tuned,
        from the DeepImpact card, or default)."""
        from weir.ranker.retrievers.hybrid import fuse_runs

        settings = self.fusions[name]
        depth = max(settings["depth"], n)
        sent = [self._send(stage, texts, depth) for stage in settings["stages"]]  # every stage's calls at once
        runs = []
        for stage, calls in zip(settings["stages"], sent):
            lists = self._scatter(stage, texts, depth, timeout, owner, calls)
            runs.append(Run({f"q{row}": [Hit(d, s, r, {stage: s}) for r, (d, s) in enumerate(hits, start=1)]
                             for row, hits in enumerate(lists)}))
        fused = fuse_runs(runs, method=settings["method"], weights=settings["weights"], k=settings["rrf_k"],
                          depth=n, name=name)
        return [[(h.doc_id, h.score, h.stage_scores) for h in fused.get(f"q{row}", [])] for row in range(len(texts))]

    def _documents(self) -> int:
        return sum(s.num_docs for s in self.shards)

    def _replicas(self) -> list:
        if self.watch is None:
            return []
        return [search_pb2.Replicas(deployment=r.deployment, running=r.running, target=r.target, status=r.status)
                for r in self.watch.replicas()]
