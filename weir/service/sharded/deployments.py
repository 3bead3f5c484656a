"""The Ray Serve deployments of sharded serving; their code runs in Ray worker processes. :class:`ShardSearcher`
answers one shard's first stages (its top k per query, with the shard set's statistics) and the stored text of the
documents it holds; :class:`RerankerDeployment` reranks the merged candidates of queries batched by ``@serve.batch``,
reading their text from every shard's stored documents (:class:`ShardDocuments`). Hits travel between the
deployments and the front as (doc_id, score) pairs per query, small to pickle."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ray import serve

from weir.core.types import Document, Hit, Query, Run
from weir.indexer.index_dir import Index
from weir.indexer.shards import CollectionStatistics
from weir.ranker import registry
from weir.ranker.options import PipelineOptions
from weir.service.process import freeze_long_lived, jvm_heap_for
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
        freeze_long_lived()

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

    @property
    def passage_states(self):
        """Every shard's passage states as one (None unless every shard has them)."""
        shards = [index.passage_states for index in self.indexes]
        if any(s is None for s in shards):
            return None
        from weir.indexer.passage_states import ShardStates

        return ShardStates(shards)

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
        freeze_long_lived()

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
