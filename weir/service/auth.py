"""Bearer-token authentication for the gRPC service: a server interceptor that lets a call through only with the
metadata ``authorization: Bearer <token>`` naming one of the configured tokens (compared in constant time), and
answers UNAUTHENTICATED otherwise. The health and reflection services stay open, so that load balancers and
``grpcurl list`` work without a token."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

import grpc

OPEN = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def bearer(metadata) -> str | None:
    """The token of an ``authorization: Bearer <token>`` metadata entry, if any."""
    for key, value in metadata or ():
        if key.lower() == "authorization" and isinstance(value, str) and value[:7].lower() == "bearer ":
            return value[7:].strip()
    return None


class TokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tokens: Sequence[str], on_denied=None):
        self.tokens = [t.encode() for t in tokens]
        self.on_denied = on_denied  # called with the method name, e.g. to count the call

        async def deny(request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                "a valid bearer token is required (metadata 'authorization: Bearer <token>')")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def allowed(self, token: str | None) -> bool:
        if token is None:
            return False
        given = token.encode()
        return any(hmac.compare_digest(given, t) for t in self.tokens)

    async def intercept_service(self, continuation, details):
        if details.method.startswith(OPEN) or self.allowed(bearer(details.invocation_metadata)):
            return await continuation(details)
        if self.on_denied is not None:
            self.on_denied(details.method.rsplit("/", 1)[-1])
        return self._deny
