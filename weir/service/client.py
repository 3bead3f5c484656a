"""A Python client of the weir SearchService (and of the standard health service).

``SearchClient("127.0.0.1:50051").search("stem cells", k=5)``; with TLS, ``ca`` names the CA file that signed the
server's certificate (and ``cert``/``key`` the client's own, when the server asks for one); ``token`` is sent as
``authorization: Bearer <token>``. Use as a context manager to close the channel."""

from __future__ import annotations

from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from weir.service.stubs import search_pb2, search_pb2_grpc


class SearchClient:
    def __init__(self, target: str, *, timeout: float = 30.0, ca: str | None = None, cert: str | None = None,
                 key: str | None = None, token: str | None = None, server_name: str | None = None):
        if ca or cert:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=Path(ca).read_bytes() if ca else None,
                private_key=Path(key).read_bytes() if key else None,
                certificate_chain=Path(cert).read_bytes() if cert else None)
            options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
            self.channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(target)
        self.stub = search_pb2_grpc.SearchServiceStub(self.channel)
        self.health_stub = health_pb2_grpc.HealthStub(self.channel)
        self.timeout = timeout
        self.metadata = (("authorization", f"Bearer {token}"),) if token else None

    def search(self, query: str, k: int | None = 10, pipeline: str = "", *, include_text: bool = False,
               depth: int = 0, min_relevance: float | None = None, explain: bool = False,
               timeout: float | None = None) -> search_pb2.SearchResponse:
        """One query's hits; ``min_relevance``: only those at least that likely relevant (a calibrated pipeline);
        ``explain``: each hit's reasons."""
        request = search_pb2.SearchRequest(query=query, k=k, pipeline=pipeline, include_text=include_text, depth=depth,
                                           min_relevance=min_relevance, explain=explain)
        return self.stub.Search(request, timeout=timeout or self.timeout, metadata=self.metadata)

    def batch_search(self, queries: list[str], k: int | None = 10, pipeline: str = "", *, include_text: bool = False,
                     depth: int = 0, min_relevance: float | None = None, explain: bool = False,
                     timeout: float | None = None) -> search_pb2.BatchSearchResponse:
        request = search_pb2.BatchSearchRequest(queries=queries, k=k, pipeline=pipeline, include_text=include_text,
                                                depth=depth, min_relevance=min_relevance, explain=explain)
        return self.stub.BatchSearch(request, timeout=timeout or self.timeout, metadata=self.metadata)

    def info(self) -> search_pb2.InfoResponse:
        return self.stub.Info(search_pb2.InfoRequest(), timeout=self.timeout, metadata=self.metadata)

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
