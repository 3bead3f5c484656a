"""`weir search`, `weir run` and `weir pipelines`: pipelines over an index, one query at the terminal or a topics
file into a TREC run."""

from __future__ import annotations

import json
import sys
import time

from weir.cli.options import add_pipeline_options, pipeline_options
from weir.core.types import InputError


def cmd_search(args) -> int:
    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.core.types import Query

    index = Index(args.index)
    pipeline = registry.build(args.pipeline, index, pipeline_options(args))
    query = Query("q", " ".join(args.query))
    if not query.text.strip():
        raise InputError("the query is empty")
    run = pipeline([query], k=args.k, depth=args.rerank_depth, min_relevance=args.min_relevance)
    hits = run["q"] if "q" in run else []
    docs = index.documents([h.doc_id for h in hits])
    calibrated = pipeline.calibration is not None
    if args.format == "json":
        print(json.dumps([{"rank": h.rank, "doc_id": h.doc_id, "score": h.score,
                           **({"relevance": h.relevance} if calibrated else {}), "title": docs[h.doc_id].title,
                           "text": docs[h.doc_id].text} for h in hits], ensure_ascii=False, indent=1))
        return 0
    for h in hits:
        doc = docs.get(h.doc_id)
        title = doc.title if doc and doc.title else (doc.text[:100] + "…" if doc else "")
        relevance = f"  P(rel) {h.relevance:.3f}" if calibrated else ""
        print(f"{h.rank:>3}  {h.score:8.4f}{relevance}  {h.doc_id:<12}  {title}")
    stage_ms = ", ".join(f"{n} {t * 1000:.1f} ms" for n, t in run.timings.items())
    cut = f"; cut at relevance {args.min_relevance}" if args.min_relevance is not None else ""
    print(f"({len(hits)} hits{cut}; {stage_ms})", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.ranker.stage import CandidateRun
    from weir.core.trec import read_topics
    from weir.core.types import Run

    index = Index(args.index)
    topics = read_topics(args.topics)
    first = CandidateRun(Run.read_trec(args.candidates)) if args.candidates else None
    # default pipeline: bm25 when retrieving; with --candidates, none (the candidates pass through)
    spec = args.pipeline if args.pipeline is not None else ("" if first else "bm25")
    pipeline = registry.build(spec, index, pipeline_options(args), first_stage=first)
    start = time.perf_counter()
    run = pipeline.search(topics, args.k, depth=args.rerank_depth, remove_identical=args.remove_identical,
                          min_relevance=args.min_relevance)
    elapsed = time.perf_counter() - start
    run.write_trec(args.out, tag=args.tag or pipeline.name.replace(">>", "_"))
    stages = ", ".join(f"{n} {t / max(1, len(topics)) * 1000:.2f} ms/query" for n, t in run.timings.items())
    print(f"{len(topics)} queries, {run.hits_count()} hits -> {args.out} in {elapsed:.2f}s "
          f"({len(topics) / elapsed:.1f} queries/s; {stages})", file=sys.stderr)
    if pipeline.calibration is not None:
        sidecar = f"{args.out}.relevance.tsv"
        if run.write_relevance(sidecar):
            print(f"each hit's P(relevant) -> {sidecar}", file=sys.stderr)
    return 0


def cmd_pipelines(args) -> int:
    from weir.ranker import registry

    print("first stages:", ", ".join(sorted(registry.FIRST_STAGES)))
    print("rerankers:   ", ", ".join(sorted(registry.RERANKERS)))
    return 0


def add_min_relevance(p) -> None:
    p.add_argument("--min-relevance", type=float, default=None, metavar="P",
                   help="return only the hits whose P(relevant) is at least P (0 to 1), possibly none: a pipeline "
                   "calibrated over the index by `weir tune calibration` only. A calibrated pipeline's hits carry "
                   "their P(relevant) whether or not this is given (`weir run`: in OUT.relevance.tsv)")


def add_parsers(sub) -> None:
    s = sub.add_parser("search", help="search an index and print ranked hits with titles")
    s.add_argument("--index", required=True, help="index directory")
    s.add_argument("query", nargs="+", help="the query text")
    s.add_argument("-k", "--k", type=int, default=10, help="hits to show (default 10)")
    s.add_argument("--format", choices=("text", "json"), default="text")
    add_min_relevance(s)
    add_pipeline_options(s)
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
    add_min_relevance(r)
    add_pipeline_options(r)
    r.set_defaults(func=cmd_run, pipeline=None)

    pl = sub.add_parser("pipelines", help="list the stages pipelines can be built from")
    pl.set_defaults(func=cmd_pipelines)
