"""`weir train MODEL | --recipe NAME|FILE`: fit a model on training data and write its directory, model card included.

The command line holds what a user needs (training data, where to write, the backbone, epochs, the relevance
threshold, the device); every other setting, the research knobs included, lives in a recipe (`weir/models/*/
recipe.toml`, :mod:`weir.training.recipes`) or is changed for one run with ``--set KEY=VALUE``. A flag of an earlier
release that is a recipe setting now is refused with the ``--set`` to use instead.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from weir.cli.options import add_min_rel, key_values
from weir.core.types import InputError

MODELS = ("deepct", "deepimpact", "ltr", "attention", "crossencoder", "quality")


@dataclass(frozen=True)
class Trainer:
    """What `weir train MODEL` runs: its settings class and training function (by module path, imported when run),
    and the command-line flags it has beside the common ones (argparse dest -> setting)."""

    config: str
    train: str
    flags: tuple[str, ...]
    what: str

    def load(self, name: str):
        import importlib

        module, _, attr = getattr(self, name).rpartition(".")
        return getattr(importlib.import_module(module), attr)


TERM_WEIGHTING = ("weir.training.term_weighting.TrainConfig", "weir.training.term_weighting.train",
                  ("self_supervised", "base_model", "epochs", "min_rel", "device"))
ATTENTION = ("weir.training.attention.AttnTrainConfig", "weir.training.attention_late.train_late",
             ("base_model", "folds", "cv_run", "min_rel", "device"))
TRAINERS = {
    "deepct": Trainer(*TERM_WEIGHTING, "DeepCT term weights: a head on the frozen backbone's term vectors, trained on "
                      "query term recall (BM25-shaped by default: an untrained head is BM25)"),
    "deepimpact": Trainer(*TERM_WEIGHTING, "DeepImpact impacts: a head on the frozen backbone's term vectors, trained "
                          "with softmax cross-entropy over BM25 hard negatives (BM25-shaped by default)"),
    "ltr": Trainer("weir.training.ltr.TrainConfig", "weir.training.ltr.train", ("folds", "cv_run", "min_rel"),
                   "LightGBM lambdarank over lexical, dense and earlier stages' features of a first stage's candidates"),
    "attention": Trainer(*ATTENTION, "the attention reranker: by default a relevance attention layer over the "
                         "backbone's per-segment token states (late interaction), the checkpoint chosen on held-out "
                         "training queries"),
    "crossencoder": Trainer(*ATTENTION, "the cross-encoder baseline: the same backbone with a linear head on [CLS]"),
    "quality": Trainer("weir.training.quality.QualityTrainConfig", "weir.training.quality.train",
                       ("estimator", "base_model", "min_rel", "device"),
                       "a passage quality estimator for static pruning (`weir index build --prune`): the QualT5 "
                       "recipe, relevant passages against BM25-retrieved unjudged ones, the query never shown"),
}


def cmd_train(args) -> int:
    from weir.core.runtime import cache_dir
    from weir.training.recipes import Recipe, settings

    recipe = Recipe.load(args.recipe) if args.recipe else None
    if recipe is not None and recipe.model != args.model:
        raise InputError(f"the recipe {recipe.describe()} trains {recipe.model}, not {args.model}")
    trainer = TRAINERS[args.model]
    values = dict(recipe.parameters) if recipe else {}
    values.update({f: getattr(args, f) for f in trainer.flags if getattr(args, f, None) is not None})
    for key, value in key_values(args.set or [], "--set").items():
        if "." in key:  # params.num_leaves=7: one entry of a table setting, the rest kept
            table, _, entry = key.partition(".")
            values[table] = {**values.get(table, {}), entry: value}
        else:
            values[key] = value
    sets = command_line_sets(args) or (recipe.sets if recipe else [])
    out = args.out or (str(cache_dir("models", recipe.name)) if recipe and recipe.name else None)
    if out is None:
        raise InputError("--out DIR: where to write the model (a recipe of a shipped model defaults to "
                         "$WEIR_MODELS/NAME)")
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    config = settings(args.model, trainer.load("config"), sets=sets, values=values, out=out,
                      command=["weir"] + args.argv, log=log)
    if args.model in ("attention", "crossencoder") and config.interaction == "joint":
        from weir.training.attention_joint import train_joint as train
    else:
        train = trainer.load("train")
    card = train(config, log=log)
    print(f"{args.model} -> {out}: {summary(args.model, card)}", file=sys.stderr)
    return 0


def command_line_sets(args) -> list:
    """The training sets given by flags: ``--train`` (repeatable), or the set of ``--index --topics --qrels
    [--candidates]`` and ``--also``."""
    from weir.training.common import TrainingSet

    sets = [TrainingSet.parse(text) for text in getattr(args, "train", None) or []]
    if getattr(args, "topics", None) or getattr(args, "index", None):
        if not (args.topics and args.qrels):
            raise InputError("--topics and --qrels go together (with --index, and --candidates where the trainer "
                             "reranks a run)")
        sets.append(TrainingSet(index=args.index, topics=args.topics, qrels=args.qrels, candidates=args.candidates))
    return sets + [TrainingSet.parse(text) for text in getattr(args, "also", None) or []]


def summary(model: str, card: dict) -> str:
    """The line a finished training prints: what chose the model, and what it cost."""
    metrics = card["metrics"]
    if model in ("deepct", "deepimpact"):
        v = metrics["validation"]
        return (f"validation nDCG@10 {v['nDCG@10']:.4f} (epoch {v['epoch']}, mean over {len(card['training_data'])} "
                f"source(s)); encode {card['timing']['encode_seconds']}s, train {card['timing']['train_seconds']}s")
    if model == "ltr":
        from weir.training.ltr import rounds_note

        return f"{metrics['final']['train_queries']} training queries, {rounds_note(metrics['final'])}"
    if model == "quality":
        return f"trained in {metrics['train_seconds']}s"
    seconds = metrics["final"]["train_seconds"]
    return f"trained in {seconds}s" if seconds is not None else "cross-validation only"


def add_parsers(sub) -> None:
    tr = sub.add_parser("train", help="train a model (term weighting heads, LTR, attention rerankers, quality "
                        "estimators), from flags or a recipe", description="Train a model and write its directory "
                        "with its model card. `weir train --recipe NAME` retrains the shipped model NAME (weir/models/"
                        "NAME/recipe.toml); `weir train MODEL --recipe FILE` trains from a recipe of your own; flags "
                        "given on the command line win over the recipe, --set KEY=VALUE over both.")
    models = tr.add_subparsers(dest="model", required=True, metavar="MODEL")
    for name, trainer in TRAINERS.items():
        t = models.add_parser(name, help=trainer.what.split(":")[0], description=trainer.what[0].upper()
                              + trainer.what[1:] + ". Writes the model directory (card.json included) to --out.")
        _add_common(t)
        _add_data(t, name)
        _add_settings(t, name)
        t.set_defaults(func=cmd_train)


def _add_common(t) -> None:
    t.add_argument("--recipe", metavar="NAME|FILE", help="train from a recipe: a shipped model's name (deepimpact, "
                   "ltr, ...) or a recipe.toml")
    t.add_argument("--out", help="model directory to write (default with a shipped model's recipe: $WEIR_MODELS/NAME, "
                   "~/.cache/weir/models/NAME)")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="one setting of the trainer, any key of a "
                   "recipe's [parameters] (epochs=4, members=3, shrink=true, seed=7; a table's entry as "
                   "params.num_leaves=7); repeatable")


def _add_data(t, name: str) -> None:
    if name in ("deepct", "deepimpact", "quality"):
        t.add_argument("--train", action="append", metavar="COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]]",
                       help="training judgments over a collection (repeatable; TRAINING splits only, never a test "
                       "split you report): WEIGHT (default 1) its share, MIN_REL the grade counted relevant in it")
        return
    t.add_argument("--index", help="index directory of the training collection (bm25; and dense for LTR's cosine)")
    t.add_argument("--topics", help="TRAINING topics (never a test split you report)")
    t.add_argument("--qrels", help="qrels of the training topics (graded labels are kept)")
    t.add_argument("--candidates", help="TREC run whose top candidates are trained on" + (
        " (default: the hybrid first stage over --index)" if name == "ltr" else ""))
    if name == "ltr":
        t.add_argument("--also", action="append", metavar="index=DIR,topics=FILE,qrels=FILE[,...]",
                       help="another training set (repeatable; keys of a recipe's [[train]] table)")


def _add_settings(t, name: str) -> None:
    flags = TRAINERS[name].flags
    if "self_supervised" in flags:
        t.add_argument("--self-supervised", action="append", metavar="COLLECTION[:WEIGHT]",
                       help="pseudo-queries made from this collection's own text (repeatable): adapts the weights "
                       "to a collection without judgments")
    if "estimator" in flags:
        t.add_argument("--estimator", choices=("learned", "surface"), help="learned (default): a small head over "
                       "the backbone's word-piece embeddings and surface features; surface: LightGBM over the "
                       "surface features")
    if "base_model" in flags:
        t.add_argument("--base-model", help="backbone: a Hugging Face name or local path (default all-MiniLM-L6-v2)")
    if "epochs" in flags:
        t.add_argument("--epochs", type=int, help="epochs at most; validation keeps the best (default 10 "
                       "deepimpact, 20 deepct)")
    if "folds" in flags:
        t.add_argument("--folds", type=int, help="also cross-validate over the training queries in K folds")
        t.add_argument("--cv-run", help="with --folds: write the cross-validated run here")
    add_min_rel(t, "the training judgments and validation", default=None)
    if "device" in flags:
        t.add_argument("--device", help="backbone device (default: cuda when available, else cpu)")


def retired_setting_hint(argv: list[str], unknown: list[str]) -> str | None:
    """For `weir train MODEL --some-knob ...`, whose ``unknown`` flags argparse refused: the ``--set`` that replaces a
    flag of an earlier release, if one of them names a setting of the trainer."""
    import dataclasses

    from weir.training.recipes import NOT_PARAMETERS

    if len(argv) < 2 or argv[0] != "train" or argv[1] not in TRAINERS:
        return None
    known = {f.name for f in dataclasses.fields(TRAINERS[argv[1]].load("config"))} - set(NOT_PARAMETERS)
    for token in unknown:
        key = token.removeprefix("--").partition("=")[0].replace("-", "_")
        if token.startswith("--") and key in known:
            return f"--{key.replace('_', '-')} is a recipe setting now: use --set {key}=VALUE (or a recipe)"
    return None


def with_model_from_recipe(argv: list[str]) -> list[str]:
    """`weir train --recipe NAME ...` -> `weir train MODEL --recipe NAME ...`, MODEL the recipe's trainer."""
    if len(argv) < 2 or argv[0] != "train" or not argv[1].startswith("--recipe"):
        return argv
    from weir.training.recipes import Recipe

    spec = argv[1].partition("=")[2] or (argv[2] if len(argv) > 2 else "")
    if not spec:
        raise InputError("--recipe needs a shipped model's name or a recipe file")
    return ["train", Recipe.load(spec).model, *argv[1:]]
