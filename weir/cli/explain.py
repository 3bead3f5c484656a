"""`weir explain`: why each hit of a pipeline is where it is, for one query or summed up over a topics file.

The reasons are the parts of the scores of the stages that explain themselves (a fusion's stages' weighted shares,
an LTR model's TreeSHAP feature contributions and its bias; :meth:`weir.core.hits.Ranked.top_reasons`), the same a
gRPC caller gets with ``explain``."""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np

from weir.cli.options import add_pipeline_options, pipeline_options
from weir.core.hits import FIXED_PARTS
from weir.core.types import InputError


def _query(args, index, pipeline) -> int:
    from weir.core.types import Query

    query = Query("q", " ".join(args.query))
    if not query.text.strip():
        raise InputError("the query is empty")
    run = pipeline([query], k=args.k, depth=args.rerank_depth, explain=True)
    hits = run.ranking("q") if "q" in run else None
    if hits is None or not len(hits):
        print("(no hits)", file=sys.stderr)
        return 0
    reasons = hits.top_reasons(args.top)
    docs = index.documents(hits.doc_ids()) if "bm25" in index.components else {}
    rows = []
    for i, (doc_id, score) in enumerate(zip(hits.doc_ids(), hits.scores.tolist())):
        doc = docs.get(doc_id)
        rows.append({"rank": i + 1, "doc_id": doc_id, "score": score,
                     **({"relevance": float(hits.relevance[i])} if hits.relevance is not None else {}),
                     "title": (doc.title or doc.text[:80]) if doc else "",
                     "reasons": [{"stage": s, "part": p, "contribution": v} for s, p, v in reasons[i]]})
    if args.format == "json":
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return 0
    for row in rows:
        relevance = f"  P(rel) {row['relevance']:.3f}" if "relevance" in row else ""
        print(f"{row['rank']:>3}  {row['score']:9.4f}{relevance}  {row['doc_id']:<12}  {row['title']}")
        for r in row["reasons"]:
            print(f"       {r['stage']:>8} {r['contribution']:+9.4f}  {r['part']}")
    if not any(row["reasons"] for row in rows):
        print(f"({pipeline.name} has no stage that explains its scores: a fusion such as hybrid, or ltr)",
              file=sys.stderr)
    return 0


def summary(run, top: int) -> list[dict]:
    """Over every query's hits in ``run``: per (stage, part), the mean contribution and mean magnitude, and the share
    of the stage's hits whose largest part (bias and risk apart) it is."""
    sums: dict = defaultdict(lambda: [0.0, 0.0, 0, 0])  # sum, sum of magnitudes, hits, times the largest
    scored: dict = defaultdict(int)
    for qid in run:
        hits = run.ranking(qid)
        for reasons in hits.top_reasons(top=10 ** 6):
            seen = set()
            for stage, part, value in reasons:
                s = sums[(stage, part)]
                s[0] += value
                s[1] += abs(value)
                s[2] += 1
                if stage not in seen and part not in FIXED_PARTS:
                    s[3] += 1
                    seen.add(stage)
                    scored[stage] += 1
    rows = [{"stage": stage, "part": part, "mean": s[0] / s[2], "mean_magnitude": s[1] / s[2],
             "largest_share": s[3] / scored[stage] if scored[stage] else 0.0}
            for (stage, part), s in sums.items()]
    rows.sort(key=lambda r: (r["stage"], -r["mean_magnitude"]))
    by_stage: dict = defaultdict(list)
    for r in rows:
        by_stage[r["stage"]].append(r)
    return [r for stage_rows in by_stage.values() for r in stage_rows[:top]]


def _topics(args, pipeline) -> int:
    from weir.core.trec import read_topics

    topics = read_topics(args.topics)
    run = pipeline.search(topics, args.k, depth=args.rerank_depth, remove_identical=args.remove_identical,
                          explain=True)
    rows = summary(run, args.top)
    if args.format == "json":
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print(f"({pipeline.name} has no stage that explains its scores)", file=sys.stderr)
        return 0
    print(f"{'stage':>8}  {'part':<22} {'mean':>9} {'mean |c|':>9} {'largest in':>10}")
    for r in rows:
        print(f"{r['stage']:>8}  {r['part']:<22} {r['mean']:+9.4f} {r['mean_magnitude']:9.4f} "
              f"{r['largest_share'] * 100:9.1f}%")
    print(f"({len(topics)} queries, top {args.k} hits each)", file=sys.stderr)
    return 0


def cmd_explain(args) -> int:
    from weir.indexer.index_dir import Index
    from weir.ranker import registry

    if bool(args.query) == bool(args.topics):
        raise InputError("give a query, or --topics FILE to sum the reasons up over its queries (not both)")
    if args.k < 1 or args.top < 1:
        raise InputError("-k and --top must be at least 1")
    index = Index(args.index)
    pipeline = registry.build(args.pipeline, index, pipeline_options(args))
    return _query(args, index, pipeline) if args.query else _topics(args, pipeline)


def add_parsers(sub) -> None:
    e = sub.add_parser("explain", help="why each hit is where it is: the parts of each explaining stage's score "
                       "(a fusion's stages, an LTR model's features), for a query or summed up over a topics file",
                       description="For one query: each hit with the largest parts of its fusion and LTR scores "
                       "(TreeSHAP contributions, LightGBM's pred_contrib), its bias and the rest, which add up to "
                       "the stage's score. With --topics: per part, its mean contribution and magnitude over the "
                       "top k hits of every query, and how often it is a hit's largest.")
    e.add_argument("--index", required=True, help="index directory")
    e.add_argument("query", nargs="*", help="the query text (or --topics)")
    e.add_argument("--topics", help="sum the reasons up over the queries of this topics file")
    e.add_argument("-k", "--k", type=int, default=10, help="hits explained per query (default 10)")
    e.add_argument("--top", type=int, default=5, help="parts shown per stage (default 5; the rest are summed)")
    e.add_argument("--remove-identical", action="store_true", help="with --topics: drop hits whose docid is the qid")
    e.add_argument("--format", choices=("text", "json"), default="text")
    e.add_argument("--pipeline", default="hybrid>>ltr", help="first stage and rerankers joined by '>>' (default: "
                   "hybrid>>ltr; the stages that explain themselves: a fusion such as hybrid, and ltr)")
    add_pipeline_options(e, pipeline=False)
    e.set_defaults(func=cmd_explain)
