"""What the service tells an operator: Prometheus metrics (prometheus-client) with the gRPC conventions of
go-grpc-prometheus / py-grpc-prometheus (``grpc_server_started_total``, ``grpc_server_handled_total`` by method and
code, ``grpc_server_handling_seconds``), weir's own per-pipeline and per-stage latency, batch sizes and queue depth,
and one structured (JSON) access-log line per call."""

from __future__ import annotations

import json
import logging
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

SERVICE = "weir.v1.SearchService"
LATENCY_BUCKETS = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)
# a refusal should take a millisecond or two; the buckets tell 10 ms (the promise) from 5 and 20
DECISION_BUCKETS = (.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2.5, 5, 10, 30)
OUTCOMES = ("ok: answered; refusals: overload (in-flight and queue limit), deadline (could not be answered in time), "
            "budget (no deadline, a longer wait than the default budget), shed (taken off the queue unrun), "
            "expired (admitted, then its deadline passed), invalid, unavailable (draining, a shard down), "
            "precondition (a model or component missing), cancelled, failed (inside the server)")
access_log = logging.getLogger("weir.access")


class Metrics:
    """The service's metrics, in a registry of their own (several servers may live in one process)."""

    def __init__(self):
        self.registry = r = CollectorRegistry()
        labels = ("grpc_type", "grpc_service", "grpc_method")
        self.started = Counter("grpc_server_started_total", "RPCs started on the server.", labels, registry=r)
        self.handled = Counter("grpc_server_handled_total", "RPCs completed on the server, by status code.",
                               labels + ("grpc_code",), registry=r)
        self.handling = Histogram("grpc_server_handling_seconds", "Response latency of RPCs handled by the server.",
                                  labels, buckets=LATENCY_BUCKETS, registry=r)
        self.pipeline = Histogram("weir_pipeline_seconds", "Wall time of a pipeline batch.", ("pipeline",),
                                  buckets=LATENCY_BUCKETS, registry=r)
        self.stage = Histogram("weir_stage_seconds", "Wall time of one stage of a pipeline batch.",
                               ("pipeline", "stage"), buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("weir_batch_size", "Queries run together in one pipeline batch.", ("pipeline",),
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=r)
        self.in_flight = Gauge("weir_requests_in_flight", "Requests admitted and not yet answered.", registry=r)
        self.queued = Gauge("weir_requests_queued", "Queries waiting for a pipeline batch to start.", registry=r)
        self.rejected = Counter("weir_requests_rejected_total", "Requests refused at admission, by reason: "
                                "overload (the in-flight and queue limit), deadline (it could not be answered in "
                                "time), budget (no deadline, and a longer wait than the default budget), shed "
                                "(taken off the queue: its batch would have ended after its deadline).",
                                ("reason",), registry=r)
        self.queue_delay = Histogram("weir_queue_seconds", "How long a query waited for its batch to start.",
                                     ("pipeline",), buckets=LATENCY_BUCKETS, registry=r)
        self.decision = Histogram("weir_call_seconds", "From a call's arrival at its handler to its answer or "
                                  "refusal, by method, pipeline (\"-\": none served named) and outcome. " + OUTCOMES,
                                  ("method", "pipeline", "outcome"), buckets=DECISION_BUCKETS, registry=r)
        self.replicas = Gauge("weir_replicas_running", "A sharded server's deployments: replicas running, as Ray "
                              "Serve's controller reports them.", ("deployment",), registry=r)
        self.recovery = Histogram("weir_replica_recovery_seconds", "From a sharded server's first sight of a "
                                  "deployment with fewer replicas than asked to its sight of all of them again.",
                                  ("deployment",), buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300), registry=r)
        self.expected_wait = Gauge("weir_expected_wait_seconds", "The wait admission expected for the last call "
                                   "it estimated: the work ahead, shared by the workers.", registry=r)

    def serve_http(self, host: str, port: int) -> None:
        """Expose the metrics at ``http://host:port/metrics``."""
        start_http_server(port, addr=host, registry=self.registry)

    def call(self, method: str, code: str, seconds: float, **fields) -> None:
        """Record one finished call (and log it)."""
        self.handled.labels("unary", SERVICE, method, code).inc()
        self.handling.labels("unary", SERVICE, method).observe(seconds)
        access_log.info(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "method": method, "code": code,
                                    "ms": round(seconds * 1000, 3), **fields}, ensure_ascii=False))

    def decided(self, method: str, pipeline: str, outcome: str, seconds: float) -> None:
        """Record how long one call took from its arrival to its answer (``ok``) or refusal (its reason)."""
        self.decision.labels(method, pipeline, outcome).observe(seconds)

    def batch(self, pipeline: str, size: int, timings: dict[str, float]) -> None:
        """Record one pipeline batch."""
        self.batch_size.labels(pipeline).observe(size)
        self.pipeline.labels(pipeline).observe(sum(timings.values()))
        for stage, seconds in timings.items():
            self.stage.labels(pipeline, stage).observe(seconds)
