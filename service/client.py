"""A Python client of the weir SearchService (and of the standard health service)."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.stubs import search_pb2, search_pb2_grpc


class SearchClient:
    """``SearchClient("127.0.0.1:50051").search("stem cells", k=5)``; use as a context manager to close it."""

    def __init__(self, target: str, *, timeout: float = 30.0):
        self.channel = grpc.insecure_channel(target)
        self.stub = search_pb2_grpc.SearchServiceStub(self.channel)
        self.health_stub = health_pb2_grpc.HealthStub(self.channel)
        self.timeout = timeout

    def search(self, query: str, k: int | None = 10, pipeline: str = "", *, include_text: bool = False,
               depth: int = 0) -> search_pb2.SearchResponse:
        request = search_pb2.SearchRequest(query=query, k=k, pipeline=pipeline, include_text=include_text, depth=depth)
        return self.stub.Search(request, timeout=self.timeout)

    def info(self) -> search_pb2.InfoResponse:
        return self.stub.Info(search_pb2.InfoRequest(), timeout=self.timeout)

    def health(self, service: str = "") -> str:
        """The serving status name: SERVING, NOT_SERVING, SERVICE_UNKNOWN or UNKNOWN."""
        response = self.health_stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=self.timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def wait_ready(self, timeout: float = 120.0) -> None:
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> SearchClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
