"""`weir quality score | sweep`: passage quality for static pruning: score a collection with an estimator (the
scores cached for later builds, their quantiles printed), or sweep estimators and pruned fractions over a collection
and its topics (indexes built, pipelines evaluated, equivalence to the unpruned index tested)."""

from __future__ import annotations

import sys


def cmd_score(args) -> int:
    from weir.indexer.collections import Collection
    from weir.indexer.quality import open_estimator
    from weir.indexer.quality.cache import entry, scores_for

    corpus = Collection.open(args.collection).corpus(skip_empty=args.skip_empty)
    estimator = open_estimator(args.estimator, seed=args.seed, device=args.device)
    documents = list(corpus)
    scores, record = scores_for(estimator, documents, corpus.stats.sha256)
    where = entry(corpus.stats.sha256, estimator)
    how = "from the cache" if record["cached"] else f"at {record['passages_per_second']:.0f} passages/s"
    print(f"{estimator.name}: {len(documents)} documents scored {how}; cached in {where}", file=sys.stderr)
    q = record["quantiles"]
    print("quantile  score")
    for key in ("0.00", "0.10", "0.25", "0.40", "0.50", "0.75", "0.90", "1.00"):
        print(f"{key:>8}  {q[key]:.6g}")
    return 0


def cmd_sweep(args) -> int:
    from weir.cli.options import fractions, key_values
    from weir.evaluation.pruning import SweepConfig, sweep
    from weir.training.quality import fit

    config = SweepConfig(collection=args.collection, topics=args.topics, qrels=args.qrels, out=args.out,
                         estimators=[e.strip() for e in args.estimators.split(",") if e.strip()],
                         fractions=fractions(args.fractions),
                         components=[c.strip() for c in args.with_.split(",") if c.strip()],
                         pipelines=[p.strip() for p in args.pipelines.split(",") if p.strip()],
                         measure=args.measure, k=args.k, min_rel=args.min_rel, margin=args.margin,
                         alpha=args.alpha, cross_fit=args.cross_fit,
                         train_options=key_values(args.train_option or [], "--train-option"),
                         remove_identical=args.remove_identical, reuse_vectors=not args.encode_again,
                         skip_empty=args.skip_empty,
                         seed=args.seed, random_seeds=args.random_seeds, device=args.device,
                         command=["weir"] + args.argv)
    record = sweep(config, log=lambda m: print(m, file=sys.stderr), train_estimator=fit)
    for estimator, by_pipeline in record["largest_equivalent_fraction"].items():
        print(f"{estimator}: largest fraction equivalent to the unpruned index: "
              + ", ".join(f"{p} {f:.0%}" for p, f in by_pipeline.items()))
    return 0


def add_parsers(sub) -> None:
    from weir.cli.options import add_min_rel

    group = sub.add_parser("quality", help="passage quality for static pruning: score a collection, sweep pruned "
                           "fractions").add_subparsers(dest="quality_command", required=True, metavar="ACTION")
    s = group.add_parser("score", help="score a collection with a quality estimator; print the score quantiles",
                         description="Score every document of a collection with a quality estimator (higher is "
                         "better) and cache the scores ($WEIR_CACHE/quality), so that `weir index build --prune` "
                         "reads them instead of scoring again. Prints the quantiles, which is where a "
                         "--prune-threshold comes from.")
    s.add_argument("--collection", required=True, help="collection directory or corpus file")
    s.add_argument("--estimator", required=True, help="learned, surface, length, entropy, stopwords, punctuation, "
                   "duplicates, random, or a model directory from `weir train quality`")
    s.add_argument("--seed", type=int, default=0, help="seed of the random estimator")
    s.add_argument("--skip-empty", action="store_true", help="leave out empty documents instead of failing")
    s.add_argument("--device", default=None)
    s.set_defaults(func=cmd_score)

    w = group.add_parser("sweep", help="build indexes pruned at several fractions per estimator, evaluate them "
                         "against the unpruned index (paired t-test and TOST equivalence), write tables and a plot",
                         description="For each estimator and fraction, build an index of --collection with that "
                         "fraction pruned (--with components), run --pipelines over --topics, and compare every "
                         "pruned index with the unpruned one query by query: a paired t-test and two one-sided tests "
                         "(TOST) at an equivalence margin of --margin times the unpruned mean; each estimator is also "
                         "tested against random pruning of the same fraction. Writes sweep.md, sweep.json and "
                         "sweep.png to --out (indexes under --out/indexes, reused by a later sweep). With "
                         "--cross-fit K, the learned and surface estimators are trained per fold on the other folds' "
                         "judgments of --topics (for collections without a training split).")
    w.add_argument("--collection", required=True)
    w.add_argument("--topics", required=True, help="evaluation topics")
    w.add_argument("--qrels", required=True)
    w.add_argument("--out", required=True, help="directory for the sweep's indexes, tables and plot")
    w.add_argument("--estimators", default="learned,surface,random", help="comma-separated: NAME, LABEL=NAME or "
                   "LABEL=MODEL_DIR (default learned,surface,random)")
    w.add_argument("--fractions", default="0.1,0.25,0.4,0.5", help="fractions pruned (default 0.1,0.25,0.4,0.5; "
                   "the unpruned index is always built)")
    w.add_argument("--with", dest="with_", default="bm25,dense", help="index components (default bm25,dense)")
    w.add_argument("--pipelines", default="bm25,hybrid", help="pipelines evaluated (default bm25,hybrid)")
    w.add_argument("--measure", default="nDCG@10")
    w.add_argument("--k", type=int, default=1000)
    add_min_rel(w)
    w.add_argument("--margin", type=float, default=0.02, help="equivalence margin, a share of the unpruned mean "
                   "(default 0.02)")
    w.add_argument("--alpha", type=float, default=0.05)
    w.add_argument("--cross-fit", type=int, default=0, metavar="K", help="train learned/surface per fold on the "
                   "other folds' judgments of --topics (K folds)")
    w.add_argument("--train-option", action="append", metavar="KEY=VALUE", help="a `weir train quality` setting "
                   "for cross-fitted estimators, e.g. judged_negatives=true, layers=0 (repeatable)")
    w.add_argument("--remove-identical", action="store_true", help="drop hits whose id is the query's (ArguAna)")
    w.add_argument("--skip-empty", action="store_true", help="leave out empty documents instead of failing")
    w.add_argument("--encode-again", action="store_true", help="encode every pruned index's dense component anew "
                   "(default: copy the unpruned index's vectors of the documents kept; the same vectors, hours less "
                   "on a CPU)")
    w.add_argument("--seed", type=int, default=0, help="seed of the random estimator (its first draw)")
    w.add_argument("--random-seeds", type=int, default=1, metavar="N", help="random pruning's row is each query's "
                   "mean over N draws (seeds SEED..SEED+N-1, an index each): the expected loss of pruning at random, "
                   "a steadier baseline than one draw on small collections (default 1)")
    w.add_argument("--device", default=None)
    w.set_defaults(func=cmd_sweep)
