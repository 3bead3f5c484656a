"""`weir eval` and `weir experiment`: TREC runs evaluated with ir-measures; many pipelines compared with
significance tests, tables and plots."""

from __future__ import annotations

import os
import sys

from weir.cli.options import add_backend_option
from weir.core.types import InputError


def cmd_eval(args) -> int:
    import json

    from weir.evaluation.measures import DEFAULT_MEASURES, evaluate, format_table
    from weir.core.trec import read_qrels
    from weir.core.types import Run

    run = Run.read_trec(args.run)
    names = [m for m in args.measures.split(",") if m.strip()] if args.measures else list(DEFAULT_MEASURES)
    means = evaluate(run, read_qrels(args.qrels), names, min_rel=args.min_rel)
    if args.format == "json":
        print(json.dumps({"run": args.run, "qrels": args.qrels, "measures": means}, indent=2))
    else:
        print(format_table({os.path.basename(args.run): means}))
    return 0


def cmd_experiment(args) -> int:
    from weir.evaluation.experiment import Config, load_config, parse_pipelines, run_experiment
    from weir.evaluation.report import table

    settings = load_config(args.config) if args.config else {}
    given = {"topics": args.topics, "qrels": args.qrels, "baseline": args.baseline, "test": args.test,
             "alpha": args.alpha, "min_rel": args.min_rel, "k": args.k, "warmup": args.warmup}
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


def add_parsers(sub) -> None:
    from weir.cli.options import add_min_rel

    e = sub.add_parser("eval", help="evaluate a TREC run against qrels (ir-measures)")
    e.add_argument("--run", required=True, help="TREC run file")
    e.add_argument("--qrels", required=True, help="TREC qrels file (qid 0 docid rel)")
    e.add_argument("--measures", help="comma-separated ir-measures names (default: nDCG@10,RR@10,AP,R@100,R@1000)")
    add_min_rel(e)
    e.add_argument("--format", choices=("table", "json"), default="table")
    e.set_defaults(func=cmd_eval)

    x = sub.add_parser("experiment", help="run and compare pipelines (or run files): table, significance, plots",
                       description="Run each pipeline once over the topics (every pipeline over every --index), "
                       "or take existing run files, evaluate them with ir-measures, test each against the baseline "
                       "(paired test, Holm-corrected per measure), and write results.md/.json/.csv, per_query.csv, "
                       "the runs and plots to --out. Settings may come from a JSON/TOML file (--config); options "
                       "given here override it.")
    x.add_argument("--config", help="experiment file (.json or .toml) with the settings below")
    add_backend_option(x)
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
    add_min_rel(x, default=None)
    x.add_argument("--remove-identical", action="store_true",
                   help="drop hits whose docid equals the qid (BEIR's ignore_identical_ids; needed for ArguAna)")
    x.add_argument("-k", "--k", type=int, help="hits per query (default 1000)")
    x.add_argument("--warmup", type=int, help="queries run untimed through each pipeline first (default 20)")
    x.set_defaults(func=cmd_experiment)
