"""`weir serve` and `weir query`: an index served over gRPC, and a client that asks it."""

from __future__ import annotations

import sys

from service.cli.options import add_pipeline_options, pipeline_options
from weir.types import InputError


def cmd_serve(args) -> int:
    from service.server import serve

    serve(args.index, host=args.host, port=args.port, workers=args.workers, options=pipeline_options(args),
          verify_checksums=not args.no_verify)
    return 0


def cmd_query(args) -> int:
    import grpc

    from service.client import SearchClient

    text = " ".join(args.query)
    with SearchClient(args.server, timeout=args.timeout) as client:
        try:
            response = client.search(text, k=args.k, pipeline=args.pipeline, include_text=True, depth=args.depth)
        except grpc.RpcError as e:
            raise InputError(f"{args.server}: {e.code().name}: {e.details()}") from None
    for h in response.hits:
        print(f"{h.rank:>3}  {h.score:8.4f}  {h.doc_id:<12}  {h.title or h.text[:100]}")
    stage_ms = ", ".join(f"{t.stage} {t.milliseconds:.1f} ms" for t in response.timings)
    print(f"({len(response.hits)} hits from {args.server}, pipeline {response.pipeline}; {stage_ms})", file=sys.stderr)
    return 0


def add_parsers(sub) -> None:
    sv = sub.add_parser("serve", help="serve an index over gRPC (SearchService, health, reflection)")
    sv.add_argument("--index", required=True, help="index directory")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=50051, help="port (default 50051; 0 picks a free one)")
    sv.add_argument("--workers", type=int, default=8, help="request threads (default 8)")
    sv.add_argument("--no-verify", action="store_true", help="skip the start-up check of component checksums")
    add_pipeline_options(sv)
    sv.set_defaults(func=cmd_serve)

    q = sub.add_parser("query", help="ask a running weir server (gRPC client)")
    q.add_argument("query", nargs="+", help="the query text")
    q.add_argument("--server", default="127.0.0.1:50051", help="host:port of the server (default 127.0.0.1:50051)")
    q.add_argument("-k", "--k", type=int, default=10, help="hits to return (default 10)")
    q.add_argument("--pipeline", default="", help="pipeline name (default: the server's default)")
    q.add_argument("--depth", type=int, default=0, help="candidates reranked (default: the pipeline's)")
    q.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the answer")
    q.set_defaults(func=cmd_query)
