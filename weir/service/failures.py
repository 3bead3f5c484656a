"""What a caller is told when a call fails: :class:`Failure`, a gRPC status code other than OK with its message, and
:func:`public`, a message without this machine's paths. The servicers map every failure to one of these (never
UNKNOWN, see proto/weir/v1/search.proto)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import grpc

from weir.core.runtime import PACKAGE


# why a call was not answered OK, for the metrics, when its status code alone does not say (RESOURCE_EXHAUSTED has four)
REASONS = {grpc.StatusCode.INVALID_ARGUMENT: "invalid", grpc.StatusCode.UNAVAILABLE: "unavailable",
           grpc.StatusCode.DEADLINE_EXCEEDED: "expired", grpc.StatusCode.FAILED_PRECONDITION: "precondition",
           grpc.StatusCode.RESOURCE_EXHAUSTED: "overload", grpc.StatusCode.CANCELLED: "cancelled",
           grpc.StatusCode.UNAUTHENTICATED: "unauthenticated", grpc.StatusCode.INTERNAL: "failed"}


class Failure(Exception):
    """An answer with a status code other than OK; ``pushback_ms``: when to retry, sent to the caller as gRPC's
    ``grpc-retry-pushback-ms`` trailing metadata (a server's pushback, gRFC A6); ``reason``: why, in a word, for
    the metrics (default: the code's, :data:`REASONS`)."""

    def __init__(self, code: grpc.StatusCode, message: str, *, pushback_ms: int | None = None,
                 reason: str | None = None):
        super().__init__(message)
        self.code, self.message, self.pushback_ms = code, message, pushback_ms
        self.reason = reason or REASONS.get(code, code.name.lower())

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return () if self.pushback_ms is None else (("grpc-retry-pushback-ms", str(int(self.pushback_ms))),)


def public(message: str, directories: Iterable[tuple[Path, str]]) -> str:
    """``message`` without this machine's paths: each of ``directories`` (as given and resolved) shown as its name
    (``<index>``, ``<shard>``), weir's package directory as ``<weir>``."""
    for path, name in directories:
        for spelling in (path.resolve(), path):
            message = message.replace(str(spelling), name)
    return message.replace(str(PACKAGE), "<weir>")
