"""Named pipelines: ``bm25``, later ``deepimpact``, ``hybrid``, ``hybrid>>ltr`` ...

A pipeline name is first-stage names and reranker names joined by ``>>``. Each name maps to a factory that builds
the stage over an opened :class:`~ranker.index.Index`; ``weir run``, ``weir search`` and the gRPC service all build
pipelines here, so a stage added to the registry is usable everywhere at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ranker.base import Pipeline, Reranker, Retriever, Stage
from ranker.index import Index
from weir.types import InputError


def _bm25(index: Index, options: dict[str, Any]) -> Retriever:
    from ranker.bm25 import BM25

    return BM25(index, k1=options.get("k1", 0.9), b=options.get("b", 0.4), threads=options.get("threads"))


def _dense(index: Index, options: dict[str, Any]) -> Retriever:
    from ranker.dense import DenseRetriever

    return DenseRetriever(index, model=options.get("dense_model"), device=options.get("device"),
                          ef_search=options.get("ef_search"), nprobe=options.get("nprobe"))


def _hybrid(index: Index, options: dict[str, Any]) -> Retriever:
    """BM25 + dense (or ``hybrid_stages``), fused as tuned by `weir tune fusion` when the index has it."""
    from ranker.fusion import HybridRetriever
    from ranker.tuning import hybrid_settings

    settings = hybrid_settings(index, options)
    for name in settings["stages"]:
        if name == "hybrid" or name not in FIRST_STAGES:
            raise InputError(f"hybrid cannot fuse {name!r}; fusable first stages: "
                             f"{', '.join(s for s in sorted(FIRST_STAGES) if s != 'hybrid')}")
    stages = [FIRST_STAGES[name](index, options) for name in settings["stages"]]
    return HybridRetriever(stages, method=settings["method"], weights=settings["weights"], rrf_k=settings["rrf_k"],
                           depth=settings["depth"])


def _deepct(index: Index, options: dict[str, Any]) -> Retriever:
    from ranker.learned import DeepCTRetriever

    return DeepCTRetriever(index, k1=options.get("deepct_k1", 10.0), b=options.get("deepct_b", 0.9),
                           threads=options.get("threads"))


def _deepimpact(index: Index, options: dict[str, Any]) -> Retriever:
    from ranker.learned import ImpactRetriever

    return ImpactRetriever(index, threads=options.get("threads"))


def _deepimpact_bm25(index: Index, options: dict[str, Any]) -> Retriever:
    """DeepImpact + BM25, min-max normalized linear interpolation; weights from --fusion-weights, else the ones
    chosen on training queries and recorded in the DeepImpact model card (see `weir train deepimpact`)."""
    from ranker.fusion import HybridRetriever
    from ranker.learned import fusion_settings

    settings = fusion_settings(index, options)
    return HybridRetriever([_deepimpact(index, options), _bm25(index, options)], method=settings["method"],
                           weights=settings["weights"], depth=settings["depth"], name="deepimpact+bm25")


# name -> factory(index, options) -> stage
FIRST_STAGES: dict[str, Callable[[Index, dict[str, Any]], Retriever]] = {
    "bm25": _bm25,
    "dense": _dense,
    "hybrid": _hybrid,
    "deepct": _deepct,
    "deepimpact": _deepimpact,
    "deepimpact+bm25": _deepimpact_bm25,
}


def _ltr(index: Index, options: dict[str, Any]) -> Reranker:
    from ranker.rerankers.ltr import LTRReranker

    return LTRReranker(index, options.get("ltr_model"), depth=options.get("depth") or 100,
                       device=options.get("device"))


def _attention(index: Index, options: dict[str, Any]) -> Reranker:
    from ranker.rerankers.attention import AttentionReranker

    return AttentionReranker(index, options.get("attention_model"), depth=options.get("depth") or 100,
                             device=options.get("device"), batch_size=options.get("batch_size"))


def _crossencoder(index: Index, options: dict[str, Any]) -> Reranker:
    from ranker.rerankers.crossencoder import CrossEncoderReranker

    return CrossEncoderReranker(index, options.get("crossencoder_model"), depth=options.get("depth") or 100,
                                device=options.get("device"), batch_size=options.get("batch_size"))


RERANKERS: dict[str, Callable[[Index, dict[str, Any]], Reranker]] = {
    "ltr": _ltr,
    "attention": _attention,
    "crossencoder": _crossencoder,
}


def known() -> list[str]:
    return sorted(FIRST_STAGES) + sorted(RERANKERS)


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
            raise InputError(f"unknown reranker {name!r} in pipeline {spec!r}; known: {', '.join(sorted(RERANKERS)) or 'none yet'}")
    return names


def build(spec: str, index: Index, options: dict[str, Any] | None = None, *, first_stage: Stage | None = None) -> Pipeline:
    """Build pipeline ``spec`` over ``index``. With ``first_stage`` (e.g. candidates from a run file) ``spec`` names
    only rerankers, or is ``""`` to pass the candidates through."""
    options = options or {}
    if first_stage is not None:
        names = [n.strip() for n in spec.split(">>") if n.strip()]
        unknown = [n for n in names if n not in RERANKERS]
        if unknown:
            raise InputError(f"with candidates from a run, the pipeline names rerankers only; unknown: {', '.join(unknown)}")
        return Pipeline([first_stage] + [RERANKERS[n](index, options) for n in names])
    names = parse(spec)
    stages: list[Stage] = [FIRST_STAGES[names[0]](index, options)]
    stages += [RERANKERS[n](index, options) for n in names[1:]]
    return Pipeline(stages)


class PipelineCache:
    """Pipelines built once per process and reused (the JVM, searchers and models load once)."""

    def __init__(self, index: Index, options: dict[str, Any] | None = None):
        self.index, self.options = index, options or {}
        self._cache: dict[str, Pipeline] = {}

    def get(self, spec: str) -> Pipeline:
        key = ">>".join(parse(spec))
        if key not in self._cache:
            self._cache[key] = build(key, self.index, self.options)
        return self._cache[key]
