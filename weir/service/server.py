"""`weir serve`: the SearchService over one index on grpc.aio, with the standard health and reflection services.

- **Correct under concurrency.** Pipelines are built once (per pipeline, under a lock) and run on worker threads;
  Java is reached from one thread at a time (:mod:`weir.core.jvm`), and each query's scores do not depend on the
  batch it ran in, so concurrent callers get exactly the answers of sequential ones.
- **Micro-batching** (:mod:`weir.service.batching`): concurrent queries of one pipeline run as one batch.
- **Bounded** (:mod:`weir.service.admission`). At most ``max_in_flight + max_queued`` requests are admitted; the
  next gets RESOURCE_EXHAUSTED at once, and so does a call that, by the server's own recent batches, would not be
  answered before its deadline (with ``grpc-retry-pushback-ms``). Deadlines and cancellation are checked before
  every stage, and abandoned work stops there. Field limits (:mod:`weir.service.validation`: k, depth, query length
  and distinct words, pipeline names, batch sizes) are INVALID_ARGUMENT with a message that never repeats the input
  at length; only the configured pipelines are served.
- **Operable.** Loopback by default, exclusive port (a second server on a taken port exits with an error), optional
  TLS and bearer tokens (:mod:`weir.service.auth`), Prometheus metrics and JSON access logs
  (:mod:`weir.service.metrics`), a JVM heap sized to the index, and on SIGTERM: NOT_SERVING, UNAVAILABLE for new
  calls, in-flight calls drained.

Every failure is answered with a status code and a message that names none of this machine's paths, never UNKNOWN
(:mod:`weir.service.failures`, proto/weir/v1/search.proto).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from weir.core.types import InputError, Query
from weir.indexer.index_dir import Index
from weir.ranker import registry
from weir.ranker.calibration import cut
from weir.ranker.options import PipelineOptions
from weir.service.admission import Admission, Costs
from weir.service.answers import NO_HITS, Answer, Malformed, add_to_server, batch_response, responses
from weir.service.auth import TokenInterceptor
from weir.service.batching import Abandoned, Item, MicroBatcher
from weir.service.config import ServiceConfig
from weir.service.failures import Failure, public
from weir.service.metrics import Metrics
from weir.service.process import freeze_long_lived, jvm_heap_for
from weir.service.stubs import search_pb2, search_pb2_grpc
from weir.service.validation import (canonical, check_batch, check_min_relevance, check_query, check_request,
                                     served_pipeline, served_pipelines)

log = logging.getLogger("weir.service")
SERVICE_NAME = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name


def _pruning(record: dict | None):
    """The manifest's pruning record as the proto's ``Pruning`` (None for an unpruned index)."""
    if not record:
        return None
    fraction = record.get("fraction")
    rule = {"fraction": fraction} if fraction is not None else {"threshold": record["threshold"]}
    return search_pb2.Pruning(estimator=record["estimator_card"]["name"], estimator_sha256=record["card_sha256"],
                              documents_scored=record["documents_scored"], documents_pruned=record["pruned"], **rule)


class SearchService(search_pb2_grpc.SearchServiceServicer):
    """The SearchService over one index: each call checked, admitted, and run in micro-batches of its pipeline."""

    def __init__(self, config: ServiceConfig, index: Index, options: PipelineOptions, metrics: Metrics):
        self.index, self.options = index, options
        self.cache = registry.PipelineCache(index, options)
        self.directories = [(index.path, "<index>")]  # hidden from error messages
        allowed = served_pipelines(config.pipelines, config.default_pipeline,
                                   lambda: registry.supported(index, options))
        self.calibrated = tuple(spec for spec in allowed if registry.calibration(spec, index, options) is not None)
        self._start(config, metrics, allowed, "weir-pipeline")

    def _start(self, config: ServiceConfig, metrics: Metrics, allowed: tuple[str, ...], thread_prefix: str) -> None:
        """What every servicer runs its batches with: the worker threads, the micro-batcher, the admission."""
        self.config, self.limits, self.metrics, self.allowed = config, config.limits, metrics, allowed
        batching = config.batching
        self.executor = ThreadPoolExecutor(max_workers=config.workers + batching.expensive_workers,
                                           thread_name_prefix=thread_prefix)
        costs = Costs()
        self._cold: dict = {}  # batch key -> batches of it still running that built their pipeline
        self._cold_lock = threading.Lock()
        self.batcher = MicroBatcher(self._run_batch, self.executor, workers=config.workers,
                                    max_batch=batching.max_batch, max_wait=batching.max_wait_ms / 1000,
                                    on_start=self._started, on_done=functools.partial(self._observe, costs),
                                    cost=costs.of,
                                    lanes={"expensive": batching.expensive_workers},
                                    lane=functools.cache(lambda key: batching.lane(key[0])))
        self.admission = Admission(config.limits, self.batcher, metrics, costs)

    def _started(self, key, items: list[Item], now: float) -> None:
        for item in items:
            self.metrics.queue_delay.labels(key[0]).observe(now - item.enqueued)

    def _observe(self, costs: Costs, key, queries: int, seconds: float) -> None:
        """A finished batch's time, to the admission's cost estimate, unless the batch built its pipeline (seconds of
        loading models, which would make every call of that pipeline look too slow to admit for a while)."""
        with self._cold_lock:
            if self._cold.get(key):
                self._cold[key] -= 1
                return
        costs.observe(key, queries, seconds)

    def warm_specs(self) -> tuple[str, ...]:
        """The pipelines built and run once before SERVING (``warm``): every served one, or the default alone."""
        return self.allowed if self.config.warm == "served" else (canonical(self.config.default_pipeline),)

    def warm_up(self) -> None:
        """Build each pipeline of :meth:`warm_specs` and run it once, and open the store of documents (the JVM and
        pyserini's searcher, seconds to start): searchers, models and stored text ready before SERVING, so that no
        caller's first call of a served pipeline waits seconds for its models (and, with a deadline, fails)."""
        for spec in self.warm_specs():
            started = time.perf_counter()
            self.cache.get(spec)([Query("warm-up", "warm up")], k=1)
            log.info("warmed %s in %.2f s", spec, time.perf_counter() - started)
        if "bm25" in self.index.components:
            self.index.documents(["weir-warm-up"])
        freeze_long_lived()

    # --- the work of one batch, on a worker thread -----------------------------------------------------------

    def _run_batch(self, key, items: list[Item]) -> list:
        spec, k, depth, explain = key
        cold = spec not in self.cache
        if cold:  # built by this batch (``warm = "default"``): its time is not the pipeline's cost
            with self._cold_lock:
                self._cold[key] = self._cold.get(key, 0) + 1
        pipeline = self.cache.get(spec)
        if cold:
            freeze_long_lived()  # its models, for the server's lifetime
        queries = [Query(f"q{i}", item.query) for i, item in enumerate(items)]
        by_id = {q.id: item for q, item in zip(queries, items)}

        def keep(qs):
            now = time.monotonic()
            return [q for q in qs if by_id[q.id].wanted(now)]

        run = pipeline(queries, k=k, depth=depth, keep=keep, explain=explain)
        self.metrics.batch(pipeline.name, len(items), run.timings)
        wanted = [d for q, item in zip(queries, items) if item.include_text and q.id in run
                  for d in run.ranking(q.id).doc_ids()]
        docs = self.index.documents(wanted) if wanted else {}
        out: list = []
        for q, item in zip(queries, items):
            if q.id not in run and not by_id[q.id].wanted(time.monotonic()):
                out.append(Abandoned())
                continue
            hits = run.ranking(q.id) if q.id in run else NO_HITS
            if item.min_relevance is not None:
                hits = cut(hits, item.min_relevance)
            out.append(Answer.of(item, hits, docs, run.timings, len(items)))
        return responses(spec, out)

    # --- requests ----------------------------------------------------------------------------------------------

    def _check(self, request) -> tuple[str, int, int | None]:
        """(pipeline, k, depth) of a valid request; Failure(INVALID_ARGUMENT) naming the first bad field."""
        return check_request(request, self.limits, self.config.default_pipeline, self.allowed)

    async def _answer(self, request, texts: list[str], context) -> tuple[str, list[Answer]]:
        """Admit, validate and run ``texts`` through the request's pipeline; an answer per text."""
        self.admission.check_open()
        spec, k, depth = self._check(request)
        cutoff = check_min_relevance(request, spec, self.calibrated)
        explain = self._check_explain(request)
        texts = [check_query(t, self.limits) for t in texts]
        try:
            results = await self.admission.run((spec, k, depth, explain), texts, request.include_text,
                                               context.time_remaining(), cutoff)
        except InputError as e:  # e.g. a pipeline whose model or index component is missing
            raise Failure(grpc.StatusCode.FAILED_PRECONDITION, public(str(e), self.directories)) from None
        return spec, results

    def _check_explain(self, request) -> bool:
        """Whether the request asks to explain its hits (every pipeline of a server over one index can)."""
        return bool(request.explain)

    def _pipeline_of(self, request) -> str:
        """The served pipeline a request asks for (the default when it names none), as the metrics label it: "-" for
        one that is not served or not valid, and for requests that name none (Info, bytes that are no request), so
        that callers' own text never makes a label."""
        if isinstance(request, Malformed) or not hasattr(request, "pipeline"):
            return "-"
        try:
            return served_pipeline(request, self.limits, self.config.default_pipeline, self.allowed)
        except Failure:
            return "-"

    async def _call(self, method: str, request, context, work):
        """Run ``work()`` (for bytes that are no request: the refusal of them); map every failure to a status code
        and a message; record metrics (the time from the call's arrival at its handler to its answer or refusal, by
        pipeline and outcome) and the access log."""
        if isinstance(request, Malformed):
            work = request.refuse
        start = time.perf_counter()
        self.metrics.started.labels("unary", SERVICE_NAME, method).inc()
        code, message, fields, trailing, outcome = grpc.StatusCode.OK, "", {}, (), "ok"
        try:
            response, fields = await work()
            return response
        except Failure as f:
            code, message, trailing, outcome = f.code, f.message, f.trailing_metadata(), f.reason
        except asyncio.CancelledError:  # the caller went away, or its deadline passed (gRPC cancels the handler)
            remaining = context.time_remaining()
            expired = remaining is not None and remaining <= 0.001
            code, message = grpc.StatusCode.CANCELLED, "the deadline passed" if expired else "cancelled by the client"
            outcome = "expired" if expired else "cancelled"
            raise
        except Exception:
            log.exception("%s failed", method)
            code, message, outcome = (grpc.StatusCode.INTERNAL, f"{method} failed inside the server; see its log",
                                      "failed")
        finally:
            seconds = time.perf_counter() - start
            self.metrics.decided(method, fields.get("pipeline") or self._pipeline_of(request), outcome, seconds)
            self.metrics.call(method, code.name, seconds, peer=context.peer(), **fields,
                              **({"error": message, "reason": outcome} if message else {}))
        await context.abort(code, message, trailing_metadata=trailing)

    async def Search(self, request, context):
        async def work():
            spec, results = await self._answer(request, [request.query], context)
            answer = results[0]
            return answer.response, {"pipeline": spec, "hits": len(answer.hits), "batch": answer.batch}

        return await self._call("Search", request, context, work)

    async def BatchSearch(self, request, context):
        async def work():
            n = len(request.queries)
            check_batch(n, self.limits)
            spec, results = await self._answer(request, list(request.queries), context)
            return batch_response(spec, results), {"pipeline": spec, "queries": n}

        return await self._call("BatchSearch", request, context, work)

    def _replicas(self) -> list:
        """What Info says of the server's replicas (a server over one index has none to tell of)."""
        return []

    def _documents(self) -> int:
        """The number of documents served (what Info reports)."""
        return self.index.manifest["counts"]["documents"]

    async def Info(self, request, context):
        async def work():
            m, limits = self.index.manifest, self.limits
            return search_pb2.InfoResponse(
                first_stages=sorted(registry.FIRST_STAGES), rerankers=sorted(registry.RERANKERS),
                collection=m["collection"]["name"], documents=self._documents(),
                components=list(m["components"]), pipelines=list(self.allowed),
                default_pipeline=canonical(self.config.default_pipeline),
                limits=search_pb2.Limits(max_k=limits.max_k, max_depth=limits.max_depth,
                                         max_query_chars=limits.max_query_chars,
                                         max_query_terms=limits.max_query_terms,
                                         max_batch_queries=limits.max_batch_queries,
                                         max_in_flight=limits.max_in_flight, max_queued=limits.max_queued),
                pruning=_pruning(self.index.pruning),
                models=[search_pb2.PipelineModels(pipeline=p, models=registry.reranker_models(p, self.index,
                                                                                              self.options))
                        for p in self.allowed if len(registry.parse(p)) > 1],
                replicas=self._replicas(), calibrated_pipelines=list(self.calibrated)), {}

        return await self._call("Info", request, context, work)


class Server:
    """One running service: the aio server, its health servicer, its SearchService, the bound port."""

    def __init__(self, config: ServiceConfig):
        self.config = config
        self.metrics = Metrics()
        self.server: grpc.aio.Server | None = None
        self.port: int | None = None

    async def start(self) -> int:
        """Open the index (checksums verified), warm the pipelines (``warm``), bind, serve; return the bound port.
        Raises InputError for a bad index, configuration, address or taken port."""
        config = self.config
        self.service = await self.open_service()
        await asyncio.get_running_loop().run_in_executor(self.service.executor, self.service.warm_up)
        interceptors = [TokenInterceptor(config.tokens(), self._denied)] if config.token_file else []
        self.server = grpc.aio.server(interceptors=interceptors, options=[("grpc.so_reuseport", 0)])
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        add_to_server(self.service, self.server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        self.port = self._bind()
        await self.server.start()
        if config.metrics_port is not None:
            self.metrics.serve_http(config.host, config.metrics_port)
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        return self.port

    async def open_service(self) -> SearchService:
        """The servicer this server runs: a :class:`SearchService` over the configured index (a sharded server
        gives one over its shards, :mod:`weir.service.sharded`)."""
        config = self.config
        index = Index(config.index, verify_checksums=config.verify_checksums)
        os.environ.setdefault("WEIR_JVM_HEAP", jvm_heap_for(index))
        options = PipelineOptions.from_mapping(config.options)
        return SearchService(config, index, options, self.metrics)

    def _denied(self, method: str) -> None:
        self.metrics.handled.labels("unary", SERVICE_NAME, method, "UNAUTHENTICATED").inc()

    def _bind(self) -> int:
        config = self.config
        address = f"{config.host}:{config.port}"
        try:
            if config.tls is not None:
                cert, key, client_ca = config.tls.read()
                credentials = grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                                          require_client_auth=client_ca is not None)
                port = self.server.add_secure_port(address, credentials)
            else:
                port = self.server.add_insecure_port(address)
        except RuntimeError:
            port = 0
        if port == 0:
            raise InputError(f"cannot listen on {address}: the port is taken, or the address is not one of this "
                             "machine's")
        return port

    async def drain(self, grace: float | None = None) -> None:
        """Stop taking calls (NOT_SERVING; new calls: UNAVAILABLE), let those in flight finish (at most ``grace``
        seconds), then stop."""
        admission = self.service.admission
        admission.close()
        await self.health.enter_graceful_shutdown()
        grace = self.config.grace_seconds if grace is None else grace
        if not await admission.wait_idle(grace):
            log.warning("%d call(s) still running after %.0f s; stopping", admission.admitted, grace)
        await self.server.stop(grace=1.0)
        self.service.executor.shutdown(wait=False, cancel_futures=True)


def serve(config: ServiceConfig, server: Server | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then drain (see :meth:`Server.drain`); ``server``: a server of another kind
    over ``config`` (default: a :class:`Server` over its index)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # its INFO lines list the CPU builds it did not load
    logging.getLogger("weir.access").setLevel(logging.INFO if config.access_log else logging.WARNING)

    async def main() -> None:
        nonlocal server
        server = server or Server(config)
        port = await server.start()
        served = config.index or ",".join(config.shards or ())
        log.info("serving %s on %s:%d (health, reflection%s%s)",
                 ",".join(os.path.basename(p.rstrip("/")) for p in served.split(",")),
                 config.host, port, ", TLS" if config.tls else "", ", tokens" if config.token_file else "")
        print(f"weir: serving {served} on {config.host}:{port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("draining")
        await server.drain()

    asyncio.run(main())


class BackgroundServer:
    """A service running on an event loop of its own in a background thread (tests, benchmarks):
    ``with BackgroundServer(config) as server: SearchClient(f"127.0.0.1:{server.port}")``."""

    def __init__(self, config: ServiceConfig, server: Server | None = None):
        self.server = server or Server(config)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="weir-server", daemon=True)

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result()
        return self

    def drain(self, grace: float | None = None) -> None:
        asyncio.run_coroutine_threadsafe(self.server.drain(grace), self.loop).result()

    def __exit__(self, *exc) -> None:
        if self.server.server is not None and not self.server.service.admission.draining:
            self.drain(grace=0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
