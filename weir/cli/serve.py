"""`weir serve` and `weir query`: an index served over gRPC, and a client that asks it."""

from __future__ import annotations

import sys

from weir.ranker.options import PipelineOptions
from weir.cli.options import add_deprecated, add_pipeline_options, add_ray_address, option_values
from weir.core.types import InputError


def cmd_serve(args) -> int:
    from weir.service.config import ServiceConfig
    from weir.service.server import serve

    options = option_values(args)
    PipelineOptions.from_mapping(options)  # bad options fail here, before anything loads
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise InputError("TLS needs both --tls-cert and --tls-key")
        tls = {"cert": args.tls_cert, "key": args.tls_key, "client_ca": args.tls_client_ca}
    elif args.tls_client_ca:
        raise InputError("--tls-client-ca needs --tls-cert and --tls-key")
    shards = [p.strip() for p in args.shards.split(",") if p.strip()] if args.shards else None
    ray = {"address": args.ray, "num_cpus": args.ray_num_cpus, "shard_replicas": args.shard_replicas,
           "reranker_replicas": args.reranker_replicas}
    config = ServiceConfig.load(
        args.config, index=args.index, shards=shards, ray=ray, host=args.host, port=args.port, workers=args.workers,
        metrics_port=args.metrics_port, default_pipeline=args.default_pipeline, warm=args.warm,
        pipelines=[p.strip() for p in args.pipelines.split(",") if p.strip()] if args.pipelines else None,
        token_file=args.token_file, tls=tls, verify_checksums=False if args.no_verify else None,
        options=options, limits={name: getattr(args, name) for name in LIMITS},
        batching={"max_batch": args.max_batch, "max_wait_ms": args.max_wait_ms})
    if config.shards:
        from weir.service.sharded.server import ShardedServer

        serve(config, ShardedServer(config))
    else:
        serve(config)
    return 0


LIMITS = ("max_k", "max_depth", "max_query_chars", "max_query_terms", "max_batch_queries", "max_in_flight",
          "max_queued", "admit_sigmas")


def cmd_query(args) -> int:
    import grpc

    from weir.service.client import SearchClient

    text = " ".join(args.query)
    with SearchClient(args.server, timeout=args.timeout) as client:
        try:
            response = client.search(text, k=args.k, pipeline=args.pipeline, include_text=True, depth=args.depth,
                                     min_relevance=args.min_relevance, explain=args.explain)
        except grpc.RpcError as e:
            raise InputError(f"{args.server}: {e.code().name}: {e.details()}") from None
    for h in response.hits:
        relevance = f"  P(rel) {h.relevance:.3f}" if h.HasField("relevance") else ""
        print(f"{h.rank:>3}  {h.score:8.4f}{relevance}  {h.doc_id:<12}  {h.title or h.text[:100]}")
        for r in h.reasons:
            print(f"       {r.stage:>8} {r.contribution:+9.4f}  {r.part}")
    stage_ms = ", ".join(f"{t.stage} {t.milliseconds:.1f} ms" for t in response.timings)
    print(f"({len(response.hits)} hits from {args.server}, pipeline {response.pipeline}; {stage_ms})", file=sys.stderr)
    return 0


def add_query_parser(sub) -> None:
    q = sub.add_parser("query", help="ask a running weir server (gRPC client)")
    q.add_argument("query", nargs="+", help="the query text")
    q.add_argument("--server", default="127.0.0.1:50051", help="host:port of the server (default 127.0.0.1:50051)")
    q.add_argument("-k", "--k", type=int, default=10, help="hits to return (default 10)")
    q.add_argument("--pipeline", default="", help="pipeline name (default: the server's default)")
    q.add_argument("--depth", type=int, default=0, help="candidates reranked (default: the pipeline's)")
    q.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the answer")
    q.add_argument("--min-relevance", type=float, default=None, metavar="P",
                   help="only the hits at least P likely relevant (a pipeline the server has calibrated)")
    q.add_argument("--explain", action="store_true", help="print each hit's reasons (a fusion's and LTR's parts)")
    q.set_defaults(func=cmd_query)


def add_parsers(sub) -> None:
    sv = sub.add_parser("serve", help="serve an index over gRPC (SearchService, health, reflection)",
                        description="Serve an index over gRPC. Settings come from --config (TOML, see weir/service/config.py) "
                        "and these flags, which override it. Concurrent queries of one pipeline run together in "
                        "micro-batches; beyond --max-in-flight + --max-queued requests the server answers "
                        "RESOURCE_EXHAUSTED at once. SIGTERM drains: NOT_SERVING, UNAVAILABLE for new calls, those "
                        "in flight finish.")
    sv.add_argument("--config", help="service config file (TOML)")
    sv.add_argument("--index", help="index directory (or 'index' in --config)")
    sh = sv.add_argument_group("sharded serving on Ray Serve (instead of --index; see weir/service/sharded/)")
    sh.add_argument("--shards", metavar="DIR,DIR,...",
                    help="serve every shard of one `weir index build --shard I/N` build: a Ray Serve deployment per "
                    "shard scores as one index over the whole collection (BM25 with the shard set's statistics), the "
                    "front merges their top k and reranks once in a batched reranker deployment; pipelines: bm25, "
                    "deepct, flat dense, each alone or >> attention | crossencoder (or 'shards' in --config)")
    add_ray_address(sh, "the shard and reranker deployments (with --shards: local unless told)")
    add_deprecated(sh, "--ray-address", "--ray", "ray")
    sh.add_argument("--ray-num-cpus", type=int, help="CPUs of a local Ray instance (default: all)")
    sh.add_argument("--shard-replicas", type=int, help="replicas of each shard's deployment (default 1)")
    sh.add_argument("--reranker-replicas", type=int, help="replicas of each reranker deployment (default 1; a GPU "
                    "each when the cluster has GPUs, see [ray] in weir/service/config.py)")
    sv.add_argument("--host", help="address to bind (default 127.0.0.1: this machine only)")
    sv.add_argument("--port", type=int, help="port (default 50051; 0 picks a free one); a taken port is an error")
    sv.add_argument("--workers", type=int, help="threads running pipeline batches (default 2)")
    sv.add_argument("--no-verify", action="store_true", help="skip the start-up check of component checksums")
    sv.add_argument("--default-pipeline", help="pipeline of requests that name none (default bm25)")
    sv.add_argument("--pipelines", help="the pipelines served, comma-separated (default: every first stage the "
                    "index supports, alone or followed by one reranker)")
    sv.add_argument("--warm", choices=("served", "default"), help="what is built and run once before health says "
                    "SERVING: served (default) every served pipeline, so that no caller's first call waits seconds "
                    "for models to load; default the default pipeline alone (a faster start; the first call of each "
                    "other pipeline then loads its models)")
    sv.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on http://HOST:PORT/metrics")
    sec = sv.add_argument_group("security")
    sec.add_argument("--tls-cert", help="server certificate chain (PEM); with --tls-key, serve TLS only")
    sec.add_argument("--tls-key", help="server private key (PEM)")
    sec.add_argument("--tls-client-ca", help="CA (PEM) that client certificates must be signed by (asks for them)")
    sec.add_argument("--token-file", help="bearer tokens, one a line: calls without one get UNAUTHENTICATED "
                     "(health and reflection stay open)")
    lim = sv.add_argument_group("limits (INVALID_ARGUMENT beyond the field limits, RESOURCE_EXHAUSTED beyond load)")
    for name, default in (("max_k", 1000), ("max_depth", 1000), ("max_query_chars", 4096), ("max_query_terms", 1024),
                          ("max_batch_queries", 100), ("max_in_flight", 16), ("max_queued", 64)):
        lim.add_argument("--" + name.replace("_", "-"), type=int, help=f"(default {default})")
    lim.add_argument("--admit-sigmas", type=float, help="admit a call with a deadline only when it would be answered "
                     "in time even if batches ran this many standard deviations slower than the server's recent mean "
                     "(default 2; 0: at the mean: more answers under overload, more of them too late)")
    bat = sv.add_argument_group("micro-batching")
    bat.add_argument("--max-batch", type=int, help="queries of one pipeline run together at most (default 16; 1: "
                     "no batching)")
    bat.add_argument("--max-wait-ms", type=float, help="how long a batch's first query waits for others (default 2)")
    add_pipeline_options(sv, pipeline=False)
    sv.set_defaults(func=cmd_serve)

    add_query_parser(sub)
