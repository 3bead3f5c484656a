"""Recipes: the whole of what trains a model, in a TOML file beside its card, and the trainers' settings made from
a recipe and a command line.

A recipe names its trainer, its training sets and every parameter, research knobs included::

    model = "deepimpact"                  # deepct | deepimpact | ltr | attention | crossencoder | quality

    [[train]]                             # one table a training set (the fields of a TrainingSet, and below)
    collection = "beir-scifact"           # paths relative to the collections directory ($WEIR_COLLECTIONS,
    topics = "beir-scifact/queries.train.tsv"                 # default ../shared/collections)
    qrels = "beir-scifact/qrels.train.txt"

    [parameters]                          # any field of the trainer's settings
    epochs = 4
    members = 3
    shrink = true

A training set of a trainer that reads an index (LTR, the attention rerankers) may name ``components`` instead of an
``index``: an index of its collection with those components is built once into ``$WEIR_CACHE/indexes`` and reused;
``stages`` (LTR) names rerankers whose scores of the set's candidates become stage features (the shipped models,
as a pipeline serves them). :func:`settings` makes the trainer's config: the recipe's parameters, then the flags
given on the command line, then ``--set KEY=VALUE``; it refuses a key the trainer does not have, naming those it has.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weir.core.runtime import MODELS, cache_dir
from weir.core.types import InputError
from weir.training.common import TrainingSet

TRAINERS = ("deepct", "deepimpact", "ltr", "attention", "crossencoder", "quality")
RECIPE = "recipe.toml"
SET_PATHS = ("collection", "topics", "qrels", "candidates")  # resolved against the collections directory
SET_EXTRAS = ("components", "stages")  # what a recipe's set adds to a TrainingSet's fields
SET_KEYS = {"deepct": "train", "deepimpact": "train", "quality": "train", "ltr": "sets"}  # the config's field of sets
NOT_PARAMETERS = ("kind", "out", "command", "train", "sets", "index", "topics", "qrels", "candidates", "also")


def collections_dir() -> Path:
    """Where a recipe's relative paths point: ``$WEIR_COLLECTIONS``, default ``../shared/collections``."""
    return Path(os.environ.get("WEIR_COLLECTIONS", "../shared/collections"))


@dataclass
class Recipe:
    """A recipe read (:meth:`load`): its trainer (``model``), training sets (the TOML tables, paths resolved) and
    parameters; ``name`` is the shipped model it makes, where it is one."""

    model: str
    sets: list[dict] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    path: Path | None = None

    @classmethod
    def load(cls, spec: str | os.PathLike) -> Recipe:
        """The recipe in file ``spec``, or of the shipped model named ``spec`` (``weir/models/<spec>/recipe.toml``)."""
        path = Path(spec)
        if not path.is_file():
            if (path / RECIPE).is_file():
                path = path / RECIPE
            elif (MODELS / str(spec) / RECIPE).is_file():
                path = MODELS / str(spec) / RECIPE
            else:
                shipped = sorted(p.parent.name for p in MODELS.glob(f"*/{RECIPE}"))
                raise InputError(f"no recipe {spec}: give a recipe file or a shipped model ({', '.join(shipped)})")
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"{path}: not a valid recipe: {e}") from None
        unknown = sorted(set(raw) - {"model", "description", "train", "parameters"})
        if unknown:
            raise InputError(f"{path}: unknown key(s) {', '.join(unknown)}; a recipe has model, description, "
                             "[[train]] and [parameters]")
        if raw.get("model") not in TRAINERS:
            raise InputError(f"{path}: model = {raw.get('model')!r}; one of {', '.join(TRAINERS)}")
        sets = [_recipe_set(path, i, table) for i, table in enumerate(raw.get("train", []), start=1)]
        return cls(raw["model"], sets, dict(raw.get("parameters", {})),
                   path.parent.name if path.name == RECIPE and path.parent.parent == MODELS else None, path)

    def describe(self) -> str:
        return str(self.path) if self.name is None else self.name


def _recipe_set(path: Path, number: int, table: Mapping[str, Any]) -> dict:
    """One ``[[train]]`` table, checked, its paths resolved against the collections directory."""
    known = {f.name for f in dataclasses.fields(TrainingSet)} | set(SET_EXTRAS)
    unknown = sorted(set(table) - known)
    if unknown:
        raise InputError(f"{path}: training set {number} has unknown key(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}")
    root = collections_dir()
    return {k: str(root / v) if k in SET_PATHS and not Path(v).is_absolute() else v for k, v in table.items()}


def settings(model: str, config_class: type, *, sets: Sequence[dict | TrainingSet], values: Mapping[str, Any],
             out: str, command: list[str], log: Callable[[str], None] = print):
    """The ``config_class`` of trainer ``model`` made of training ``sets`` (recipe tables or TrainingSets, indexes
    and stage runs they ask for prepared) and parameter ``values`` (each a field of the config)."""
    fields = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(values) - fields) + sorted(set(values) & set(NOT_PARAMETERS))
    if unknown:
        known = sorted(fields - set(NOT_PARAMETERS))
        raise InputError(f"weir train {model} has no setting {', '.join(unknown)}; its settings: {', '.join(known)}")
    ready = [s if isinstance(s, TrainingSet) else prepare(model, s, log) for s in sets]
    given = dict(values, out=out, command=command)
    if model in ("deepct", "deepimpact"):
        given["kind"] = model
    if model in SET_KEYS:
        given[SET_KEYS[model]] = ready
    else:  # the attention rerankers: the first set in fields of its own, the others as further sets
        if not ready:
            raise InputError(f"weir train {model} needs a training set: --index --topics --qrels --candidates")
        first = ready[0].checked(f"weir train {model}", needs=("index", "candidates"), takes=("depth",))
        given.update(kind=model, index=first.index, topics=first.topics, qrels=first.qrels,
                     candidates=first.candidates, also=ready[1:])
        if first.depth != TrainingSet.depth:
            given.setdefault("depth", first.depth)
    return config_class(**given)


def prepare(model: str, table: dict, log: Callable[[str], None]) -> TrainingSet:
    """A recipe's training set as a TrainingSet: the index it names (or one built of its collection with its
    ``components``), and its ``stages``' scores of the candidates written as a stage run."""
    table = dict(table)
    components, stages = table.pop("components", None), table.pop("stages", None)
    if components and not table.get("index"):
        if not table.get("collection"):
            raise InputError(f"a training set with components = {components!r} needs its collection")
        table["index"] = str(cached_index(table.pop("collection"), components, log))
    if stages:
        if model != "ltr":
            raise InputError(f"stages = {stages!r}: only LTR takes earlier stages' scores as features")
        runs = [f"{name}:{stage_run(table, name, log)}" for name in _names(stages)]
        table["stage_runs"] = ";".join(filter(None, [table.get("stage_runs"), *runs]))
    return TrainingSet(**table)


def _names(text: str | Sequence[str]) -> list[str]:
    return [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]


def cached_index(collection: str, components: str | Sequence[str], log: Callable[[str], None]) -> Path:
    """An index of ``collection`` with ``components``, built once into ``$WEIR_CACHE/indexes`` (keyed by the
    corpus's checksum) and reused by later trainings; one found there without every component wanted (a directory
    put there by hand, a build of another weir) is built again."""
    from weir.indexer.build import build_index
    from weir.indexer.collections import Collection
    from weir.indexer.index_dir import read_manifest
    from weir.core.provenance import sha256_file

    coll = Collection.open(collection)
    wanted = tuple(_names(components))
    out = cache_dir("indexes") / f"{coll.name}-{'-'.join(wanted)}-{sha256_file(coll.corpus_path)[:12]}"
    if (out / "manifest.json").is_file():
        missing = [c for c in wanted if c not in read_manifest(out).get("components", {})]
        if not missing:
            return out
        log(f"{out}: cached without {', '.join(missing)}; building it again")
    log(f"{coll.name}: building an index with {', '.join(wanted)} for training ({out})")
    build_index(collection, out, components=wanted, skip_empty=True, overwrite=True)
    return out


def stage_run(table: Mapping[str, Any], name: str, log: Callable[[str], None]) -> Path:
    """The run of reranker ``name`` (its shipped model) over the set's candidates, written once into
    ``$WEIR_CACHE/runs``: its scores become the stage feature ``name`` of LTR."""
    from weir.core.provenance import sha256_file
    from weir.core.trec import read_topics
    from weir.core.types import Run
    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.ranker.stage import CandidateRun

    if not (table.get("index") and table.get("candidates")):
        raise InputError(f"stages = {name!r} reranks the set's candidates: the set needs an index and candidates")
    key = "-".join(sha256_file(table[k])[:8] for k in ("topics", "candidates"))
    out = cache_dir("runs") / f"{name}-{Path(table['index']).name}-{key}.trec"
    if not out.is_file():
        log(f"scoring the candidates of {table['topics']} with {name} (a stage feature)")
        run = Run.read_trec(table["candidates"])
        depth = int(table.get("depth", TrainingSet.depth))
        pipeline = registry.build(name, Index(table["index"]), first_stage=CandidateRun(run.truncated(depth)))
        topics = [q for q in read_topics(table["topics"]) if q.id in run]
        out.parent.mkdir(parents=True, exist_ok=True)
        pipeline.search(topics, k=depth, depth=depth).write_trec(out, tag=name)
    return out
