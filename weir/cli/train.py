"""`weir train deepct | deepimpact | ltr | attention | crossencoder`: fit a model on training data and write its
directory, model card included."""

from __future__ import annotations

import sys


def cmd_term_weighting(args) -> int:
    from weir.training.term_weighting import TrainConfig, train

    config = TrainConfig(kind=args.kind, collection=args.collection, queries=args.queries, qrels=args.qrels,
                         train=args.train or [], self_supervised=args.self_supervised or [], shape=args.shape,
                         pseudo_queries=args.pseudo_queries, min_rel=args.min_rel, max_queries=args.max_queries,
                         out=args.out, base_model=args.base_model, max_length=args.max_length, titles=args.titles,
                         epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, negatives=args.negatives,
                         negative_depth=args.negative_depth, val_fraction=args.val_fraction, seed=args.seed,
                         bm25_index=args.bm25_index, device=args.device, command=["weir"] + args.argv,
                         features=[f.strip() for f in args.features.split(",") if f.strip()], draws=args.draws,
                         validate_by=args.validate_by, members=args.members, shrink=args.shrink)
    card = train(config, log=lambda m: print(m, file=sys.stderr))
    v = card["metrics"]["validation"]
    print(f"{args.kind} -> {args.out}: validation nDCG@10 {v['nDCG@10']:.4f} (epoch {v['epoch']}, mean over "
          f"{len(card['training_data'])} source(s)); encode {card['timing']['encode_seconds']}s, train "
          f"{card['timing']['train_seconds']}s", file=sys.stderr)
    return 0


def cmd_ltr(args) -> int:
    from weir.training.common import TrainingSet
    from weir.training.ltr import TrainConfig, rounds_note, train

    main = TrainingSet(index=args.index, topics=args.topics, qrels=args.qrels, candidates=args.candidates,
                       first_stage=args.first_stage, depth=args.train_depth, max_queries=args.max_queries,
                       stage_runs=";".join(args.stage_run or []) or None)
    sets = [main] + [TrainingSet.parse(text) for text in args.also or []]
    params = {key: getattr(args, key) for key in ("learning_rate", "num_leaves", "min_data_in_leaf")
              if getattr(args, key) is not None}
    from weir.cli.options import key_values

    params.update(key_values(args.param or [], "--param"))
    config = TrainConfig(sets=sets, out=args.out, folds=args.folds, cv_run=args.cv_run, val_fraction=args.val_fraction,
                         seed=args.seed, rounds=args.rounds or (300 if args.rounds_by == "cv" else 1000),
                         rounds_by=args.rounds_by, rounds_rule=args.rounds_rule, inner_folds=args.inner_folds,
                         inner_by=args.inner_by, init_from=args.init_from, monotone=args.monotone,
                         early_stopping=args.early_stopping, params=params,
                         min_rel=args.min_rel, members=args.members, command=["weir"] + args.argv)
    card = train(config, log=lambda m: print(m, file=sys.stderr))
    final = card["metrics"]["final"]
    print(f"ltr -> {args.out}: {final['train_queries']} training queries, {rounds_note(final)}", file=sys.stderr)
    return 0


def cmd_attention(args) -> int:
    from weir.training.attention import AttnTrainConfig
    from weir.training.attention_joint import train_joint
    from weir.training.attention_late import train_late

    late = getattr(args, "interaction", "joint") == "late"
    config = AttnTrainConfig(kind=args.kind, index=args.index, topics=args.topics, qrels=args.qrels,
                             candidates=args.candidates, out=args.out, base_model=args.base_model,
                             depth=args.train_depth, max_length=args.max_length, train_layers=args.train_layers,
                             steps=args.steps if args.steps is not None else (200 if late else 120),
                             group=args.group, lr=args.lr if args.lr is not None else (3e-3 if late else 5e-5),
                             entropy=args.entropy, select=args.select,
                             idf=args.idf, calibrate=not args.no_calibration, folds=args.folds, cv_run=args.cv_run,
                             min_rel=args.min_rel, seed=args.seed, device=args.device,
                             cv_only=args.cv_only, select_queries=args.select_queries, cache=args.cache,
                             validation=(args.validation if args.validation is not None else 0.2 if late else 0.0),
                             interaction=getattr(args, "interaction", "joint"), heads=getattr(args, "heads", 1),
                             temperature=getattr(args, "temperature", 0.05),
                             eval_every=getattr(args, "eval_every", 25), also=getattr(args, "also", None) or [],
                             distill=args.distill, distill_temperature=args.distill_temperature,
                             command=["weir"] + args.argv)
    card = (train_late if late else train_joint)(config, log=lambda m: print(m, file=sys.stderr))
    seconds = card["metrics"]["final"]["train_seconds"]
    print(f"{args.kind} -> {args.out}: " + (f"trained in {seconds}s" if seconds is not None else "cross-validation only"),
          file=sys.stderr)
    return 0


def cmd_quality(args) -> int:
    from weir.training.quality import QualityTrainConfig, train

    config = QualityTrainConfig(estimator=args.estimator, train=args.train or [], out=args.out,
                                base_model=args.base_model, layers=args.layers, max_length=args.max_length,
                                hidden=args.hidden, negatives=args.negatives, negative_depth=args.negative_depth,
                                min_rel=args.min_rel, judged_negatives=args.judged_negatives, val_fraction=args.val_fraction, prune_at=args.prune_at,
                                epochs=args.epochs, lr=args.lr, rounds=args.rounds, seed=args.seed,
                                device=args.device, command=["weir"] + args.argv)
    card = train(config, log=lambda m: print(m, file=sys.stderr))
    print(f"quality ({args.estimator}) -> {args.out}: trained in {card['metrics']['train_seconds']}s", file=sys.stderr)
    return 0


def add_parsers(sub) -> None:
    tr = sub.add_parser("train", help="train a model: term weighting heads (DeepCT, DeepImpact), LTR, attention "
                        "rerankers").add_subparsers(dest="train_command", required=True, metavar="MODEL")
    _add_term_weighting(tr)
    _add_ltr(tr)
    _add_attention(tr)
    _add_quality(tr)


def _add_term_weighting(tr) -> None:
    for kind, what in (("deepct", "DeepCT: per-term regression of query term recall (masked MSE)"),
                       ("deepimpact", "DeepImpact: impacts trained with softmax cross-entropy over BM25 hard negatives")):
        t = tr.add_parser(kind, help=what, description=what + ". The backbone is frozen; its term vectors are "
                          "computed once per collection and cached ($WEIR_CACHE, default ~/.cache/weir); only the head "
                          "trains. By default (--shape bm25) the head learns a factor in [1/2, 2] on a BM25-shaped "
                          "prior computed from the collection being indexed, so that it degrades towards BM25 where "
                          "it has not learned. Training data: --train (repeatable, several collections weighed "
                          "against each other), or --collection --queries --qrels, and/or --self-supervised "
                          "COLLECTION (pseudo-queries from the collection itself: titles, held-out sentences; "
                          "adapts the weights to a collection without judgments). Writes head.pt and card.json (the "
                          "model card) to --out.")
        t.add_argument("--train", action="append", metavar="COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]]",
                       help="training judgments over a collection (repeatable; TRAINING splits only); WEIGHT (default "
                       "1) multiplies its share of the steps (see --draws), MIN_REL the grade counted relevant "
                       "(default --min-rel)")
        t.add_argument("--self-supervised", action="append", metavar="COLLECTION[:WEIGHT]",
                       help="pseudo-queries made from this collection: titles ask for their passages, held-out "
                       "sentences for the rest of theirs; BM25-mined negatives (repeatable)")
        t.add_argument("--pseudo-queries", type=int, default=2000, help="pseudo-queries per self-supervised "
                       "collection at most (default 2000, seeded)")
        t.add_argument("--shape", choices=("bm25", "free"), default="bm25", help="bm25 (default): a bounded learned "
                       "factor on a BM25-shaped prior; free: the published head, its output the weight")
        t.add_argument("--collection", help="collection directory (corpus.jsonl), with --queries and --qrels")
        t.add_argument("--queries", help="TRAINING queries (never a test split you report)")
        t.add_argument("--qrels", help="qrels of the training queries")
        t.add_argument("--min-rel", type=int, default=1, help="grade counted relevant where a source does not say")
        t.add_argument("--max-queries", type=int, default=3000, help="judged queries per source at most (a seeded "
                       "sample; default 3000)")
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
        t.add_argument("--draws", choices=("queries", "sources"), default="queries", help="how a step draws its "
                       "queries from several sources: queries (default): every training query equally likely, times "
                       "its source's WEIGHT, and the validation mean over queries; sources: every source equally "
                       "likely, times its WEIGHT, whatever its size (a small source's queries then repeat many times "
                       "an epoch)")
        t.add_argument("--validate-by", choices=("queries", "sets"), default="queries", help="how the validation "
                       "mean that chooses the epoch (and the deepimpact+bm25 weight) weighs the judged sources: "
                       "queries (default): as --draws says; sets: each by its WEIGHT alone, whatever its number of "
                       "queries, so that the head kept helps every collection, not mostly the largest")
        t.add_argument("--members", type=int, default=1, help="train N heads that differ only in their seed "
                       "(--seed, +1000, ...: their initialization and the order of their steps; the same split and "
                       "validation queries) and write them as one head whose weight averages theirs (a BM25-shaped "
                       "head: the geometric mean of their factors), so that the weights do not hang on one seed's "
                       "luck; each member keeps its own best epoch (default 1; N times the training time)")
        t.add_argument("--shrink", action="store_true", help="with --members 2 or more and the bm25 shape: shrink "
                       "each term's mean correction towards the BM25 prior by how much the members disagree on it "
                       "(empirical Bayes: the correction's variance over the training collections' terms, written "
                       "on the card, against the members' variance on the term): a correction the members do not "
                       "agree on is applied less (the shipped models/deepimpact is --members 3 --shrink)")
        t.set_defaults(func=cmd_term_weighting, kind=kind)


def _add_ltr(tr) -> None:
    t = tr.add_parser("ltr", help="LightGBM lambdarank over lexical, dense and first-stage features",
                      description="Train a LightGBM lambdarank reranker. Candidates: --candidates RUN, else the "
                      "--first-stage pipeline over --index (top --train-depth). The number of boosting rounds is "
                      "chosen by nDCG@10 in an inner cross-validation over the training queries of every set (--rounds-by "
                      "cv, default; robust with few queries; --rounds-rule), or by early stopping on a held-out share (holdout); "
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
    t.add_argument("--inner-folds", type=int, default=4, help="cv with --inner-by queries: inner folds of every "
                   "training set (default 4; each set counts equally in the inner score)")
    t.add_argument("--inner-by", choices=("queries", "sets"), default="queries",
                   help="cv: what an inner fold holds out: a share of every set's queries (queries, default; "
                   "--inner-folds of them), or one whole training set, scored by a model of the others (sets: "
                   "leave one collection out, so the rounds chosen are those that carry over to a collection the "
                   "trees never saw; needs 3 sets or more)")
    t.add_argument("--rounds-rule", choices=("1se-paired", "1se", "best"), default="1se-paired",
                   help="cv: the fewest rounds whose fold-by-fold shortfall from the best inner score is within one "
                   "standard error of that paired difference (1se-paired, default: trees, and with --init-from any "
                   "tree at all, must beat the simpler model by more than the inner folds disagree about the gain), "
                   "the fewest within one standard error of the best score itself (1se, stricter), or the best "
                   "(best); chosen by leaving one collection out, models/RESULTS.md")
    t.add_argument("--monotone", action="store_true", help="constrain the features of known direction (BM25, "
                   "coverage, cosine, earlier stages' scores, ...) to act only in that direction")
    t.add_argument("--param", action="append", metavar="KEY=VALUE", help="a LightGBM parameter, e.g. lambda_l2=10 "
                   "or max_depth=3 (repeatable)")
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
    t.add_argument("--members", type=int, default=1, help="train N boosters that differ only in their seed (--seed, "
                   "+1000, ...: row and feature sampling, and with cv each member's own inner folds) and average their "
                   "scores, so that the model does not hang on one seed's luck; with cv the rounds, the same for "
                   "every member, are chosen on the members' mean inner curve (repeated cross-validation) (default "
                   "1; N times the training time)")
    t.set_defaults(func=cmd_ltr)


def _add_attention(tr) -> None:
    for kind, what in (("attention", "attention reranker: by default (--interaction late) train the relevance "
                        "attention layer over the backbone's per-segment token states, the checkpoint chosen on "
                        "held-out training queries; --interaction joint fine-tunes top layers on the calibrated "
                        "query->passage attention score, then selects heads QRHead-style"),
                       ("crossencoder", "cross-encoder baseline: the same backbone with a linear head on [CLS]")):
        t = tr.add_parser(kind, help=what, description=what + ". Writes backbone/, the head file and card.json.")
        t.add_argument("--index", required=True, help="index directory (documents' text)")
        t.add_argument("--topics", required=True, help="TRAINING topics (never a test split you report)")
        t.add_argument("--qrels", required=True, help="qrels of the training topics")
        t.add_argument("--candidates", required=True, help="TREC run whose top --train-depth are the candidates")
        t.add_argument("--out", required=True, help="model directory to write")
        t.add_argument("--base-model", default="all-MiniLM-L6-v2", help="backbone: Hugging Face name or local path")
        t.add_argument("--train-depth", type=int, default=100)
        t.add_argument("--max-length", type=int, default=128, help="word pieces per pair (default 128)")
        t.add_argument("--train-layers", type=int, default=2, help="top layers fine-tuned (default 2)")
        t.add_argument("--steps", type=int, default=None, help="training steps, one query each (default: 200 late, "
                       "120 joint and crossencoder)")
        t.add_argument("--group", type=int, default=8, help="passages per group: 1 relevant + negatives")
        t.add_argument("--lr", type=float, default=None, help="learning rate of the trained layers (default: 3e-3 "
                       "late, 5e-5 joint and crossencoder)")
        t.add_argument("--entropy", type=float, default=0.0, help="attention: entropy penalty weight (ReAttn)")
        t.add_argument("--select", type=int, default=8, help="attention: heads kept (QRHead-style selection); 0: "
                       "keep the trained combination of the trained layers' heads")
        t.add_argument("--validation", type=float, default=None, help="attention: share of the training queries held "
                       "out to choose the score form (joint; default 0) or the checkpoint (late; default 0.2) by "
                       "nDCG@10")
        if kind == "attention":
            t.add_argument("--interaction", choices=("joint", "late"), default="late",
                           help="late (default): query and passage segments attend within themselves through the "
                           "frozen backbone and a trained relevance attention layer reads query->passage attention "
                           "on top (PreTTR-style; passages encoded once); joint: the whole input through every "
                           "layer, the top --train-layers fine-tuned, heads selected QRHead-style")
            t.add_argument("--heads", type=int, default=1, help="late: heads of the relevance attention layer "
                           "(default 1, full width)")
            t.add_argument("--temperature", type=float, default=0.05, help="late: the layer starts as token cosine "
                           "similarity over this temperature (default 0.05)")
            t.add_argument("--eval-every", type=int, default=25, help="late: steps between validation checkpoints")
            t.add_argument("--also", action="append", help="late: another training set, fitted on in every fold: "
                           "index=DIR,topics=FILE,qrels=FILE,candidates=RUN[,depth=N] (repeatable)")
        t.add_argument("--idf", action="store_true", help="attention: ReAttn cross-candidate IDF re-weighting")
        t.add_argument("--no-calibration", action="store_true", help="attention: no content-free (N/A) calibration")
        t.add_argument("--folds", type=int, default=0)
        t.add_argument("--cv-run", default=None)
        t.add_argument("--cv-only", action="store_true", help="with --folds: write the CV run and card, no final model")
        t.add_argument("--select-queries", type=int, default=10, help="attention: training queries heads are ranked on "
                       "(their top 30 candidates)")
        t.add_argument("--binary-min-rel", type=int, default=1)
        t.add_argument("--seed", type=int, default=13)
        t.add_argument("--device", default=None)
        t.add_argument("--distill", type=float, default=0.0, help="weight of a KL term towards the backbone's own "
                       "bi-encoder cosine over each group (needs the index's dense component over the candidates)")
        t.add_argument("--distill-temperature", type=float, default=0.05)
        t.add_argument("--cache", default=None, help="file keeping the frozen layers' output of every input, reused "
                       "by later runs with the same backbone, --train-layers and --max-length")
        t.set_defaults(func=cmd_attention, kind=kind)


def _add_quality(tr) -> None:
    what = ("passage quality estimator for static pruning (`weir index build --prune`): the QualT5 recipe, relevant "
            "passages against BM25-retrieved unjudged ones, the query never shown")
    t = tr.add_parser("quality", help=what, description=what.capitalize() + ". --estimator learned: a small head "
                      "over the first --layers layers of the backbone (mean-pooled, first --max-length word pieces) "
                      "and the surface features; surface: LightGBM over the surface features. The epoch or number of "
                      "rounds is chosen by how many of the held-out training queries' relevant documents survive "
                      "pruning --prune-at of the corpus. Writes card.json and head.pt (learned) or model.txt "
                      "(surface) to --out.")
    t.add_argument("--estimator", choices=("learned", "surface"), default="learned")
    t.add_argument("--train", action="append", metavar="COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]]",
                   help="training judgments over a collection (repeatable; TRAINING splits only, never a test split "
                   "you report); WEIGHT (default 1) is the source's share of the loss, MIN_REL the grade counted "
                   "relevant in its qrels (default --min-rel)")
    t.add_argument("--out", required=True, help="model directory to write (e.g. models/quality-learned)")
    t.add_argument("--base-model", default="all-MiniLM-L6-v2", help="backbone: Hugging Face name or local path")
    t.add_argument("--layers", type=int, default=0, help="learned: backbone layers read (default 0: the word-piece "
                   "embeddings alone, ten times cheaper than two layers and as good here)")
    t.add_argument("--max-length", type=int, default=128, help="learned: word pieces read per passage (default 128)")
    t.add_argument("--hidden", type=int, default=64, help="learned: hidden units of the head (default 64)")
    t.add_argument("--negatives", type=int, default=1, help="BM25 negatives per positive of a query (default 1)")
    t.add_argument("--negative-depth", type=int, default=20, help="BM25 depth negatives come from (default 20)")
    t.add_argument("--judged-negatives", action="store_true", help="also draw negatives from each training query's "
                   "judged non-relevant documents (pooled runs, as TREC DL's)")
    t.add_argument("--min-rel", type=int, default=1, help="grade counted relevant where a --train source does not say "
                   "(default 1; 2 for TREC DL)")
    t.add_argument("--val-fraction", type=float, default=0.2, help="training queries held out for the choice")
    t.add_argument("--prune-at", type=float, default=0.25, help="fraction pruned when choosing (default 0.25)")
    t.add_argument("--epochs", type=int, default=40, help="learned: epochs at most (default 40)")
    t.add_argument("--lr", type=float, default=1e-3, help="learned: learning rate (default 1e-3)")
    t.add_argument("--rounds", type=int, default=500, help="surface: boosting rounds at most (default 500)")
    t.add_argument("--seed", type=int, default=13)
    t.add_argument("--device", default=None, help="backbone device (default: cuda when available, else cpu)")
    t.set_defaults(func=cmd_quality)
