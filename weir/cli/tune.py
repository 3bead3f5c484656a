"""`weir tune fusion` and `weir tune calibration`: hybrid fusion settings grid-searched, and each pipeline's mapping
from scores to P(relevant) fitted, on training topics; both stored in the index (``<index>/tuning/``)."""

from __future__ import annotations

import argparse
import sys

from weir.cli.options import add_min_rel, add_pipeline_options, pipeline_options
from weir.core.types import InputError


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


def cmd_calibration(args) -> int:
    from weir.indexer.index_dir import Index
    from weir.ranker.calibration import calibration_path
    from weir.training.calibration import tune_calibration

    index = Index(args.index)
    pipelines = [p.strip() for p in args.pipelines.split(",") if p.strip()]
    if not pipelines:
        raise InputError("--pipelines names no pipeline")
    data = tune_calibration(index, pipelines, args.topics, args.qrels, options=pipeline_options(args),
                            depth=args.fit_depth, min_rel=args.min_rel, remove_identical=args.remove_identical,
                            allow_test_topics=args.allow_test_topics)
    for spec in pipelines:
        entry = data["pipelines"][">>".join(p.strip() for p in spec.split(">>"))]
        f = entry["fit"]
        print(f"{entry['identity']['pipeline']:>18}: {f['hits']} hits of {entry['tuned_on']['queries']} queries, "
              f"{f['relevant']} relevant; on them: ECE@10 {f['ece_top10']:.4f}, log loss {f['log_loss']:.4f}")
    print(f"-> {calibration_path(index)}", file=sys.stderr)
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

    tc = tu.add_parser("calibration", help="fit each pipeline's mapping from its scores to P(relevant) on training "
                       "judgments and store it in <index>/tuning/calibration.json: hits then carry `relevance`, and "
                       "--min-relevance / min_relevance cut a ranking where it stops being likely relevant",
                       description="Fit, for each pipeline, a logistic regression from a hit's score and its query's "
                       "top scores (top score, gap, spread, the hit's z-score and rank, query length) to whether "
                       "the training qrels judge it relevant. A pipeline is calibrated only with the options and "
                       "models it was fitted with (a change leaves it uncalibrated, with a warning).")
    tc.add_argument("--index", required=True, help="index directory")
    tc.add_argument("--pipelines", required=True, help="pipelines to calibrate, comma-separated "
                    "(e.g. dense,hybrid,hybrid>>ltr,bm25>>attention)")
    tc.add_argument("--topics", required=True, help="TRAINING topics (never the test topics)")
    tc.add_argument("--qrels", required=True, help="qrels of the training topics")
    tc.add_argument("--fit-depth", type=int, default=20, help="hits a query fitted on (default 20)")
    tc.add_argument("--remove-identical", action="store_true",
                    help="drop hits whose docid equals the qid before fitting (BEIR's ignore_identical_ids; ArguAna)")
    tc.add_argument("--allow-test-topics", action="store_true", help=argparse.SUPPRESS)
    add_min_rel(tc, what="the calibration")
    add_pipeline_options(tc, depth=True, pipeline=False)
    tc.set_defaults(func=cmd_calibration)
