"""The reranking parts of the command line: reranker options for every pipeline command (``--depth``, model paths,
device, batch size) and `weir train ltr | attention | crossencoder`. Hooked into :mod:`weir.cli` by two calls."""

from __future__ import annotations

import argparse
import sys

from weir.types import InputError

RERANK_OPTIONS = ("depth", "ltr_model", "attention_model", "crossencoder_model", "device", "batch_size")


def add_rerank_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("rerankers (ltr, attention, crossencoder)")
    if "--depth" not in p._option_string_actions:  # `weir tune fusion` has its own --depth
        g.add_argument("--depth", type=int, default=None,
                       help="candidates each reranker rescores (default: the reranker's, 100); -k is how many "
                       "are returned")
    g.add_argument("--ltr-model", default=None, help="ltr: LightGBM model directory (default: models/ltr)")
    g.add_argument("--attention-model", default=None, help="attention: trained model directory (default: "
                   "models/attention, else the one `weir train attention` wrote to $WEIR_MODELS)")
    g.add_argument("--crossencoder-model", default=None, help="crossencoder: trained model directory")
    g.add_argument("--device", dest="rerank_device", default=None,
                   help="reranker device (default: cuda when available, else cpu)")
    g.add_argument("--rerank-batch-size", dest="batch_size", type=int, default=None,
                   help="pairs per forward pass (default: 64 on CPU, 256 on GPU)")


def rerank_options(args) -> dict:
    out = {}
    for key in RERANK_OPTIONS:
        value = getattr(args, "rerank_device" if key == "device" else key, None)
        if value is not None:
            out[key] = value
    if out.get("depth") is not None and out["depth"] < 1:
        raise InputError("--depth must be at least 1")
    return out


def cmd_train_ltr(args) -> int:
    from ranker.train_ltr import DataSet, TrainConfig, train

    main = DataSet(index=args.index, topics=args.topics, qrels=args.qrels, candidates=args.candidates,
                   first_stage=args.first_stage, depth=args.train_depth, max_queries=args.max_queries,
                   stage_runs=";".join(args.stage_run or []) or None)
    sets = [main] + [DataSet.parse(text) for text in args.also or []]
    params = {}
    for key in ("learning_rate", "num_leaves", "min_data_in_leaf"):
        if getattr(args, key) is not None:
            params[key] = getattr(args, key)
    config = TrainConfig(sets=sets, out=args.out, folds=args.folds, cv_run=args.cv_run, val_fraction=args.val_fraction,
                         seed=args.seed, rounds=args.rounds or (300 if args.rounds_by == "cv" else 1000),
                         rounds_by=args.rounds_by, inner_folds=args.inner_folds, init_from=args.init_from,
                         early_stopping=args.early_stopping, params=params,
                         options={"threads": args.threads}, binary_min_rel=args.binary_min_rel,
                         command=["weir"] + args.argv)
    card = train(config, log=lambda m: print(m, file=sys.stderr))
    final = card["metrics"]["final"]
    from ranker.train_ltr import _rounds_note

    print(f"ltr -> {args.out}: {final['train_queries']} training queries, {_rounds_note(final)}", file=sys.stderr)
    return 0


def add_train_parsers(tr) -> None:
    """`weir train ltr` (and, where present, the attention and cross-encoder trainers) on the `train` subparsers."""
    t = tr.add_parser("ltr", help="LightGBM lambdarank over lexical, dense and first-stage features",
                      description="Train a LightGBM lambdarank reranker. Candidates: --candidates RUN, else the "
                      "--first-stage pipeline over --index (top --train-depth). The number of boosting rounds is "
                      "chosen by nDCG@10 in an inner cross-validation over the training queries (--rounds-by cv, "
                      "default; robust with few queries), or by early stopping on a held-out share (holdout); "
                      "--folds K also writes a K-fold cross-validated run of the --topics queries (--cv-run). "
                      "Writes model.txt, features.json and card.json to --out.")
    t.add_argument("--index", required=True, help="index directory (bm25, and dense for the cosine feature)")
    t.add_argument("--topics", required=True, help="TRAINING topics (never a test split you report)")
    t.add_argument("--qrels", required=True, help="qrels of the training topics (graded labels are kept)")
    t.add_argument("--candidates", default=None, help="take candidates from this TREC run")
    t.add_argument("--first-stage", default="hybrid", help="first stage for candidates (default: hybrid)")
    t.add_argument("--train-depth", type=int, default=100, help="candidates per query (default 100)")
    t.add_argument("--max-queries", type=int, default=None, help="use at most this many training queries (seeded)")
    t.add_argument("--also", action="append", help="another training set: index=DIR,topics=FILE,qrels=FILE"
                   "[,candidates=RUN][,first_stage=NAME][,depth=N][,max_queries=N] (repeatable)")
    t.add_argument("--out", required=True, help="model directory to write (e.g. models/ltr)")
    t.add_argument("--folds", type=int, default=0, help="cross-validate over the --topics queries in K folds")
    t.add_argument("--cv-run", default=None, help="write the cross-validated run here (with --folds)")
    t.add_argument("--binary-min-rel", type=int, default=1, help="grade counted relevant by binary measures")
    t.add_argument("--stage-run", action="append", metavar="NAME:RUN", help="an earlier stage's scores of the "
                   "candidates from a run file, as feature NAME (attention, deepimpact, deepct), e.g. "
                   "attention:runs/attention-cv.trec (repeatable)")
    t.add_argument("--rounds-by", choices=("cv", "holdout"), default="cv",
                   help="choose the number of rounds by inner cross-validation (cv, default) or early stopping on "
                   "a held-out share of the training queries (holdout)")
    t.add_argument("--inner-folds", type=int, default=4, help="cv: inner folds (default 4)")
    t.add_argument("--init-from", default=None, metavar="FEATURE", help="boost from this feature standardized per "
                   "query (e.g. attention_norm: the trees learn corrections to an earlier stage) instead of from 0")
    t.add_argument("--val-fraction", type=float, default=0.2, help="holdout: training queries held out")
    t.add_argument("--rounds", type=int, default=None, help="boosting rounds at most (default 300 with cv, 1000 with "
                   "holdout)")
    t.add_argument("--early-stopping", type=int, default=50, help="holdout: rounds without validation gain (default 50)")
    t.add_argument("--learning-rate", type=float, default=None)
    t.add_argument("--num-leaves", type=int, default=None)
    t.add_argument("--min-data-in-leaf", type=int, default=None)
    t.add_argument("--seed", type=int, default=13)
    t.add_argument("--threads", type=int, default=None, help="search threads (default: all cores)")
    t.set_defaults(func=cmd_train_ltr)
    try:
        from ranker.train_attention import add_parsers
    except ImportError:
        return
    add_parsers(tr)
