"""Named pipelines: ``bm25``, ``dense``, ``hybrid``, ``deepimpact``, ``hybrid>>ltr``, ``bm25>>attention`` ...

A pipeline name is first-stage names and reranker names joined by ``>>``. Each name maps to a factory that builds
the stage over an opened :class:`~weir.indexer.index_dir.Index` from its own typed options (:mod:`weir.ranker.options`);
``weir run``, ``weir search``, experiments and the gRPC service all build pipelines here, so a stage added to the
registry is usable everywhere at once.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weir.indexer.index_dir import Index
from weir.ranker.options import (
    BM25Options,
    DeepCTOptions,
    DenseOptions,
    FusionOptions,
    ImpactOptions,
    LTROptions,
    PipelineOptions,
    RerankerOptions,
)
from weir.ranker.calibration import Calibration, calibration_for
from weir.ranker.stage import Pipeline, Reranker, Retriever, Stage
from weir.core.provenance import sha256_file
from weir.core.runtime import shipped_model
from weir.core.types import InputError

# build(name) -> another first stage over the same index with its own options (what a fusion of stages needs)
BuildStage = Callable[[str], Retriever]
CANDIDATES = "candidates"  # what comes before a pipeline's rerankers when its candidates are a run (`--candidates`)


@dataclass(frozen=True)
class Entry:
    """A registered stage: ``options`` names its field of :class:`PipelineOptions`; ``make(index, own options,
    build)`` returns a first stage and ``make(index, own options, after)`` a reranker, ``after`` the names of the
    stages before it (:data:`CANDIDATES` for a run's); ``requires`` the index components it reads; ``model`` the
    shipped model it loads when its options name none (``models/<model>``; for ``ltr``, one of
    :func:`ltr_model_for`); ``reads`` the components it reads where the index has them."""

    options: str
    make: Callable[[Index, Any, Any], Stage]  # the third argument: BuildStage (first stages) or after (rerankers)
    requires: tuple[str, ...] = ()
    model: str | None = None
    reads: tuple[str, ...] = ()


def _bm25(index: Index, o: BM25Options, _: BuildStage) -> Retriever:
    from weir.ranker.retrievers.bm25 import BM25

    return BM25(index, k1=o.k1, b=o.b)


def _dense(index: Index, o: DenseOptions, _: BuildStage) -> Retriever:
    from weir.ranker.retrievers.dense import DenseRetriever

    return DenseRetriever(index, model=o.model, device=o.device, backend=o.backend, ef_search=o.ef_search,
                          nprobe=o.nprobe)


def _hybrid(index: Index, o: FusionOptions, build: BuildStage) -> Retriever:
    """BM25 + dense (or ``stages``), fused as tuned by `weir tune fusion` when the index has it."""
    from weir.ranker.retrievers.hybrid import HybridRetriever, hybrid_settings

    settings = hybrid_settings(index, o)
    for name in settings["stages"]:
        if name not in FUSABLE:
            raise InputError(f"hybrid cannot fuse {name!r}; fusable first stages: {', '.join(FUSABLE)}")
    return HybridRetriever([build(name) for name in settings["stages"]], method=settings["method"],
                           weights=settings["weights"], rrf_k=settings["rrf_k"], depth=settings["depth"])


def _deepct(index: Index, o: DeepCTOptions, _: BuildStage) -> Retriever:
    from weir.ranker.retrievers.learned_sparse import DeepCTRetriever

    return DeepCTRetriever(index, k1=o.k1, b=o.b)


def _deepimpact(index: Index, o: ImpactOptions, _: BuildStage) -> Retriever:
    from weir.ranker.retrievers.learned_sparse import ImpactRetriever

    return ImpactRetriever(index)


def _deepimpact_bm25(index: Index, o: FusionOptions, build: BuildStage) -> Retriever:
    """DeepImpact + BM25, min-max normalized linear interpolation; weights from the options, else the ones chosen on
    training queries and recorded in the DeepImpact model card (see `weir train deepimpact`)."""
    from weir.ranker.retrievers.hybrid import HybridRetriever, impact_fusion_settings

    settings = impact_fusion_settings(index, o)
    return HybridRetriever([build("deepimpact"), build("bm25")], method=settings["method"],
                           weights=settings["weights"], depth=settings["depth"], name="deepimpact+bm25")


NEURAL_SCORES = ("dense", "hybrid", "attention", "crossencoder")  # stages whose score carries a neural model's


def ltr_model_for(index: Index, after: Sequence[str]) -> str:
    """The shipped LTR model of the features that ``ltr`` is given after the stages ``after``: one model per feature
    set, each boosting from the strongest feature it has (issue 34, ``research/transfer.py ltr-sweep``).

    - ``ltr-cosine`` after a lexical first stage (``bm25``, ``deepct``, ``deepimpact``, ``deepimpact+bm25``) or a run's
      candidates, over an index with dense vectors: it boosts from the query-passage cosine of the index's ``dense``
      component, trained on the BM25 top 100 of six collections. There the cosine is the strongest feature (on DL 2019
      0.64 against BM25's 0.51) and a model boosting from the incoming BM25 score stays below it (0.5600).
    - ``ltr`` everywhere else: after ``dense``, ``hybrid``, ``attention`` or ``crossencoder`` (whose score already
      carries a neural model's, so the incoming score is the strongest feature), and over an index without dense
      vectors (BM25's or DeepImpact's score the strongest there); it boosts from the incoming score, trained on the
      hybrid top 100 of six collections.

    A run given as candidates is taken as lexical (its first stage is unknown); ``--ltr-model`` chooses otherwise."""
    if "dense" in index.components and not any(name in NEURAL_SCORES for name in after):
        return "ltr-cosine"
    return "ltr"


def model_folder(given: str | os.PathLike) -> Path:
    """The model directory a reranker's ``model`` option names: a path, or the name of a shipped model (``ltr``,
    ``ltr-members``, ...: :func:`~weir.core.runtime.shipped_model`)."""
    text = os.fspath(given)
    if os.path.isdir(text) or os.sep in text or text.startswith("."):
        return Path(text)
    return shipped_model(text)


def _ltr(index: Index, o: LTROptions, after: Sequence[str]) -> Reranker:
    from weir.ranker.rerankers.ltr import LTRReranker

    return LTRReranker(index, model_folder(o.model or ltr_model_for(index, after)), depth=o.depth, device=o.device,
                       backend=o.backend, risk=o.risk)


def _attention(index: Index, o: RerankerOptions, _: BuildStage) -> Reranker:
    from weir.ranker.rerankers.attention import AttentionReranker

    return AttentionReranker(index, o.model, depth=o.depth, device=o.device, batch_size=o.batch_size,
                             backend=o.backend)


def _crossencoder(index: Index, o: RerankerOptions, _: BuildStage) -> Reranker:
    from weir.ranker.rerankers.crossencoder import CrossEncoderReranker

    return CrossEncoderReranker(index, o.model, depth=o.depth, device=o.device, batch_size=o.batch_size,
                                backend=o.backend)


FIRST_STAGES: dict[str, Entry] = {
    "bm25": Entry("bm25", _bm25, ("bm25",)),
    "dense": Entry("dense", _dense, ("dense",)),
    "hybrid": Entry("hybrid", _hybrid, ("bm25", "dense")),
    "deepct": Entry("deepct", _deepct, ("deepct",)),
    "deepimpact": Entry("deepimpact", _deepimpact, ("deepimpact",)),
    "deepimpact+bm25": Entry("deepimpact_bm25", _deepimpact_bm25, ("deepimpact", "bm25")),
}
FUSABLE = tuple(sorted(name for name in FIRST_STAGES if name != "hybrid"))  # first stages a fusion can take
RERANKERS: dict[str, Entry] = {
    "ltr": Entry("ltr", _ltr, ("bm25",), "ltr"),
    "attention": Entry("attention", _attention, ("bm25",), "attention", ("attention",)),  # stored passage states
    "crossencoder": Entry("crossencoder", _crossencoder, ("bm25",), "crossencoder"),
}


def available(name: str, index: Index, options: PipelineOptions | None = None) -> bool:
    """Whether stage ``name`` can run over ``index``: the components it reads are there, and so is its model (the
    one its options name, else the shipped one)."""
    entry = FIRST_STAGES.get(name) or RERANKERS[name]
    if not all(c in index.components for c in entry.requires):
        return False
    if entry.model is None or getattr(getattr(options or PipelineOptions(), entry.options), "model", None):
        return True
    try:
        shipped_model(entry.model)
    except InputError:
        return False
    return True


def supported(index: Index, options: PipelineOptions | None = None) -> list[str]:
    """Every pipeline the index supports with these options: each available first stage alone, and followed by each
    available reranker."""
    firsts = [n for n in FIRST_STAGES if available(n, index, options)]
    rerankers = [n for n in RERANKERS if available(n, index, options)]
    return firsts + [f"{f}>>{r}" for f in firsts for r in rerankers]


def reranker_models(spec: str, index: Index, options: PipelineOptions | None = None) -> list[str]:
    """The model each reranker of pipeline ``spec`` loads, in stage order, without building it: the name of the
    directory its options give, else the shipped model's (for ``ltr``, :func:`ltr_model_for`'s). What a server's
    Info reports, so that a caller sees which defaults answer it."""
    options = options or PipelineOptions()
    names = parse(spec)
    return [os.path.basename(os.path.normpath(reranker_model(name, index, options, names[:i])))
            for i, name in enumerate(names) if name in RERANKERS]


def reranker_model(name: str, index: Index, options: PipelineOptions, after: Sequence[str]) -> str:
    """The model reranker ``name`` loads after the stages ``after``: the directory its options give, else the shipped
    model's name (for ``ltr``, :func:`ltr_model_for`'s)."""
    entry = RERANKERS[name]
    given = getattr(options, entry.options).model
    if given:
        return str(given)
    return ltr_model_for(index, after) if name == "ltr" else entry.model


SCORE_NEUTRAL = ("device", "backend", "batch_size")  # options that change where a stage runs, not its scores


def score_identity(spec: str, index: Index, options: PipelineOptions | None = None) -> dict[str, Any]:
    """What the scores of pipeline ``spec`` over ``index`` depend on, found without building it: the options of each
    stage it runs (the fused ones of a fusion included; not where they run), the fusion settings in effect (tuned or
    given), and the sha256 of each reranker's model card. A calibration fitted on the scores of one identity
    (:mod:`weir.ranker.calibration`) calibrates no other."""
    from weir.ranker.retrievers.hybrid import hybrid_settings, impact_fusion_settings

    options = options or PipelineOptions()
    names = parse(spec)
    stages, fusion = list(names), {}
    if "hybrid" in names:
        fusion["hybrid"] = {k: v for k, v in hybrid_settings(index, options.hybrid).items() if k != "tuned"}
        stages += fusion["hybrid"]["stages"]
    if "deepimpact+bm25" in names:
        fusion["deepimpact+bm25"] = impact_fusion_settings(index, options.deepimpact_bm25)
        stages += ["deepimpact", "bm25"]
    own = {}
    for name in dict.fromkeys(stages):  # a reranker's model is named by its card's hash below, not by its path
        entry = FIRST_STAGES.get(name) or RERANKERS[name]
        own[name] = {k: v for k, v in dataclasses.asdict(getattr(options, entry.options)).items()
                     if k not in SCORE_NEUTRAL and not (k == "model" and name in RERANKERS)}
    models = {}
    for i, name in enumerate(names):
        if name in RERANKERS:
            given = reranker_model(name, index, options, names[:i])
            folder = model_folder(given)
            card = os.path.join(folder, "card.json")
            models[name] = sha256_file(card) if os.path.isfile(card) else os.path.basename(os.path.normpath(folder))
    return {"pipeline": ">>".join(names), "options": own, "fusion": fusion, "models": models}


def calibration(spec: str, index: Index, options: PipelineOptions | None = None) -> Calibration | None:
    """The calibration of pipeline ``spec`` that ``index`` holds for these options (None when it has none, or one
    fitted for other scores)."""
    return calibration_for(index, ">>".join(parse(spec)), lambda: score_identity(spec, index, options))


def components(spec: str) -> list[str]:
    """The index components pipeline ``spec`` reads (what its stages require, and what they read where the index has
    it), in stage order."""
    needed: dict[str, None] = {}
    for name in parse(spec):
        entry = FIRST_STAGES.get(name) or RERANKERS[name]
        needed.update(dict.fromkeys(entry.requires + entry.reads))
    return list(needed)


class SharedRerankers:
    """Rerankers built once and shared by every pipeline of one :class:`PipelineCache` that runs the same model: a
    server of ``bm25>>attention`` and ``hybrid>>attention`` loads the attention model once, not once per pipeline
    (seconds of start-up and a model's memory each). A reranker is safe to share: it keeps no state of a pipeline,
    and its model runs one forward at a time."""

    def __init__(self):
        self._stages: dict[tuple[str, str], Stage] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str], make: Callable[[], Stage]) -> Stage:
        with self._lock:  # one built at a time: a second pipeline wanting the same model waits for the first's
            if key not in self._stages:
                self._stages[key] = make()
            return self._stages[key]


def build_stage(name: str, index: Index, options: PipelineOptions | None = None,
                after: Sequence[str] = (CANDIDATES,), shared: SharedRerankers | None = None) -> Stage:
    """One registered stage (first stage or reranker) over ``index``, from its part of ``options``; a reranker
    after the stages ``after`` (default: a run's candidates), which choose the shipped model of some; with
    ``shared``, a reranker of the same model already built there."""
    options = options or PipelineOptions()
    if name in RERANKERS:
        entry = RERANKERS[name]
        make = functools.partial(entry.make, index, getattr(options, entry.options), tuple(after))
        if shared is None:
            return make()
        return shared.get((name, reranker_model(name, index, options, after)), make)
    entry = FIRST_STAGES.get(name)
    if entry is None:
        raise InputError(f"unknown stage {name!r}; known: {', '.join(sorted(FIRST_STAGES) + sorted(RERANKERS))}")
    return entry.make(index, getattr(options, entry.options), lambda other: build_stage(other, index, options))


def parse(spec: str) -> list[str]:
    """Split and check a pipeline name such as ``bm25>>ltr``; raise :class:`InputError` explaining what is wrong."""
    names = [n.strip() for n in spec.split(">>")]
    if not spec.strip() or any(not n for n in names):
        raise InputError(f"pipeline {spec!r} is empty or has an empty stage; e.g. 'bm25' or 'bm25>>ltr'")
    first, rest = names[0], names[1:]
    if first not in FIRST_STAGES:
        if first in RERANKERS:
            raise InputError(f"pipeline {spec!r} starts with the reranker {first!r}: put a first stage before it "
                             f"({', '.join(sorted(FIRST_STAGES))}) or give candidates with --candidates")
        raise InputError(f"unknown first stage {first!r} in pipeline {spec!r}; known: {', '.join(sorted(FIRST_STAGES))}")
    for name in rest:
        if name not in RERANKERS:
            raise InputError(f"unknown reranker {name!r} in pipeline {spec!r}; known: {', '.join(sorted(RERANKERS))}")
    return names


def build(spec: str, index: Index, options: PipelineOptions | None = None, *,
          first_stage: Stage | None = None, shared: SharedRerankers | None = None) -> Pipeline:
    """Build pipeline ``spec`` over ``index``. With ``first_stage`` (e.g. candidates from a run file) ``spec`` names
    only rerankers, or is ``""`` to pass the candidates through; with ``shared``, its rerankers are those already
    built there for the same model."""
    if first_stage is not None:
        names = [n.strip() for n in spec.split(">>") if n.strip()]
        unknown = [n for n in names if n not in RERANKERS]
        if unknown:
            raise InputError(f"with candidates from a run, the pipeline names rerankers only; unknown: {', '.join(unknown)}")
        names = [CANDIDATES, *names]
        return Pipeline([first_stage] + [build_stage(n, index, options, names[:i], shared)
                                         for i, n in enumerate(names) if i])
    names = parse(spec)
    return Pipeline([build_stage(n, index, options, names[:i], shared) for i, n in enumerate(names)],
                    calibration=calibration(spec, index, options))


def pipeline(spec: str, index: Index | str | os.PathLike, options: PipelineOptions | None = None,
             **values: Any) -> Pipeline:
    """The pipeline ``spec`` (``"bm25"``, ``"hybrid>>ltr"``, ...) over ``index``, an opened :class:`Index` or its
    directory. Options come as a :class:`PipelineOptions` or as keywords named as on the command line (``k1=1.2``,
    ``depth=20``, ``ltr_model="models/ltr"``, or ``STAGE.FIELD`` keys through ``**{"dense.ef_search": 64}``)."""
    if values:
        if options is not None:
            raise InputError("give pipeline options as a PipelineOptions or as keywords, not both")
        options = PipelineOptions.from_mapping(values)
    return build(spec, index if isinstance(index, Index) else Index(index), options)


class PipelineCache:
    """Pipelines built once per process and reused (the JVM, searchers and models load once); a pipeline asked for
    by several threads at once is built once, by the first."""

    def __init__(self, index: Index, options: PipelineOptions | None = None):
        self.index, self.options = index, options or PipelineOptions()
        self._cache: dict[str, Pipeline] = {}
        self._building: dict[str, threading.Lock] = {}
        self._rerankers = SharedRerankers()  # one reranker per model, whichever pipelines run it
        self._lock = threading.Lock()

    def __contains__(self, spec: str) -> bool:
        """Whether the pipeline ``spec`` is built already (asking for it costs nothing)."""
        return ">>".join(parse(spec)) in self._cache

    def get(self, spec: str) -> Pipeline:
        key = ">>".join(parse(spec))
        pipeline = self._cache.get(key)
        if pipeline is not None:
            return pipeline
        with self._lock:
            building = self._building.setdefault(key, threading.Lock())
        with building:  # other pipelines are served (and built) meanwhile
            if key not in self._cache:
                self._cache[key] = build(key, self.index, self.options, shared=self._rerankers)
            return self._cache[key]
