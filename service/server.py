"""`weir serve`: the SearchService over one index, with the standard gRPC health and reflection services.

The index is opened (and its component checksums verified) once at start-up, the default pipeline is built and warmed
before the health status turns SERVING, and every other pipeline is built on first use and then kept. Invalid requests
get INVALID_ARGUMENT with a message; a failure inside a pipeline gets INTERNAL, and the server goes on.
"""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from indexer.index_dir import Index
from ranker import registry
from ranker.options import PipelineOptions
from service.stubs import search_pb2, search_pb2_grpc
from weir.types import InputError, Query

log = logging.getLogger("weir.service")
SERVICE_NAME = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name
DEFAULT_K = 10
MAX_K = 1000
MAX_QUERY_CHARS = 4096


class SearchService(search_pb2_grpc.SearchServiceServicer):
    def __init__(self, index: Index, options: PipelineOptions | None = None, *, default_pipeline: str = "bm25",
                 max_k: int = MAX_K):
        self.index = index
        self.cache = registry.PipelineCache(index, options)
        self.default_pipeline = default_pipeline
        self.max_k = max_k
        self.cache.get(default_pipeline)([Query("warm-up", "warm up")], k=1)  # JVM, searchers, models: loaded now

    def _validate(self, request, context) -> tuple[str, int, str]:
        text = request.query.strip()
        if not text:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "query is empty")
        if len(text) > MAX_QUERY_CHARS:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"query is longer than {MAX_QUERY_CHARS} characters")
        k = request.k if request.HasField("k") else DEFAULT_K
        if not 1 <= k <= self.max_k:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"k must be between 1 and {self.max_k} (got {request.k})")
        if request.depth < 0 or request.depth > 10 * self.max_k:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"depth must be between 0 and {10 * self.max_k}")
        spec = request.pipeline.strip() or self.default_pipeline
        try:
            registry.parse(spec)
        except InputError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return text, k, spec

    def Search(self, request, context):
        text, k, spec = self._validate(request, context)
        try:
            pipeline = self.cache.get(spec)
            run = pipeline([Query("q", text)], k=k, depth=request.depth or None)
        except InputError as e:  # e.g. a pipeline whose index component is missing
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except Exception:
            log.exception("pipeline %s failed on %r", spec, text)
            context.abort(grpc.StatusCode.INTERNAL, f"pipeline {spec!r} failed; see the server log")
        hits = run.get("q", [])
        docs = self.index.documents([h.doc_id for h in hits]) if request.include_text else {}
        response = search_pb2.SearchResponse(pipeline=pipeline.name)
        for h in hits:
            doc = docs.get(h.doc_id)
            response.hits.append(search_pb2.Hit(doc_id=h.doc_id, score=h.score, rank=h.rank, stage_scores=h.stage_scores,
                                                title=doc.title if doc else "", text=doc.text if doc else ""))
        for stage, seconds in run.timings.items():
            response.timings.append(search_pb2.StageTiming(stage=stage, milliseconds=seconds * 1000))
        return response

    def Info(self, request, context):
        m = self.index.manifest
        return search_pb2.InfoResponse(
            first_stages=sorted(registry.FIRST_STAGES), rerankers=sorted(registry.RERANKERS),
            index_path=str(self.index.path), collection=m["collection"]["name"], documents=m["counts"]["documents"],
            components=list(m["components"]))


def start(index_path: str, *, host: str = "127.0.0.1", port: int = 50051, workers: int = 8,
          options: PipelineOptions | None = None, verify_checksums: bool = True) -> tuple[grpc.Server, int, health.HealthServicer]:
    """Open the index, start serving; return (server, bound port, health servicer). Raises InputError on a bad index."""
    index = Index(index_path, verify_checksums=verify_checksums)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="weir-rpc"))
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    search_pb2_grpc.add_SearchServiceServicer_to_server(SearchService(index, options), server)
    reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise InputError(f"cannot bind {host}:{port} (in use, or not an address of this machine)")
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, bound, health_servicer


def serve(index_path: str, *, host: str = "127.0.0.1", port: int = 50051, workers: int = 8,
          options: PipelineOptions | None = None, verify_checksums: bool = True) -> None:
    """Serve until SIGINT or SIGTERM, then report NOT_SERVING and drain in-flight calls (5 s grace)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # its INFO lines list the CPU builds it did not load
    server, bound, health_servicer = start(index_path, host=host, port=port, workers=workers, options=options,
                                           verify_checksums=verify_checksums)
    log.info("serving %s on %s:%d (health, reflection enabled)", index_path, host, bound)
    print(f"weir: serving {index_path} on {host}:{bound}", flush=True)
    stopped = threading.Event()

    def stop(signum, frame):
        log.info("signal %d: draining", signum)
        health_servicer.enter_graceful_shutdown()
        server.stop(grace=5).wait()
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    stopped.wait()
