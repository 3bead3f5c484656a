"""`weir tune fusion`: hybrid fusion settings grid-searched on training topics, stored in the index."""

from __future__ import annotations

import argparse
import sys

from weir.cli.options import add_pipeline_options, pipeline_options


def cmd_fusion(args) -> int:
    from weir.indexer.index_dir import Index
    from weir.ranker.retrievers.hybrid import tuning_path
    from weir.training.fusion import tune_fusion

    index = Index(args.index)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    record = tune_fusion(index, args.topics, args.qrels, stages=stages, measure=args.measure, depth=args.depth,
                         methods=methods, options=pipeline_options(args), allow_test_topics=args.allow_test_topics)
    best, measure = record["best"], record["measure"]
    singles = ", ".join(f"{n} {v:.4f}" for n, v in record["single_stages"].items())
    for method, r in record["best_by_method"].items():
        print(f"{method:>7}: {measure} {r[measure]:.4f}  weights {r['weights']}" + (f"  k {r['rrf_k']}" if method == "rrf" else ""))
    print(f"best on {record['tuned_on']['queries']} training queries: {best['method']} weights {best['weights']}"
          f"{' k ' + str(best['rrf_k']) if best['method'] == 'rrf' else ''}: {measure} {best[measure]:.4f} "
          f"(single stages: {singles}) -> {tuning_path(index)}", file=sys.stderr)
    return 0


def add_parsers(sub) -> None:
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
    add_pipeline_options(tf, depth=False, pipeline=False)
    tf.set_defaults(func=cmd_fusion)
