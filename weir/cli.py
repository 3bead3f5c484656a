"""The `weir` command line: index builds, searches, runs, evaluations and the gRPC server.

Every subcommand reports bad input (a missing file, a malformed line, an unknown pipeline) as one clear error line
and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from weir.types import InputError


def _add_pipeline_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pipeline", default="bm25",
                   help="first stage and rerankers joined by '>>' (default: bm25; with `weir run --candidates`, none: the "
                   "candidates pass through). Known stages: see `weir pipelines`")
    p.add_argument("--k1", type=float, default=0.9, help="BM25 k1 (default 0.9)")
    p.add_argument("--b", type=float, default=0.4, help="BM25 b (default 0.4)")
    p.add_argument("--threads", type=int, default=None, help="search threads (default: all cores)")
    h = p.add_argument_group("dense and hybrid first stages")
    h.add_argument("--fusion", choices=("rrf", "minmax", "zscore", "linear"), default=None,
                   help="hybrid fusion: reciprocal rank fusion, or a weighted sum of min-max or z-score normalized "
                   "scores ('linear' = minmax) (default: as tuned by `weir tune fusion`, else zscore)")
    h.add_argument("--fusion-weights", "--fusion-weight", dest="fusion_weights", default=None,
                   help="hybrid weights, one per stage: '0.3,0.7' or 'bm25=0.3,dense=0.7' (default: tuned, else equal)")
    h.add_argument("--depth-per-stage", type=int, default=None, help="hybrid: candidates per fused stage (default 1000)")
    h.add_argument("--rrf-k", type=int, default=None, help="hybrid: the RRF constant k (default: tuned, else 60)")
    h.add_argument("--hybrid-stages", default=None, help="hybrid: first stages to fuse (default: bm25,dense)")
    h.add_argument("--dense-model", default=None,
                   help="dense: query encoder (default: the model recorded in the index manifest)")
    h.add_argument("--ef-search", type=int, default=None, help="dense over HNSW: efSearch (default: as built)")
    h.add_argument("--nprobe", type=int, default=None, help="dense over IVF-PQ: lists probed (default: as built)")
    from weir.cli_rerank import add_rerank_options

    add_rerank_options(p)


_DENSE_OPTIONS = ("fusion", "fusion_weights", "depth_per_stage", "rrf_k", "hybrid_stages", "dense_model",
                  "ef_search", "nprobe")


def _options(args) -> dict:
    from weir.cli_rerank import rerank_options

    return {"k1": args.k1, "b": args.b, "threads": args.threads,
            **{key: getattr(args, key) for key in _DENSE_OPTIONS if getattr(args, key, None) is not None},
            **rerank_options(args)}


def cmd_index_build(args) -> int:
    from indexer.build import build_index

    components = tuple(c.strip() for c in args.with_.split(",") if c.strip())
    dense = None
    if "dense" in components:
        from indexer.dense import DenseConfig

        dense = DenseConfig(index=args.dense_index, model=args.dense_model, device=args.device,
                            batch_size=args.batch_size, hnsw_m=args.hnsw_m, ef_construction=args.ef_construction,
                            ef_search=args.ef_search, nlist=args.nlist, pq_m=args.pq_m, nbits=args.nbits,
                            nprobe=args.nprobe)
        dense.check()
    learned = {"deepct_model": args.deepct_model, "deepimpact_model": args.deepimpact_model, "device": args.device}
    manifest = build_index(args.collection, args.out, components=components, overwrite=args.overwrite,
                           skip_empty=args.skip_empty, threads=args.threads, dense=dense, learned=learned)
    counts = manifest["counts"]
    sizes = ", ".join(f"{n} {c['bytes'] / 2**20:.1f} MiB" for n, c in manifest["components"].items())
    print(f"indexed {counts['documents']} documents ({counts['skipped_empty']} empty skipped) into {args.out} "
          f"in {manifest['timings']['total_seconds']:.1f}s: {sizes}", file=sys.stderr)
    return 0


def cmd_index_verify(args) -> int:
    from indexer.index_dir import verify

    manifest = verify(args.index)
    print(f"{args.index}: {len(manifest['components'])} component(s) match their checksums", file=sys.stderr)
    return 0


def cmd_search(args) -> int:
    from ranker import pipelines
    from ranker.index import Index
    from weir.types import Query

    index = Index(args.index)
    pipeline = pipelines.build(args.pipeline, index, _options(args))
    query = Query("q", " ".join(args.query))
    if not query.text.strip():
        raise InputError("the query is empty")
    run = pipeline([query], k=args.k, depth=args.depth)
    hits = run["q"]
    docs = index.documents([h.doc_id for h in hits])
    if args.format == "json":
        print(json.dumps([{"rank": h.rank, "doc_id": h.doc_id, "score": h.score, "title": docs[h.doc_id].title,
                           "text": docs[h.doc_id].text} for h in hits], ensure_ascii=False, indent=1))
        return 0
    for h in hits:
        doc = docs.get(h.doc_id)
        title = doc.title if doc and doc.title else (doc.text[:100] + "…" if doc else "")
        print(f"{h.rank:>3}  {h.score:8.4f}  {h.doc_id:<12}  {title}")
    stage_ms = ", ".join(f"{n} {t * 1000:.1f} ms" for n, t in run.timings.items())
    print(f"({len(hits)} hits; {stage_ms})", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    from indexer.collections import read_topics
    from ranker import pipelines
    from ranker.base import CandidateRun
    from ranker.index import Index
    from weir.types import Run

    index = Index(args.index)
    topics = read_topics(args.topics)
    first = CandidateRun(Run.read_trec(args.candidates)) if args.candidates else None
    # default pipeline: bm25 when retrieving; with --candidates, none (the candidates pass through)
    spec = args.pipeline if args.pipeline is not None else ("" if first else "bm25")
    pipeline = pipelines.build(spec, index, _options(args), first_stage=first)
    start = time.perf_counter()
    # drop identical ids after retrieval: fetch one more hit so that k hits remain
    run = pipeline(topics, k=args.k + (1 if args.remove_identical else 0), depth=args.depth)
    elapsed = time.perf_counter() - start
    if args.remove_identical:
        timings = run.timings
        run = run.without_identical_ids().truncated(args.k)
        run.timings = timings
    run.write_trec(args.out, tag=args.tag or pipeline.name.replace(">>", "_"))
    stages = ", ".join(f"{n} {t / max(1, len(topics)) * 1000:.2f} ms/query" for n, t in run.timings.items())
    print(f"{len(topics)} queries, {run.hits_count()} hits -> {args.out} in {elapsed:.2f}s "
          f"({len(topics) / elapsed:.1f} queries/s; {stages})", file=sys.stderr)
    return 0


def cmd_eval(args) -> int:
    from indexer.collections import read_qrels
    from ranker.evaluate import DEFAULT_MEASURES, evaluate, format_table
    from weir.types import Run

    run = Run.read_trec(args.run)
    names = [m for m in args.measures.split(",") if m.strip()] if args.measures else list(DEFAULT_MEASURES)
    means = evaluate(run, read_qrels(args.qrels), names, binary_min_rel=args.binary_min_rel)
    if args.format == "json":
        print(json.dumps({"run": args.run, "qrels": args.qrels, "measures": means}, indent=2))
    else:
        print(format_table({os.path.basename(args.run): means}))
    return 0


def cmd_experiment(args) -> int:
    from ranker.experiment import Config, load_config, parse_pipelines, run_experiment, table

    settings = load_config(args.config) if args.config else {}
    given = {"topics": args.topics, "qrels": args.qrels, "baseline": args.baseline, "test": args.test,
             "alpha": args.alpha, "binary_min_rel": args.binary_min_rel, "k": args.k, "warmup": args.warmup}
    settings.update({key: value for key, value in given.items() if value is not None})
    if args.index:
        settings["indexes"] = args.index
    if args.pipelines:
        settings["pipelines"] = [p for text in args.pipelines for p in parse_pipelines(text)]
    if args.runs:
        settings["runs"] = [r.strip() for text in args.runs for r in text.split(",") if r.strip()]
    if args.measures:
        settings["measures"] = [m.strip() for m in args.measures.split(",") if m.strip()]
    if args.remove_identical:
        settings["remove_identical"] = True
    if args.threads:
        settings["options"] = {**settings.get("options", {}), "threads": args.threads}
    if not settings.get("qrels"):
        raise InputError("an experiment needs qrels (--qrels, or 'qrels' in --config)")
    if settings.get("indexes") and not settings.get("pipelines") and not settings.get("runs"):
        settings["pipelines"] = parse_pipelines("bm25")
    try:
        config = Config(**settings)
    except TypeError as e:
        raise InputError(f"bad experiment settings: {e}") from None
    record = run_experiment(config, args.out, command=["weir"] + args.argv)
    print(table(record))
    outputs = record["outputs"]
    print(f"wrote {args.out}/{{{outputs['markdown']}, {outputs['json']}, {outputs['csv']}, "
          f"{outputs['per_query_csv']}, {', '.join(outputs['plots'].values())}}}"
          + (f" and {len(config.pipelines) * len(config.indexes)} run(s) in {args.out}/runs/" if config.pipelines else ""),
          file=sys.stderr)
    return 0


def cmd_serve(args) -> int:
    from service.server import serve

    serve(args.index, host=args.host, port=args.port, workers=args.workers, options=_options(args),
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


def cmd_tune_fusion(args) -> int:
    from ranker.index import Index
    from ranker.tuning import tune_fusion, tuning_path

    index = Index(args.index)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    record = tune_fusion(index, args.topics, args.qrels, stages=stages, measure=args.measure, depth=args.depth,
                         methods=methods, options=_options(args), allow_test_topics=args.allow_test_topics)
    best, measure = record["best"], record["measure"]
    singles = ", ".join(f"{n} {v:.4f}" for n, v in record["single_stages"].items())
    for method, r in record["best_by_method"].items():
        print(f"{method:>7}: {measure} {r[measure]:.4f}  weights {r['weights']}" + (f"  k {r['rrf_k']}" if method == "rrf" else ""))
    print(f"best on {record['tuned_on']['queries']} training queries: {best['method']} weights {best['weights']}"
          f"{' k ' + str(best['rrf_k']) if best['method'] == 'rrf' else ''}: {measure} {best[measure]:.4f} "
          f"(single stages: {singles}) -> {tuning_path(index)}", file=sys.stderr)
    return 0


def cmd_train(args) -> int:
    from indexer.weighting.train import TrainConfig, train

    config = TrainConfig(kind=args.kind, collection=args.collection, queries=args.queries, qrels=args.qrels,
                         out=args.out, base_model=args.base_model, max_length=args.max_length, titles=args.titles,
                         epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, negatives=args.negatives,
                         negative_depth=args.negative_depth, val_fraction=args.val_fraction, seed=args.seed,
                         bm25_index=args.bm25_index, device=args.device, command=["weir"] + args.argv,
                         features=[f.strip() for f in args.features.split(",") if f.strip()])
    card = train(config, log=lambda m: print(m, file=sys.stderr))
    v = card["metrics"]["validation"]
    print(f"{args.kind} -> {args.out}: validation nDCG@10 {v['nDCG@10']:.4f} R@100 {v['R@100']:.4f} (epoch "
          f"{v['epoch']}); encode {card['timing']['encode_seconds']}s, train {card['timing']['train_seconds']}s",
          file=sys.stderr)
    return 0


def cmd_pipelines(args) -> int:
    from ranker import pipelines

    print("first stages:", ", ".join(sorted(pipelines.FIRST_STAGES)))
    print("rerankers:   ", ", ".join(sorted(pipelines.RERANKERS)) or "(none yet)")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="weir", description="Retrieval and reranking with learned term weighting: build indexes, search, "
        "write TREC runs, evaluate them, and serve pipelines over gRPC.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    idx = sub.add_parser("index", help="build or check an index directory").add_subparsers(dest="index_command",
                                                                                          required=True, metavar="ACTION")
    b = idx.add_parser("build", help="index a collection (built aside, renamed into place when complete)",
                       description="Index a collection: a directory with corpus.jsonl (weir or BEIR layout), a JSONL "
                       "file, or an MS MARCO id<TAB>text TSV. The index is built in a temporary sibling of --out and "
                       "renamed into place only when complete, with manifest.json describing it.")
    b.add_argument("--collection", required=True, help="collection directory or corpus file")
    b.add_argument("--out", required=True, help="index directory to create")
    b.add_argument("--with", dest="with_", default="bm25", help="components to build, comma-separated (default: bm25)")
    b.add_argument("--overwrite", action="store_true", help="replace an existing index at --out")
    b.add_argument("--skip-empty", action="store_true", help="leave out empty documents instead of failing")
    b.add_argument("--threads", type=int, default=None, help="indexing threads (default: all cores)")
    d = b.add_argument_group("dense component (--with ...,dense)")
    d.add_argument("--dense-index", choices=("flat", "hnsw", "ivfpq"), default="flat",
                   help="faiss index: flat (exact inner product, default), hnsw or ivfpq")
    d.add_argument("--dense-model", default=None,
                   help="encoder: Hugging Face name or local path (default: all-MiniLM-L6-v2, offline copy)")
    d.add_argument("--device", default=None, help="encoding device (default: cuda when available, else cpu)")
    d.add_argument("--batch-size", type=int, default=64, help="passages per forward pass (default 64)")
    d.add_argument("--hnsw-m", type=int, default=32, help="HNSW: neighbours per node M (default 32)")
    d.add_argument("--ef-construction", type=int, default=200, help="HNSW: efConstruction (default 200)")
    d.add_argument("--ef-search", type=int, default=128, help="HNSW: efSearch stored as the default (default 128)")
    d.add_argument("--nlist", type=int, default=None, help="IVF-PQ: inverted lists (default: ~4*sqrt(n))")
    d.add_argument("--pq-m", type=int, default=None, help="IVF-PQ: sub-quantizers m, dividing the dim (default dim/8)")
    d.add_argument("--nbits", type=int, default=8, help="IVF-PQ: bits per sub-quantizer code (default 8)")
    d.add_argument("--nprobe", type=int, default=16, help="IVF-PQ: lists probed, stored as the default (default 16)")
    lw = b.add_argument_group("learned term weighting (--with ...,deepct,deepimpact)")
    lw.add_argument("--deepct-model", default=None,
                    help="trained DeepCT model directory (default: models/deepct-scifact; `weir train deepct`)")
    lw.add_argument("--deepimpact-model", default=None,
                    help="trained DeepImpact model directory (default: models/deepimpact-scifact; `weir train deepimpact`)")
    b.set_defaults(func=cmd_index_build)
    v = idx.add_parser("verify", help="check an index's components against the checksums of its manifest")
    v.add_argument("index")
    v.set_defaults(func=cmd_index_verify)

    s = sub.add_parser("search", help="search an index and print ranked hits with titles")
    s.add_argument("--index", required=True, help="index directory")
    s.add_argument("query", nargs="+", help="the query text")
    s.add_argument("-k", "--k", type=int, default=10, help="hits to show (default 10)")
    s.add_argument("--format", choices=("text", "json"), default="text")
    _add_pipeline_options(s)
    s.set_defaults(func=cmd_search)

    r = sub.add_parser("run", help="run a pipeline over a topics file and write a TREC run")
    r.add_argument("--index", required=True, help="index directory")
    r.add_argument("--topics", required=True, help="topics: qid<TAB>text TSV, TREC topic file or BEIR queries.jsonl")
    r.add_argument("--out", required=True, help="TREC run file to write")
    r.add_argument("-k", "--k", type=int, default=1000, help="hits per query (default 1000)")
    r.add_argument("--candidates", help="take first-stage candidates from this TREC run instead of retrieving")
    r.add_argument("--remove-identical", action="store_true",
                   help="drop hits whose docid equals the qid (BEIR's ignore_identical_ids; needed for ArguAna)")
    r.add_argument("--tag", help="run tag in the TREC file (default: the pipeline name)")
    _add_pipeline_options(r)
    r.set_defaults(func=cmd_run, pipeline=None)

    e = sub.add_parser("eval", help="evaluate a TREC run against qrels (ir-measures)")
    e.add_argument("--run", required=True, help="TREC run file")
    e.add_argument("--qrels", required=True, help="TREC qrels file (qid 0 docid rel)")
    e.add_argument("--measures", help="comma-separated ir-measures names (default: nDCG@10,RR@10,AP,R@100,R@1000)")
    e.add_argument("--binary-min-rel", type=int, default=1,
                   help="lowest grade counted relevant by binary measures (AP, RR, R): 2 for TREC DL (default 1)")
    e.add_argument("--format", choices=("table", "json"), default="table")
    e.set_defaults(func=cmd_eval)

    sv = sub.add_parser("serve", help="serve an index over gRPC (SearchService, health, reflection)")
    sv.add_argument("--index", required=True, help="index directory")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=50051, help="port (default 50051; 0 picks a free one)")
    sv.add_argument("--workers", type=int, default=8, help="request threads (default 8)")
    sv.add_argument("--no-verify", action="store_true", help="skip the start-up check of component checksums")
    _add_pipeline_options(sv)
    sv.set_defaults(func=cmd_serve)

    q = sub.add_parser("query", help="ask a running weir server (gRPC client)")
    q.add_argument("query", nargs="+", help="the query text")
    q.add_argument("--server", default="127.0.0.1:50051", help="host:port of the server (default 127.0.0.1:50051)")
    q.add_argument("-k", "--k", type=int, default=10, help="hits to return (default 10)")
    q.add_argument("--pipeline", default="", help="pipeline name (default: the server's default)")
    q.add_argument("--depth", type=int, default=0, help="candidates reranked (default: the pipeline's)")
    q.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the answer")
    q.set_defaults(func=cmd_query)

    x = sub.add_parser("experiment", help="run and compare pipelines (or run files): table, significance, plots",
                       description="Run each pipeline once over the topics (every pipeline over every --index), "
                       "or take existing run files, evaluate them with ir-measures, test each against the baseline "
                       "(paired test, Holm-corrected per measure), and write results.md/.json/.csv, per_query.csv, "
                       "the runs and plots to --out. Settings may come from a JSON/TOML file (--config); options "
                       "given here override it.")
    x.add_argument("--config", help="experiment file (.json or .toml) with the settings below")
    x.add_argument("--index", action="append", help="index directory (repeat to compare indexes)")
    x.add_argument("--topics", help="topics: qid<TAB>text TSV, TREC topic file or BEIR queries.jsonl")
    x.add_argument("--qrels", help="TREC qrels file (qid 0 docid rel)")
    x.add_argument("--pipelines", action="append",
                   help="comma-separated pipelines, each with optional options, e.g. "
                   "'bm25,bm25[k1=1.2,b=0.75],bm25>>ltr' (default with --index: bm25)")
    x.add_argument("--runs", action="append", help="comma-separated TREC run files to evaluate as they are")
    x.add_argument("--out", required=True, help="output directory")
    x.add_argument("--measures", help="comma-separated ir-measures names (default: nDCG@10,RR@10,AP,R@100,R@1000)")
    x.add_argument("--baseline", help="the system the others are tested against (default: the first)")
    x.add_argument("--test", choices=("t", "wilcoxon"), help="paired t-test (default) or Wilcoxon signed-rank")
    x.add_argument("--alpha", type=float, help="significance level after Holm's correction (default 0.05)")
    x.add_argument("--binary-min-rel", type=int,
                   help="lowest grade counted relevant by binary measures (AP, RR, R): 2 for TREC DL (default 1)")
    x.add_argument("--remove-identical", action="store_true",
                   help="drop hits whose docid equals the qid (BEIR's ignore_identical_ids; needed for ArguAna)")
    x.add_argument("-k", "--k", type=int, help="hits per query (default 1000)")
    x.add_argument("--warmup", type=int, help="queries run untimed through each pipeline first (default 20)")
    x.add_argument("--threads", type=int, default=None, help="search threads (default: all cores)")
    x.set_defaults(func=cmd_experiment)

    tu = sub.add_parser("tune", help="tune pipeline settings on a training split").add_subparsers(
        dest="tune_command", required=True, metavar="WHAT")
    tf = tu.add_parser("fusion", help="grid-search hybrid fusion (method, weights, RRF k) on training topics and "
                       "store the best in <index>/tuning/fusion.json, which `hybrid` then uses by default")
    tf.add_argument("--index", required=True, help="index directory (with the stages to fuse, e.g. bm25 and dense)")
    tf.add_argument("--topics", required=True, help="TRAINING topics (never the test topics)")
    tf.add_argument("--qrels", required=True, help="qrels of the training topics")
    tf.add_argument("--stages", default="bm25,dense", help="first stages to fuse (default: bm25,dense)")
    tf.add_argument("--methods", default="rrf,minmax,zscore", help="fusion methods to try (default: all three)")
    tf.add_argument("--measure", default="nDCG@10", help="measure to maximize (default nDCG@10)")
    tf.add_argument("--depth", type=int, default=1000, help="candidates per stage (default 1000)")
    tf.add_argument("--allow-test-topics", action="store_true", help=argparse.SUPPRESS)
    _add_pipeline_options(tf)
    tf.set_defaults(func=cmd_tune_fusion)

    tr = sub.add_parser("train", help="train a learned term weighting model (DeepCT, DeepImpact)").add_subparsers(
        dest="train_command", required=True, metavar="MODEL")
    for kind, what in (("deepct", "DeepCT: per-term regression of query term recall (masked MSE)"),
                       ("deepimpact", "DeepImpact: impacts trained with softmax cross-entropy over BM25 hard negatives")):
        t = tr.add_parser(kind, help=what, description=what + ". The backbone is frozen; its term vectors are "
                          "computed once per collection and cached ($WEIR_CACHE, default ~/.cache/weir); only the head "
                          "trains. Writes head.pt and card.json (the model card) to --out.")
        t.add_argument("--collection", required=True, help="collection directory (corpus.jsonl)")
        t.add_argument("--queries", required=True, help="TRAINING queries (never a test split you report)")
        t.add_argument("--qrels", required=True, help="qrels of the training queries")
        t.add_argument("--out", required=True, help="model directory to write (e.g. models/%s-scifact)" % kind)
        t.add_argument("--base-model", default="all-MiniLM-L6-v2", help="backbone: Hugging Face name or local path")
        t.add_argument("--max-length", type=int, default=256, help="word pieces per encoder window (default 256)")
        t.add_argument("--titles", action="store_true", help="also use document titles as pseudo-queries")
        t.add_argument("--epochs", type=int, default=10 if kind == "deepimpact" else 20)
        t.add_argument("--lr", type=float, default=1e-3)
        t.add_argument("--batch-size", type=int, default=32, help="queries (DeepImpact) or documents (DeepCT) a step")
        t.add_argument("--negatives", type=int, default=15, help="DeepImpact: BM25 hard negatives per query")
        t.add_argument("--negative-depth", type=int, default=100, help="DeepImpact: BM25 depth negatives come from")
        t.add_argument("--val-fraction", type=float, default=0.2, help="training queries held out for validation")
        t.add_argument("--seed", type=int, default=13)
        t.add_argument("--bm25-index", default=None, help="BM25 index of the collection (default: built aside)")
        t.add_argument("--device", default=None, help="encoder device (default: cuda when available, else cpu)")
        t.add_argument("--features", default="", help="lexical head inputs beside the term vector, comma-separated: "
                       "idf, tf, length (default: none, the published heads)")
        t.set_defaults(func=cmd_train, kind=kind)

    from weir.cli_rerank import add_train_parsers

    add_train_parsers(tr)

    pl = sub.add_parser("pipelines", help="list the stages pipelines can be built from")
    pl.set_defaults(func=cmd_pipelines)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    args.argv = argv  # as given, for records of what produced a result
    try:
        return args.func(args)
    except InputError as e:
        print(f"weir: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("weir: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
