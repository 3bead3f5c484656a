"""The options of every stage, typed: one small frozen dataclass per stage kind, and :class:`PipelineOptions` holding one
of each, built in one place (:meth:`PipelineOptions.from_mapping`) from the command line, an experiment's
``bm25[k1=1.2]`` brackets, a config file or a request.

A flat key sets the field of every stage it concerns (``device`` sets the device of the dense query encoder and of
each reranker; ``depth`` how many candidates each
reranker rescores); a key ``STAGE.FIELD`` sets one stage's field only (``attention.device=cuda``,
``dense.device=cpu``). ``None`` means "the stage's default" (for fusion: as tuned, see :mod:`weir.ranker.retrievers.hybrid`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from weir.core.types import InputError


@dataclass(frozen=True)
class BM25Options:
    k1: float = 0.9
    b: float = 0.4

    def __post_init__(self):
        if self.k1 < 0 or not 0 <= self.b <= 1:
            raise InputError(f"BM25 needs k1 >= 0 and 0 <= b <= 1 (got k1={self.k1}, b={self.b})")


@dataclass(frozen=True)
class DeepCTOptions:
    k1: float | None = None  # None: what the index records for its head (the DeepCT paper's 10 / 0.9 if nothing)
    b: float | None = None

    def __post_init__(self):
        if (self.k1 is not None and self.k1 < 0) or (self.b is not None and not 0 <= self.b <= 1):
            raise InputError(f"BM25 needs k1 >= 0 and 0 <= b <= 1 (got k1={self.k1}, b={self.b})")


@dataclass(frozen=True)
class ImpactOptions:
    """DeepImpact search has no settings: its weights are in the index."""


@dataclass(frozen=True)
class DenseOptions:
    model: str | None = None  # query encoder; None: the model recorded in the index manifest
    device: str | None = None
    backend: str | None = None  # query encoder's inference backend; None: $WEIR_BACKEND, else as the index's vectors
    ef_search: int | None = None  # HNSW efSearch; None: as built
    nprobe: int | None = None  # IVF lists probed; None: as built


@dataclass(frozen=True)
class FusionOptions:
    stages: str | tuple[str, ...] | None = None  # hybrid: first stages to fuse; None: bm25,dense
    method: str | None = None  # rrf | minmax | zscore; None: as tuned, else the default
    weights: str | tuple[float, ...] | None = None  # "0.3,0.7" or "bm25=0.3,dense=0.7"; None: as tuned, else equal
    rrf_k: int | None = None
    depth_per_stage: int | None = None


@dataclass(frozen=True)
class RerankerOptions:
    model: str | None = None  # model directory; None: the one shipped under models/
    depth: int = 100  # candidates rescored
    device: str | None = None  # None: cuda when available, else cpu
    backend: str | None = None  # inference backend (weir.core.inference); None: $WEIR_BACKEND, else the default
    batch_size: int | None = None  # pairs per forward pass; None: the reranker's default

    def __post_init__(self):
        if self.depth < 1:
            raise InputError(f"the reranking depth must be at least 1 (got {self.depth})")


@dataclass(frozen=True)
class LTROptions(RerankerOptions):
    # the weight of a several-member model's spread subtracted from its mean score; None: the model's own, chosen on
    # its training queries (weir.ranker.rerankers.ltr); 0: the members' mean
    risk: float | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.risk is not None:
            check_risk(self.risk)


def check_risk(risk, what: str = "ltr_risk", members: int | None = None) -> float:
    """``risk`` (the weight of an LTR model's members' spread) as a float at least 0 and finite, and not above 0 for
    a model of ``members`` 1 (one member has no spread), or an :class:`InputError` saying what is wrong."""
    try:
        value = float(risk)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a number (got {risk!r})") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{what} must be finite and at least 0 (got {risk!r}): the weight of the LTR members' "
                         f"spread subtracted from their mean score")
    if value and members == 1:
        raise InputError(f"{what} {value}: a model of one member has no spread to weigh, that needs several members "
                         f"(name one, `--ltr-model ltr-members`, or train one, `weir train ltr --set members=N`)")
    return value


@dataclass(frozen=True)
class PipelineOptions:
    """One options object per stage kind (the registry hands each stage factory its own)."""

    bm25: BM25Options = field(default_factory=BM25Options)
    dense: DenseOptions = field(default_factory=DenseOptions)
    hybrid: FusionOptions = field(default_factory=FusionOptions)
    deepct: DeepCTOptions = field(default_factory=DeepCTOptions)
    deepimpact: ImpactOptions = field(default_factory=ImpactOptions)
    deepimpact_bm25: FusionOptions = field(default_factory=FusionOptions)
    ltr: LTROptions = field(default_factory=LTROptions)
    attention: RerankerOptions = field(default_factory=RerankerOptions)
    crossencoder: RerankerOptions = field(default_factory=RerankerOptions)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None = None) -> PipelineOptions:
        """Options from flat keys (:data:`FLAT_KEYS`) and ``STAGE.FIELD`` keys; ``None`` values are skipped and an
        unknown key is an :class:`InputError` naming the known ones."""
        return cls().updated(values or {})

    def updated(self, values: Mapping[str, Any]) -> PipelineOptions:
        """A copy with ``values`` (keys as for :meth:`from_mapping`) set on top of these options."""
        changes: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            if value is None:
                continue
            for stage, name in _targets(key):
                changes.setdefault(stage, {})[name] = value
        try:
            return dataclasses.replace(self, **{stage: dataclasses.replace(getattr(self, stage), **fields)
                                                for stage, fields in changes.items()})
        except TypeError as e:
            raise InputError(f"bad pipeline option: {e}") from None


RERANKERS = ("ltr", "attention", "crossencoder")
# flat key -> the (stage, field) pairs it sets
FLAT_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "k1": (("bm25", "k1"),),
    "b": (("bm25", "b"),),
    "deepct_k1": (("deepct", "k1"),),
    "deepct_b": (("deepct", "b"),),
    "dense_model": (("dense", "model"),),
    "ef_search": (("dense", "ef_search"),),
    "nprobe": (("dense", "nprobe"),),
    "hybrid_stages": (("hybrid", "stages"),),
    "fusion": (("hybrid", "method"), ("deepimpact_bm25", "method")),
    "fusion_weights": (("hybrid", "weights"), ("deepimpact_bm25", "weights")),
    "rrf_k": (("hybrid", "rrf_k"),),
    "depth_per_stage": (("hybrid", "depth_per_stage"), ("deepimpact_bm25", "depth_per_stage")),
    "device": (("dense", "device"),) + tuple((r, "device") for r in RERANKERS),
    "backend": (("dense", "backend"),) + tuple((r, "backend") for r in RERANKERS),
    "depth": tuple((r, "depth") for r in RERANKERS),
    "batch_size": tuple((r, "batch_size") for r in ("attention", "crossencoder")),
    **{f"{r}_model": ((r, "model"),) for r in RERANKERS},
    "ltr_risk": (("ltr", "risk"),),
}


def _targets(key: str) -> tuple[tuple[str, str], ...]:
    if key in FLAT_KEYS:
        return FLAT_KEYS[key]
    stage, dot, name = key.partition(".")
    stage = stage.replace("+", "_")
    fields = {f.name for f in dataclasses.fields(PipelineOptions)}
    if dot and stage in fields and name in {f.name for f in dataclasses.fields(getattr(PipelineOptions(), stage))}:
        return ((stage, name),)
    raise InputError(f"unknown pipeline option {key!r}; known: {', '.join(sorted(FLAT_KEYS))}, or STAGE.FIELD "
                     f"with STAGE one of {', '.join(sorted(fields))}")
