"""What a sharded server serves: the first stages and rerankers that run over shards, those these shards refuse and
why (``ltr`` always; a learned component on each shard's own scale; IVF-PQ dense shards without re-scoring; what fuses one of them), how
a fusion fuses at the front, the pipelines served, and the :class:`Plan` of a config: the shards opened and checked
as one set, what each shard searches with which statistics, and the rerankers deployed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from weir.core.types import InputError
from weir.indexer.index_dir import Index
from weir.indexer.shards import global_statistics, read_shard_set
from weir.ranker import registry
from weir.ranker.options import PipelineOptions
from weir.service.config import ServiceConfig
from weir.service.validation import served_pipelines

SHARDED_FIRST_STAGES = ("bm25", "deepct", "deepimpact", "dense", "hybrid", "deepimpact+bm25")
SHARDED_RERANKERS = ("attention", "crossencoder")
SHARD_STAGES = ("bm25", "deepct", "deepimpact", "dense")  # what a shard searches; the front fuses the merged lists
FUSED = ("hybrid", "deepimpact+bm25")
WHY_NOT = {
    "ltr": "its features read whole-index statistics and one index's dense vectors",
}


def refused_stages(shards: Sequence[Index]) -> dict[str, str]:
    """The first stages and rerankers these shards can not serve as one index, with the reason: ``ltr`` always,
    a learned component whose weights are on each shard's own scale (:func:`weir.indexer.shards.incomparable_learned`),
    and what fuses one."""
    from weir.indexer.shards import incomparable_learned

    refused = dict(WHY_NOT)
    refused.update(incomparable_learned([s.manifest for s in shards]))
    dense = [s.manifest["components"].get("dense") or {} for s in shards]
    if any(d.get("index") == "ivfpq" and not (d.get("parameters") or {}).get("rerank") for d in dense):
        refused["dense"] = ("an IVF-PQ shard without re-scoring scores with product-quantization codes of its own "
                            "(each shard trained its codebooks): scores of different shards do not compare; build "
                            "the shards with --dense-rerank N (the default), or --dense-index flat, hnsw or ivfflat")
    if "deepimpact" in refused:
        refused["deepimpact+bm25"] = f"it fuses deepimpact: {refused['deepimpact']}"
    return refused


def fusion_settings(name: str, index: Index, options: PipelineOptions, refused: dict[str, str]) -> dict:
    """How ``name`` (``hybrid`` or ``deepimpact+bm25``) fuses over ``index``'s shards: the single index's settings
    (stages, method, weights, RRF k, depth per stage), each stage checked to be searchable over the shards."""
    from weir.ranker.retrievers.hybrid import RRF_K, hybrid_settings, impact_fusion_settings

    if name == "hybrid":
        settings = hybrid_settings(index, options.hybrid)
    else:
        settings = {**impact_fusion_settings(index, options.deepimpact_bm25), "stages": ["deepimpact", "bm25"],
                    "rrf_k": RRF_K}
    for stage in settings["stages"]:
        if stage not in SHARD_STAGES or stage in refused:
            raise InputError(f"{name} over shards fuses {', '.join(s for s in SHARD_STAGES if s not in refused)}; "
                             f"{stage!r} is not served over these shards: {refused.get(stage, 'not supported')}")
    return settings


def sharded_pipelines(shards: Sequence[Index], options: PipelineOptions, refused: dict[str, str]) -> list[str]:
    """Every pipeline the shards support over Ray Serve: each shardable first stage the shards have, alone and
    followed by each shardable reranker whose model is there."""
    first_index = shards[0]
    firsts = [n for n in SHARDED_FIRST_STAGES if n not in refused and registry.available(n, first_index, options)]
    for fused in FUSED:
        if fused in firsts:
            try:
                fusion_settings(fused, first_index, options, refused)
            except InputError:  # configured to fuse a stage the shards can not search
                firsts.remove(fused)
    rerankers = [n for n in SHARDED_RERANKERS if registry.available(n, first_index, options)]
    return firsts + [f"{f}>>{r}" for f in firsts for r in rerankers]


def unsupported_reason(spec: str, refused: dict[str, str] | None = None) -> str | None:
    """Why pipeline ``spec`` can not run over shards (None when it can); ``refused``: :func:`refused_stages` of
    the shards (default: what no shards serve)."""
    refused = WHY_NOT if refused is None else refused
    for name in registry.parse(spec):
        if name not in SHARDED_FIRST_STAGES + SHARDED_RERANKERS or name in refused:
            return f"{name!r} is not served over shards: {refused.get(name, 'not supported')}"
    return None



def check_shardable(spec: str, shards: Sequence[Index], options: PipelineOptions, refused: dict[str, str]) -> None:
    """InputError unless pipeline ``spec`` runs over ``shards``: each of its stages served over shards, and a
    fusion's stages searchable over them."""
    reason = unsupported_reason(spec, refused)
    if reason:
        raise InputError(f"pipeline {spec!r} can not be served over shards: {reason}")
    first = registry.parse(spec)[0]
    if first in FUSED:
        fusion_settings(first, shards[0], options, refused)


def served_over_shards(config: ServiceConfig, shards: Sequence[Index], options: PipelineOptions,
                       refused: dict[str, str]) -> tuple[str, ...]:
    """The pipelines a sharded server answers: those of the config (each checked to run over shards), else every
    one the shards support; the default among them."""
    return served_pipelines(config.pipelines, config.default_pipeline,
                            lambda: sharded_pipelines(shards, options, refused),
                            lambda spec: check_shardable(spec, shards, options, refused))


@dataclass
class Plan:
    """What a sharded server deploys for its config."""

    paths: list[str]  # the shard directories, resolved
    shards: list[Index]
    options: PipelineOptions
    refused: dict[str, str]  # refused_stages(shards)
    served: tuple[str, ...]  # the pipelines answered
    fusions: dict[str, dict]  # per fusion served, fusion_settings
    stages: list[str]  # the first stages each shard searches (a fusion's stages, not the fusion: the front fuses)
    rerankers: list[str]  # one deployment each
    statistics: list[dict]  # per shard, {component: the shard set's statistics} of the BM25-scored stages searched


def plan(config: ServiceConfig) -> Plan:
    """The :class:`Plan` of ``config``; InputError for shards that are not one shard set, or a pipeline they can
    not serve (before anything is deployed)."""
    if not config.shards:
        raise InputError("a sharded server needs shards (--shards DIR,DIR,...)")
    paths = [str(Path(p).resolve()) for p in config.shards]
    read_shard_set(paths)  # every shard of one build, each once: else an InputError saying what is wrong
    shards = [Index(p, verify_checksums=config.verify_checksums) for p in paths]
    options = PipelineOptions.from_mapping(config.options)
    refused = refused_stages(shards)
    served = served_over_shards(config, shards, options, refused)
    names = [registry.parse(p) for p in served]
    stages = list(dict.fromkeys(n[0] for n in names))
    fusions = {fused: fusion_settings(fused, shards[0], options, refused) for fused in FUSED if fused in stages}
    for fused, settings in fusions.items():  # the shards search what a fusion fuses; the front fuses
        stages = list(dict.fromkeys([*(s for s in stages if s != fused), *settings["stages"]]))
    statistics: list[dict] = [{} for _ in paths]
    for component in ("bm25", "deepct"):
        if component in stages:
            for mine, stats in zip(statistics, global_statistics(paths, component)):
                mine[component] = stats
    return Plan(paths, shards, options, refused, served, fusions, stages,
                list(dict.fromkeys(r for n in names for r in n[1:])), statistics)
