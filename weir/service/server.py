"""`weir serve`: the SearchService over one index on grpc.aio, with the standard health and reflection services.

- **Correct under concurrency.** Pipelines are built once (per pipeline, under a lock) and run on worker threads;
  Java is reached from one thread at a time (:mod:`weir.core.jvm`), and each query's scores do not depend on the batch it
  ran in, so concurrent callers get exactly the answers of sequential ones.
- **Micro-batching** (:mod:`weir.service.batching`): concurrent queries of one pipeline run as one batch.
- **Bounded.** At most ``max_in_flight + max_queued`` requests are admitted; the next gets RESOURCE_EXHAUSTED at
  once. Deadlines and cancellation are checked before every stage, and abandoned work stops there. Field limits
  (k, depth, query length and distinct words, pipeline names, batch sizes) are INVALID_ARGUMENT with a message that
  never repeats the input at length; only the configured pipelines are served.
- **Operable.** Loopback by default, exclusive port (a second server on a taken port exits with an error), optional
  TLS and bearer tokens (:mod:`weir.service.auth`), Prometheus metrics and JSON access logs (:mod:`weir.service.metrics`), a
  JVM heap sized to the index, and on SIGTERM: NOT_SERVING, UNAVAILABLE for new calls, in-flight calls drained.

Every failure is answered with a status code and a message, never UNKNOWN (see proto/weir/v1/search.proto).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from weir.indexer.index_dir import Index
from weir.ranker import registry
from weir.ranker.options import PipelineOptions
from weir.service.auth import TokenInterceptor
from weir.service.batching import Abandoned, Item, MicroBatcher
from weir.service.config import ServiceConfig
from weir.service.metrics import Metrics
from weir.service.stubs import search_pb2, search_pb2_grpc
from weir.core.types import InputError, Query

log = logging.getLogger("weir.service")
SERVICE_NAME = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name
DEFAULT_K = 10


def _pruning(record: dict | None):
    """The manifest's pruning record as the proto's ``Pruning`` (None for an unpruned index)."""
    if not record:
        return None
    fraction = record.get("fraction")
    rule = {"fraction": fraction} if fraction is not None else {"threshold": record["threshold"]}
    return search_pb2.Pruning(estimator=record["estimator_card"]["name"], estimator_sha256=record["card_sha256"],
                              documents_scored=record["documents_scored"], documents_pruned=record["pruned"], **rule)


class Failure(Exception):
    """An answer with a status code other than OK."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _short(text: str, limit: int = 60) -> str:
    """``text`` quoted, cut to ``limit`` characters (error messages never repeat an input at length)."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


class SearchService(search_pb2_grpc.SearchServiceServicer):
    def __init__(self, config: ServiceConfig, index: Index, options: PipelineOptions, metrics: Metrics):
        self.config, self.index, self.limits, self.metrics = config, index, config.limits, metrics
        self.cache = registry.PipelineCache(index, options)
        self.allowed = self._allowed_pipelines(options)
        self._start_admission("weir-pipeline")

    def _start_admission(self, thread_prefix: str) -> None:
        """The worker threads, the micro-batcher and the admission state that every servicer runs its batches with."""
        config = self.config
        self.executor = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix=thread_prefix)
        self.batcher = MicroBatcher(self._run_batch, self.executor, workers=config.workers,
                                    max_batch=config.batching.max_batch, max_wait=config.batching.max_wait_ms / 1000)
        self.admitted = 0
        self.draining = False
        self.idle = asyncio.Event()
        self.idle.set()

    def _allowed_pipelines(self, options: PipelineOptions) -> tuple[str, ...]:
        if self.config.pipelines is None:
            allowed = registry.supported(self.index, options)
        else:
            allowed = [">>".join(registry.parse(p)) for p in self.config.pipelines]
        default = ">>".join(registry.parse(self.config.default_pipeline))
        if default not in allowed:
            raise InputError(f"the default pipeline {default!r} is not among the served ones: {', '.join(allowed)}")
        return tuple(dict.fromkeys(allowed))

    def warm_up(self) -> None:
        """Build the default pipeline and run it once, and open the store of documents (the JVM and pyserini's
        searcher, seconds to start): searchers, models and stored text ready before SERVING, so that no caller's
        first ``include_text`` request waits for them."""
        self.cache.get(self.config.default_pipeline)([Query("warm-up", "warm up")], k=1)
        if "bm25" in self.index.components:
            self.index.documents(["weir-warm-up"])

    # --- the work of one batch, on a worker thread -----------------------------------------------------------

    def _run_batch(self, key, items: list[Item]) -> list:
        spec, k, depth = key
        pipeline = self.cache.get(spec)
        queries = [Query(f"q{i}", item.query) for i, item in enumerate(items)]
        by_id = {q.id: item for q, item in zip(queries, items)}

        def keep(qs):
            now = time.monotonic()
            return [q for q in qs if by_id[q.id].wanted(now)]

        run = pipeline(queries, k=k, depth=depth, keep=keep)
        self.metrics.batch(pipeline.name, len(items), run.timings)
        wanted = [h.doc_id for q, item in zip(queries, items) if item.include_text for h in run.get(q.id, [])]
        docs = self.index.documents(wanted) if wanted else {}
        out: list = []
        for q, item in zip(queries, items):
            if q.id not in run and not by_id[q.id].wanted(time.monotonic()):
                out.append(Abandoned())
                continue
            hits = run.get(q.id, [])
            out.append((hits, {h.doc_id: docs.get(h.doc_id) for h in hits} if item.include_text else {},
                        run.timings, len(items)))
        return out

    def _public(self, message: str) -> str:
        """``message`` without this machine's paths (the index directory, the repository)."""
        from weir.core.runtime import PACKAGE

        for path, name in ((self.index.path.resolve(), "<index>"), (self.index.path, "<index>"), (PACKAGE, "<weir>")):
            message = message.replace(str(path), name)
        return message

    # --- requests ----------------------------------------------------------------------------------------------

    def _check_query(self, text: str) -> str:
        from weir.indexer.weighting.terms import words

        text = text.strip()
        if not text:
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT, "query is empty")
        if len(text) > self.limits.max_query_chars:
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                          f"query is longer than {self.limits.max_query_chars} characters ({len(text)})")
        terms = len({w.lower() for w in words(text)})
        if terms > self.limits.max_query_terms:
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                          f"query has {terms} distinct words; at most {self.limits.max_query_terms}")
        return text

    def _check(self, request) -> tuple[str, int, int | None]:
        """(pipeline, k, depth) of a valid request; Failure(INVALID_ARGUMENT) naming the first bad field."""
        limits = self.limits
        k = request.k if request.HasField("k") else DEFAULT_K
        if not 1 <= k <= limits.max_k:
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT, f"k must be between 1 and {limits.max_k} (got {k})")
        if not 0 <= request.depth <= limits.max_depth:
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                          f"depth must be between 0 and {limits.max_depth} (got {request.depth})")
        spec = request.pipeline.strip() or self.config.default_pipeline
        if len(spec) > limits.max_pipeline_chars:
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                          f"pipeline name is longer than {limits.max_pipeline_chars} characters ({len(spec)})")
        try:
            spec = ">>".join(registry.parse(spec))
        except InputError as e:
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
        if spec not in self.allowed:
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                          f"pipeline {_short(spec)} is not served here; served: {', '.join(self.allowed)}")
        return spec, k, request.depth or None

    async def _answer(self, request, texts: list[str], context) -> tuple[str, list]:
        """Admit, validate and run ``texts`` through the request's pipeline; per text (hits, docs, timings, batch)."""
        if self.draining:
            raise Failure(grpc.StatusCode.UNAVAILABLE, "the server is shutting down; try another replica")
        spec, k, depth = self._check(request)
        texts = [self._check_query(t) for t in texts]
        limit = self.limits.max_in_flight + self.limits.max_queued
        if self.admitted >= limit:
            self.metrics.rejected.labels("overload").inc()
            raise Failure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"the server has {self.admitted} requests in flight or queued (limit {limit}); retry later")
        remaining = context.time_remaining()
        deadline = time.monotonic() + remaining if remaining is not None else None
        items = [Item(t, request.include_text, deadline) for t in texts]
        self.admitted += 1
        self.idle.clear()
        self.metrics.in_flight.set(self.admitted)
        try:
            results = await asyncio.wait_for(self.batcher.submit((spec, k, depth), items), timeout=remaining)
        except (asyncio.TimeoutError, Abandoned):
            for item in items:
                item.abandoned.set()
            raise Failure(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed; the work for it stopped") from None
        except InputError as e:  # e.g. a pipeline whose model or index component is missing
            raise Failure(grpc.StatusCode.FAILED_PRECONDITION, self._public(str(e))) from None
        finally:
            self.admitted -= 1
            self.metrics.in_flight.set(self.admitted)
            self.metrics.queued.set(self.batcher.queued)
            if self.admitted == 0:
                self.idle.set()
        return spec, results

    @staticmethod
    def _response(spec: str, result) -> search_pb2.SearchResponse:
        hits, docs, timings, batch = result
        response = search_pb2.SearchResponse(pipeline=spec, batch_size=batch)
        for h in hits:
            doc = docs.get(h.doc_id)
            response.hits.append(search_pb2.Hit(doc_id=h.doc_id, score=h.score, rank=h.rank,
                                                stage_scores=h.stage_scores, title=doc.title if doc else "",
                                                text=doc.text if doc else ""))
        for stage, seconds in timings.items():
            response.timings.append(search_pb2.StageTiming(stage=stage, milliseconds=seconds * 1000))
        return response

    async def _call(self, method: str, context, work):
        """Run ``work()``; map every failure to a status code and a message; record metrics and the access log."""
        start = time.perf_counter()
        self.metrics.started.labels("unary", SERVICE_NAME, method).inc()
        code, message, fields = grpc.StatusCode.OK, "", {}
        try:
            response, fields = await work()
            return response
        except Failure as f:
            code, message = f.code, f.message
        except asyncio.CancelledError:
            code, message = grpc.StatusCode.CANCELLED, "cancelled by the client"
            raise
        except Exception:
            log.exception("%s failed", method)
            code, message = grpc.StatusCode.INTERNAL, f"{method} failed inside the server; see its log"
        finally:
            self.metrics.call(method, code.name, time.perf_counter() - start, peer=context.peer(), **fields,
                              **({"error": message} if message else {}))
        await context.abort(code, message)

    async def Search(self, request, context):
        async def work():
            spec, results = await self._answer(request, [request.query], context)
            response = self._response(spec, results[0])
            return response, {"pipeline": spec, "hits": len(response.hits), "batch": response.batch_size}

        return await self._call("Search", context, work)

    async def BatchSearch(self, request, context):
        async def work():
            n = len(request.queries)
            if not 1 <= n <= self.limits.max_batch_queries:
                raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                              f"a batch holds 1 to {self.limits.max_batch_queries} queries (got {n})")
            spec, results = await self._answer(request, list(request.queries), context)
            return (search_pb2.BatchSearchResponse(pipeline=spec, results=[self._response(spec, r) for r in results]),
                    {"pipeline": spec, "queries": n})

        return await self._call("BatchSearch", context, work)

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
                default_pipeline=">>".join(registry.parse(self.config.default_pipeline)),
                limits=search_pb2.Limits(max_k=limits.max_k, max_depth=limits.max_depth,
                                         max_query_chars=limits.max_query_chars,
                                         max_query_terms=limits.max_query_terms,
                                         max_batch_queries=limits.max_batch_queries,
                                         max_in_flight=limits.max_in_flight, max_queued=limits.max_queued),
                pruning=_pruning(self.index.pruning)), {}

        return await self._call("Info", context, work)


def jvm_heap_for(index: Index) -> str:
    """A JVM heap for serving ``index`` when WEIR_JVM_HEAP is not set: Lucene reads the index through memory maps
    (outside the heap); the heap holds per-query state and stored documents being read, so 512 MiB plus half the
    size of the Lucene components, at most 8 GiB."""
    lucene = sum(int(c.get("bytes", 0)) for n, c in index.manifest["components"].items() if n != "dense")
    return f"{min(8192, 512 + lucene // 2**21)}m"


class Server:
    """One running service: the aio server, its health servicer, its SearchService, the bound port."""

    def __init__(self, config: ServiceConfig):
        self.config = config
        self.metrics = Metrics()
        self.server: grpc.aio.Server | None = None
        self.port: int | None = None

    async def start(self) -> int:
        """Open the index (checksums verified), warm the default pipeline, bind, serve; return the bound port.
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
        search_pb2_grpc.add_SearchServiceServicer_to_server(self.service, self.server)
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
        self.service.draining = True
        await self.health.enter_graceful_shutdown()
        grace = self.config.grace_seconds if grace is None else grace
        if not self.service.idle.is_set():
            try:
                await asyncio.wait_for(self.service.idle.wait(), timeout=grace)
            except asyncio.TimeoutError:
                log.warning("%d call(s) still running after %.0f s; stopping", self.service.admitted, grace)
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
        if self.server.server is not None and not self.server.service.draining:
            self.drain(grace=0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
