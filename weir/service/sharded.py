"""Sharded, replicated serving on Ray Serve: the `weir serve` gRPC contract over the shards of one collection.

``weir serve --shards DIR0,DIR1,...`` (or ``shards = [...]`` in the service config) serves every shard of one
collection, built one by one (``weir index build --shard I/N``) or as one set (``--shard-set N``). The pieces:

- **shard searchers**, one Ray Serve deployment per shard (``ShardSearcher``, ``[ray] shard_replicas`` replicas each):
  a replica opens its shard and answers the first stage for a batch of query texts with its own top k, and the
  stored text of the documents it holds;
- **rerankers**, one deployment per reranker served (``RerankerDeployment``, ``[ray] reranker_replicas`` replicas,
  ``num_gpus`` when the cluster has GPUs, CPU otherwise): queries of concurrent requests are batched by Ray Serve's
  ``@serve.batch``; a replica reads the candidates' text from the shards' stored documents;
- **the front**, in the ``weir serve`` process (the Ray driver): the same gRPC servicer as a single server
  (:class:`weir.service.server.SearchService`: validation, limits, admission, deadlines, micro-batching, health,
  reflection, tokens, TLS, metrics, drain, every status code), whose batches scatter the first stage to every shard,
  merge the shards' top k into the top k of the whole collection, and rerank once.

**Comparable scores.** A shard's first stage scores every document exactly as one index over the whole collection
would (:mod:`weir.indexer.shards`): BM25 (``bm25``, and ``deepct``'s BM25 over term weights a model gave each document on
its own) reads the collection's document count, total length and each term's document frequency, and each shard
replica is given those of the whole shard set (summed from the shards' stored postings statistics when the server
starts) instead of its own; a flat faiss index's inner products need no collection statistics. The front merges the
shards' lists by score, then by document id in UTF-8 byte order, which is the order of a single index's BM25 search
(ties by id), so the merged top k *is* the single index's top k, ranks and float scores alike; a shard's top ``n``
holds every document of the global top ``n`` it owns, so nothing is missed. Rerankers score (query, candidate text)
pairs of one query at a time, independently of their batch, so the reranked top k matches the single server's too.

``hybrid`` and ``deepimpact+bm25`` are fused at the front: each stage they fuse is scattered and merged into the
whole collection's list to the fusion's depth, and the lists are fused with the single index's code and settings
(tuned in the first shard's index, or recorded in its DeepImpact card, else the defaults), so they give the single
server's fused ranking.

``deepimpact`` scores a document by its quantized impacts alone, so it compares across shards when the shards are
one shard set (``weir index build --shard-set N``, :func:`weir.indexer.build.build_shard_set`): weighed in one pass over
the whole collection (its term statistics for a BM25-shaped head) and quantized with the whole collection's largest
impact, each shard holds the single index's postings for its documents. Shards built one by one (``--shard I/N``)
each quantize with their own largest impact, a scale of their own: ``deepimpact`` and ``deepimpact+bm25`` are
refused over them, as is ``deepct`` when its head reads collection statistics (lexical features).

**Dense shards.** A flat (exact) faiss shard gives the exact inner products of its top k, so the merged top k is the
whole flat index's. An HNSW or IVF-Flat shard (``--dense-on-disk`` too) gives exact inner products of the
neighbours it finds: the merged list is the best of every shard's approximate top k, approximate as a single HNSW or
IVF index of the whole collection is, and its scores compare across shards. An IVF-PQ shard scores with codebooks
it trained on its own vectors, so ``dense`` (and what fuses it) is refused over IVF-PQ shards.

**Limits.** First stages served over shards: ``bm25``, ``deepct``, ``deepimpact`` (a shard set), ``dense`` (flat,
HNSW, IVF-Flat), and ``hybrid`` and ``deepimpact+bm25`` of them. Exact ties of dense scores are ordered by document
id here, by faiss row in a single index. Rerankers: ``attention`` and ``crossencoder`` (they read the candidates' text only). ``ltr``
(its features read whole-index statistics and the dense vectors of one index) is not served over shards. A request
for a pipeline the shards can not serve is INVALID_ARGUMENT naming the reason, and a config that asks for one fails
at start-up. Every replica reads its shard from the filesystem it runs on: on several machines, the shard
directories must be on storage each machine sees at the same path. The front itself is one process; run several
behind a load balancer to replicate it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from ray import serve

from weir.indexer.index_dir import Index
from weir.indexer.shards import CollectionStatistics, global_statistics, read_shard_set
from weir.ranker import registry
from weir.ranker.options import PipelineOptions
from weir.service.batching import Abandoned, Item
from weir.service.config import ServiceConfig
from weir.service.metrics import Metrics
from weir.service.server import Failure, SearchService, Server, jvm_heap_for
from weir.core.types import Document, Hit, InputError, Query, Run

log = logging.getLogger("weir.service.sharded")

SHARDED_FIRST_STAGES = ("bm25", "deepct", "deepimpact", "dense", "hybrid", "deepimpact+bm25")
SHARDED_RERANKERS = ("attention", "crossencoder")
SHARD_STAGES = ("bm25", "deepct", "deepimpact", "dense")  # what a shard searches; the front fuses the merged lists
FUSED = ("hybrid", "deepimpact+bm25")
WHY_NOT = {
    "ltr": "its features read whole-index statistics and one index's dense vectors",
}
# Hits travel between the deployments and the front as (doc_id, score) pairs per query: small to pickle


# --- the deployments (their code runs in Ray worker processes) ---------------------------------------------------


class ShardSearcher:
    """One shard's first stages. ``statistics``: per BM25-scored component (bm25, deepct), the shard set's
    statistics for this shard's terms."""

    def __init__(self, path: str, statistics: dict[str, CollectionStatistics], options: dict, stages: Sequence[str],
                 verify_checksums: bool = True):
        from weir.ranker.retrievers.bm25 import BM25
        from weir.ranker.retrievers.learned_sparse import DeepCTRetriever

        self.index = Index(path, verify_checksums=verify_checksums)
        os.environ.setdefault("WEIR_JVM_HEAP", jvm_heap_for(self.index))
        opts = PipelineOptions.from_mapping(options)
        self.stages = {}
        for name in stages:
            if name == "bm25":
                self.stages[name] = BM25(self.index, k1=opts.bm25.k1, b=opts.bm25.b, statistics=statistics["bm25"])
            elif name == "deepct":
                self.stages[name] = DeepCTRetriever(self.index, k1=opts.deepct.k1, b=opts.deepct.b,
                                                    statistics=statistics["deepct"])
            else:
                self.stages[name] = registry.build_stage(name, self.index, opts)
        # the JVM, the analyzer, the encoder and the store of documents (pyserini's searcher: seconds to open) made
        # before this replica serves
        self.search(stages[0], ["warm up"], 1)
        self.index.documents(["weir-warm-up"])

    def search(self, stage: str, texts: list[str], k: int) -> list[list[tuple[str, float]]]:
        """Per text, this shard's top ``k`` (doc_id, score) of first stage ``stage``, best first."""
        queries = [Query(f"q{i}", t) for i, t in enumerate(texts)]
        run = self.stages[stage].retrieve(queries, k)
        return [[(h.doc_id, h.score) for h in run.get(q.id, [])] for q in queries]

    def documents(self, doc_ids: list[str]) -> dict[str, tuple[str, str]]:
        """(title, text) of those of ``doc_ids`` this shard holds."""
        return {d: (doc.title, doc.text) for d, doc in self.index.documents(doc_ids).items()}

    def ready(self) -> int:
        return self.index.num_docs


class ShardDocuments:
    """The stored documents of every shard, as a reranker reads documents from an index (``documents(ids)``)."""

    def __init__(self, paths: Sequence[str]):
        self.indexes = [Index(p) for p in paths]
        self.path = Path(paths[0])
        self.manifest = self.indexes[0].manifest

    @property
    def components(self) -> list[str]:
        return self.indexes[0].components

    def component_path(self, name: str) -> Path:
        return self.indexes[0].component_path(name)

    def documents(self, doc_ids: list[str], threads: int = 4) -> dict[str, Document]:
        out: dict[str, Document] = {}
        wanted = list(dict.fromkeys(doc_ids))
        for index in self.indexes:
            if not wanted:
                break
            found = index.documents(wanted, threads)
            out.update(found)
            wanted = [d for d in wanted if d not in found]
        return out


class RerankerDeployment:
    """One reranker over the shards' documents; concurrent requests are batched by ``@serve.batch``."""

    def __init__(self, name: str, paths: Sequence[str], options: dict, max_batch: int, wait_ms: float):
        self.name = name
        documents = ShardDocuments(paths)
        self.reranker = registry.build_stage(name, documents, PipelineOptions.from_mapping(options))
        for index in documents.indexes:  # every shard's store of documents opened before serving
            index.documents(["weir-warm-up"])
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="weir-rerank")
        self.batch_sizes: dict[int, int] = {}  # batch size -> batches this replica ran (see batch_counts)
        self.rerank.set_max_batch_size(max_batch)
        self.rerank.set_batch_wait_timeout_s(wait_ms / 1000)

    def _rerank_batch(self, requests: list[tuple[str, list[tuple], int, int]]) -> list[tuple[list[tuple], int]]:
        """Each request: (query text, candidates as (doc_id, score, stage_scores), k, depth); its reranked top k
        and the batch size. Requests of one (k, depth) are reranked together."""
        self.batch_sizes[len(requests)] = self.batch_sizes.get(len(requests), 0) + 1
        out: list = [None] * len(requests)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (_, _, k, depth) in enumerate(requests):
            groups.setdefault((k, depth), []).append(i)
        for (k, depth), rows in groups.items():
            queries = [Query(f"q{i}", requests[i][0]) for i in rows]
            run = Run({q.id: [Hit(d, s, r, dict(st)) for r, (d, s, st) in enumerate(requests[i][1], start=1)]
                       for q, i in zip(queries, rows)})
            reranked = self.reranker(queries, run, k=k, depth=depth)
            for q, i in zip(queries, rows):
                out[i] = ([(h.doc_id, h.score, h.stage_scores) for h in reranked.get(q.id, [])], len(requests))
        return out

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)  # both set per deployment in __init__
    async def rerank(self, requests):
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._rerank_batch, requests)

    def batch_counts(self) -> dict[int, int]:
        """How many batches of each size the replica answering this call has run (``@serve.batch`` at work)."""
        return dict(self.batch_sizes)

    def ready(self) -> str:
        return self.name


# --- the front -------------------------------------------------------------------------------------------------


def refused_stages(shards: Sequence[Index]) -> dict[str, str]:
    """The first stages and rerankers these shards can not serve as one index, with the reason: ``ltr`` always,
    a learned component whose weights are on each shard's own scale (:func:`weir.indexer.shards.incomparable_learned`),
    and what fuses one."""
    from weir.indexer.shards import incomparable_learned

    refused = dict(WHY_NOT)
    refused.update(incomparable_learned([s.manifest for s in shards]))
    kinds = sorted({(s.manifest["components"].get("dense") or {}).get("index", "flat") for s in shards})
    if "ivfpq" in kinds:
        refused["dense"] = ("an IVF-PQ shard scores with product-quantization codes of its own (each shard trained "
                            "its codebooks): scores of different shards do not compare; build the shards with "
                            "--dense-index flat, hnsw or ivfflat")
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


def served_pipelines(config: ServiceConfig, shards: Sequence[Index], options: PipelineOptions,
                     refused: dict[str, str]) -> tuple[str, ...]:
    """The pipelines a sharded server answers: those of the config (each checked to run over shards), else every
    one the shards support; the default among them."""
    if config.pipelines is None:
        allowed = sharded_pipelines(shards, options, refused)
    else:
        allowed = [">>".join(registry.parse(p)) for p in config.pipelines]
        for spec in allowed:
            reason = unsupported_reason(spec, refused)
            if reason:
                raise InputError(f"pipeline {spec!r} can not be served over shards: {reason}")
            for fused in FUSED:
                if registry.parse(spec)[0] == fused:
                    fusion_settings(fused, shards[0], options, refused)
    default = ">>".join(registry.parse(config.default_pipeline))
    if default not in allowed:
        raise InputError(f"the default pipeline {default!r} is not among the served ones: {', '.join(allowed)}")
    return tuple(dict.fromkeys(allowed))


class ShardedSearchService(SearchService):
    """:class:`SearchService` whose batches run over shard and reranker deployments (see the module docstring)."""

    def __init__(self, config: ServiceConfig, shards: list[Index], options: PipelineOptions, metrics: Metrics,
                 searchers: list, rerankers: dict, refused: dict[str, str]):
        self.config, self.limits, self.metrics = config, config.limits, metrics
        self.shards, self.index = shards, shards[0]
        self.options = options
        self.searchers, self.rerankers = searchers, rerankers
        self.refused = refused  # refused_stages(shards), as the deployment computed it
        self.allowed = self._allowed_pipelines(options)
        firsts = {registry.parse(p)[0] for p in self.allowed}
        self.fusions = {name: fusion_settings(name, self.index, options, self.refused) for name in FUSED
                        if name in firsts}
        self._start_admission("weir-front")

    def _allowed_pipelines(self, options: PipelineOptions) -> tuple[str, ...]:
        return served_pipelines(self.config, self.shards, options, self.refused)

    def _check(self, request):
        try:
            return super()._check(request)
        except Failure as f:
            spec = request.pipeline.strip()
            try:
                reason = unsupported_reason(spec, self.refused) if spec else None
            except InputError:
                reason = None
            if reason:
                raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                              f"{reason}; served: {', '.join(self.allowed)}") from None
            raise f

    def warm_up(self) -> None:
        self._run_batch((self.config.default_pipeline, 1, None), [Item("warm up")])

    def _public(self, message: str) -> str:
        from weir.core.runtime import PACKAGE

        for shard in self.shards:
            for path in (shard.path.resolve(), shard.path):
                message = message.replace(str(path), "<shard>")
        return message.replace(str(PACKAGE), "<weir>")

    # --- one batch, on a worker thread of the front --------------------------------------------------------------

    @staticmethod
    def _timeout(items: list[Item]) -> float | None:
        deadlines = [i.deadline for i in items]
        if any(d is None for d in deadlines):
            return None
        return max(0.001, max(deadlines) - time.monotonic())

    @staticmethod
    def _result(response, timeout: float | None, what: str):
        try:
            return response.result(timeout_s=timeout)
        except TimeoutError:
            raise Failure(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed; the work for it stopped") from None
        except Exception as e:  # a replica that failed or died: Ray's error, logged here, not shown to callers
            log.error("%s failed: %s", what, e)
            raise Failure(grpc.StatusCode.UNAVAILABLE, f"{what} failed or is unavailable; try again") from None

    def _run_batch(self, key, items: list[Item]) -> list:
        spec, k, depth = key
        names = registry.parse(spec)
        first, rerankers = names[0], names[1:]
        timings: dict[str, float] = {}
        live = list(range(len(items)))

        def keep() -> None:
            now = time.monotonic()
            live[:] = [i for i in live if items[i].wanted(now)]

        def hand_on(stage_index: int) -> int:  # as Pipeline: a stage hands on what the next stage reranks
            if stage_index == len(names) - 1:
                return k
            following = getattr(self.options, registry.RERANKERS[names[stage_index + 1]].options).depth
            return max(k, depth or following)

        # the first stage: scattered to every shard, merged by (score, doc id); a fusion fuses the merged lists
        keep()
        results: dict[int, list[tuple]] = {}
        owner: dict[str, int] = {}
        if live:
            start = time.perf_counter()
            n = hand_on(0)
            texts = [items[i].query for i in live]
            timeout = self._timeout([items[i] for i in live])
            if first in self.fusions:
                merged = self._fused(first, texts, n, timeout, owner)
            else:
                merged = [[(d, s, {first: s}) for d, s in hits] for hits in self._scatter(first, texts, n, timeout,
                                                                                            owner)]
            for row, i in enumerate(live):
                results[i] = merged[row]
            timings[first] = time.perf_counter() - start
        # each reranker once, its requests batched by @serve.batch with those of other batches
        for position, name in enumerate(rerankers, start=1):
            keep()
            if not live:
                break
            start = time.perf_counter()
            n = hand_on(position)
            timeout = self._timeout([items[i] for i in live])
            handle = self.rerankers[name]
            calls = [(i, handle.rerank.remote((items[i].query, results[i], n, depth or 0))) for i in live]
            for i, call in calls:
                results[i], _ = self._result(call, timeout, f"reranker {name}")
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
        keep()
        self.metrics.batch(spec, len(items), timings)
        docs: dict[str, Document] = {}
        wanted = [d for i in live if items[i].include_text for d, _, _ in results[i]]
        if wanted:
            by_shard: dict[int, list[str]] = {}
            for d in dict.fromkeys(wanted):
                by_shard.setdefault(owner[d], []).append(d)
            timeout = self._timeout([items[i] for i in live])
            calls = [(j, self.searchers[j].documents.remote(ids)) for j, ids in by_shard.items()]
            for j, call in calls:
                docs.update((d, Document(d, t, x)) for d, (t, x) in self._result(call, timeout, f"shard {j}").items())
        out: list = []
        alive = set(live)
        for i, item in enumerate(items):
            if i not in alive:
                out.append(Abandoned())
                continue
            hits = [Hit(d, s, r, dict(st)) for r, (d, s, st) in enumerate(results[i], start=1)]
            out.append((hits, {h.doc_id: docs.get(h.doc_id) for h in hits} if item.include_text else {},
                        timings, len(items)))
        return out

    def _send(self, stage: str, texts: list[str], n: int) -> list:
        """Ask every shard for its top ``n`` of ``stage`` per text (the calls run while the caller sends others)."""
        return [s.search.remote(stage, texts, n) for s in self.searchers]

    def _scatter(self, stage: str, texts: list[str], n: int, timeout: float | None,
                 owner: dict[str, int], calls: list | None = None) -> list[list[tuple[str, float]]]:
        """Per text, the whole collection's top ``n`` of ``stage``: every shard's top ``n`` (``calls`` already
        sent, else sent now), merged by (score, doc id); ``owner`` learns which shard holds each hit."""
        calls = calls if calls is not None else self._send(stage, texts, n)
        per_shard = [self._result(c, timeout, f"shard {j}") for j, c in enumerate(calls)]
        out = []
        for row in range(len(texts)):
            merged = []
            for j, hits in enumerate(per_shard):
                merged.extend(hits[row])
                owner.update((d, j) for d, _ in hits[row])
            merged.sort(key=lambda h: (-h[1], h[0]))
            out.append(merged[:n])
        return out

    def _fused(self, name: str, texts: list[str], n: int, timeout: float | None,
               owner: dict[str, int]) -> list[list[tuple]]:
        """``hybrid`` or ``deepimpact+bm25`` over shards: each fused stage's whole-collection list (its shards'
        merged top k, to the stage's depth), fused as one index fuses them (:func:`weir.ranker.retrievers.hybrid.fuse_runs`,
        with the settings the first shard's index gives: tuned, from the DeepImpact card, or default)."""
        from weir.ranker.retrievers.hybrid import fuse_runs

        settings = self.fusions[name]
        depth = max(settings["depth"], n)
        sent = [self._send(stage, texts, depth) for stage in settings["stages"]]  # every stage's calls at once
        runs = []
        for stage, calls in zip(settings["stages"], sent):
            lists = self._scatter(stage, texts, depth, timeout, owner, calls)
            runs.append(Run({f"q{row}": [Hit(d, s, r, {stage: s}) for r, (d, s) in enumerate(hits, start=1)]
                             for row, hits in enumerate(lists)}))
        fused = fuse_runs(runs, method=settings["method"], weights=settings["weights"], k=settings["rrf_k"],
                          depth=n, name=name)
        return [[(h.doc_id, h.score, h.stage_scores) for h in fused.get(f"q{row}", [])] for row in range(len(texts))]

    def _documents(self) -> int:
        return sum(s.num_docs for s in self.shards)


_app_counter = 0
_app_lock = threading.Lock()


class ShardedServer(Server):
    """A :class:`Server` whose servicer runs over Ray Serve deployments of the configured shards. Starts a local
    Ray instance (``[ray] address = "local"``) or joins a cluster, deploys the shard searchers and rerankers, and
    removes its deployments when it drains."""

    def __init__(self, config: ServiceConfig):
        super().__init__(config)
        self.apps: list[str] = []
        self.started_ray = False

    async def open_service(self) -> SearchService:
        return await asyncio.get_running_loop().run_in_executor(None, self._deploy)

    def _deploy(self) -> ShardedSearchService:
        global _app_counter
        import ray

        config, settings = self.config, self.config.ray
        if not config.shards:
            raise InputError("a sharded server needs shards (--shards DIR,DIR,...)")
        paths = [str(Path(p).resolve()) for p in config.shards]
        read_shard_set(paths)  # every shard of one build, each once: else an InputError saying what is wrong
        shards = [Index(p, verify_checksums=config.verify_checksums) for p in paths]
        options = PipelineOptions.from_mapping(config.options)
        refused = refused_stages(shards)
        names = [registry.parse(p) for p in served_pipelines(config, shards, options, refused)]
        firsts = list(dict.fromkeys(n[0] for n in names))
        for fused in FUSED:  # the shards search what a fusion fuses; the front fuses
            if fused in firsts:
                stages = fusion_settings(fused, shards[0], options, refused)["stages"]
                firsts = list(dict.fromkeys([*(f for f in firsts if f != fused), *stages]))
        reranker_names = list(dict.fromkeys(r for n in names for r in n[1:]))
        # per shard, {component: the shard set's statistics} of the BM25-scored components served
        statistics: list[dict] = [{} for _ in paths]
        for component in ("bm25", "deepct"):
            if component in firsts:
                for mine, stats in zip(statistics, global_statistics(paths, component)):
                    mine[component] = stats
        if not ray.is_initialized():
            if settings.address == "local":
                ray.init(address="local", num_cpus=settings.num_cpus, include_dashboard=False,
                         log_to_driver=False)
            else:
                ray.init(address=settings.address, log_to_driver=False)
            self.started_ray = True
        serve.start(proxy_location="Disabled")
        gpus = settings.reranker_num_gpus
        if gpus == "auto":
            gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        shard_class, reranker_class = serve.deployment(ShardSearcher), serve.deployment(RerankerDeployment)
        with _app_lock:
            _app_counter += 1
            prefix = f"weir-{os.getpid()}-{_app_counter}"
        targets = []  # one application per shard and per reranker, deployed together
        for j, (path, stats) in enumerate(zip(paths, statistics)):
            deployment = shard_class.options(name=f"shard-{j}", num_replicas=settings.shard_replicas,
                                             ray_actor_options={"num_cpus": settings.shard_num_cpus})
            targets.append(serve.RunTarget(deployment.bind(path, stats, dict(config.options), firsts,
                                                           config.verify_checksums),
                                           name=f"{prefix}-shard-{j}", route_prefix=None))
        for name in reranker_names:
            deployment = reranker_class.options(
                name=name, num_replicas=settings.reranker_replicas,
                ray_actor_options={"num_cpus": settings.reranker_num_cpus, "num_gpus": gpus})
            targets.append(serve.RunTarget(deployment.bind(name, paths, dict(config.options),
                                                           settings.reranker_max_batch,
                                                           settings.reranker_batch_wait_ms),
                                           name=f"{prefix}-{name}", route_prefix=None))
        self.apps = [t.name for t in targets]
        try:
            handles = serve.run_many(targets)
        except BaseException:  # a replica that can not start: nothing of this server stays deployed
            self.shutdown_ray()
            raise
        searchers, rerankers = handles[:len(paths)], dict(zip(reranker_names, handles[len(paths):]))
        log.info("deployed %d shard(s) x %d replica(s), reranker(s) %s x %d replica(s) (%s GPU each)", len(paths),
                 settings.shard_replicas, ", ".join(reranker_names) or "none", settings.reranker_replicas, gpus)
        return ShardedSearchService(config, shards, options, self.metrics, searchers, rerankers, refused)

    async def drain(self, grace: float | None = None) -> None:
        await super().drain(grace)
        await asyncio.get_running_loop().run_in_executor(None, self.shutdown_ray)

    def shutdown_ray(self) -> None:
        """Delete this server's applications; stop Serve and Ray when this server started Ray."""
        import ray

        if not ray.is_initialized():
            return
        if self.started_ray:  # the whole instance goes, this server's applications with it
            serve.shutdown()
            ray.shutdown()
            self.apps = []
            return
        for app in self.apps:
            try:
                serve.delete(app)
            except Exception as e:  # already gone with its cluster
                log.warning("could not delete Ray Serve application %s: %s", app, e)
        self.apps = []
