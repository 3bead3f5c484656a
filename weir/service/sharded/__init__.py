"""Sharded, replicated serving on Ray Serve: the `weir serve` gRPC contract over the shards of one collection.

``weir serve --shards DIR0,DIR1,...`` (or ``shards = [...]`` in the service config) serves every shard of one
collection, built one by one (``weir index build --shard I/N``) or as one set (``--shard-set N``). The pieces:

- **shard searchers**, one Ray Serve deployment per shard (``ShardSearcher``, ``[ray] shard_replicas`` replicas each):
  a replica opens its shard and answers the first stage for a batch of query texts with its own top k, and the
  stored text of the documents it holds (:mod:`weir.service.sharded.deployments`);
- **rerankers**, one deployment per reranker served (``RerankerDeployment``, ``[ray] reranker_replicas`` replicas,
  ``num_gpus`` when the cluster has GPUs, CPU otherwise): queries of concurrent requests are batched by Ray Serve's
  ``@serve.batch``; a replica reads the candidates' text from the shards' stored documents (the same module);
- **the front**, in the ``weir serve`` process (the Ray driver): the same gRPC servicer as a single server
  (:class:`weir.service.server.SearchService`: validation, limits, admission, deadlines, micro-batching, health,
  reflection, tokens, TLS, metrics, drain, every status code), whose batches scatter the first stage to every shard,
  merge the shards' top k into the top k of the whole collection, and rerank once (:mod:`weir.service.sharded.front`);
- **the replicas' watch** (:mod:`weir.service.sharded.replicas`): Ray Serve's view of each deployment's replicas, read
  twice a second: a call to a deployment with none running is UNAVAILABLE at once, naming it; a call a dying replica
  held is asked once more of another; ``Info`` lists the replicas (degraded: fewer than asked) and the health service
  is NOT_SERVING while a deployment has none; each recovery is timed (metrics, log);
- **what is served** over which shards, and the plan of what to deploy (:mod:`weir.service.sharded.pipelines`);
- **the server** (:class:`weir.service.sharded.server.ShardedServer`): starts or joins Ray, deploys the plan, and
  removes its deployments when it drains.

**Comparable scores.** A shard's first stage scores every document exactly as one index over the whole collection
would (:mod:`weir.indexer.shards`): BM25 (``bm25``, and ``deepct``'s BM25 over term weights a model gave each
document on its own) reads the collection's document count, total length and each term's document frequency, and
each shard replica is given those of the whole shard set (summed from the shards' stored postings statistics when
the server starts) instead of its own; a flat faiss index's inner products need no collection statistics. The front
merges the shards' lists by score, then by document id in UTF-8 byte order, which is the order of a single index's
BM25 search (ties by id), so the merged top k *is* the single index's top k, ranks and float scores alike; a shard's
top ``n`` holds every document of the global top ``n`` it owns, so nothing is missed. Rerankers score (query,
candidate text) pairs of one query at a time, independently of their batch, so the reranked top k matches the single
server's too.

``hybrid`` and ``deepimpact+bm25`` are fused at the front: each stage they fuse is scattered and merged into the
whole collection's list to the fusion's depth, and the lists are fused with the single index's code and settings
(tuned in the first shard's index, or recorded in its DeepImpact card, else the defaults), so they give the single
server's fused ranking.

``deepimpact`` scores a document by its quantized impacts alone, so it compares across shards when the shards are
one shard set (``weir index build --shard-set N``, :func:`weir.indexer.shard_set.build_shard_set`): weighed in one pass over
the whole collection (its term statistics for a BM25-shaped head) and quantized with the whole collection's largest
impact, each shard holds the single index's postings for its documents. Shards built one by one (``--shard I/N``)
each quantize with their own largest impact, a scale of their own: ``deepimpact`` and ``deepimpact+bm25`` are
refused over them, as is ``deepct`` when its head reads collection statistics (lexical features).

**Dense shards.** A flat (exact) faiss shard gives the exact inner products of its top k, so the merged top k is the
whole flat index's. An HNSW or IVF-Flat shard (``--dense-on-disk`` too) gives exact inner products of the
neighbours it finds: the merged list is the best of every shard's approximate top k, approximate as a single HNSW or
IVF index of the whole collection is, and its scores compare across shards. An IVF-PQ shard chooses its candidates
with codebooks it trained on its own vectors and re-scores them exactly from its stored vectors (``--dense-rerank``,
the default), so its scores compare as an IVF-Flat shard's do; ``dense`` (and what fuses it) is refused over IVF-PQ
shards built without re-scoring.

**Limits.** First stages served over shards: ``bm25``, ``deepct``, ``deepimpact`` (a shard set), ``dense`` (flat,
HNSW, IVF-Flat, IVF-PQ re-scored), and ``hybrid`` and ``deepimpact+bm25`` of them. Exact ties of dense scores are
ordered by document id here, by faiss row in a single index. Rerankers: ``attention`` and ``crossencoder`` (they read
the candidates' text only). ``ltr`` (its features read whole-index statistics and the dense vectors of one index) is
not served over shards. A request for a pipeline the shards can not serve is INVALID_ARGUMENT naming the reason, and
a config that asks for one fails at start-up. Every replica reads its shard from the filesystem it runs on: on
several machines, the shard directories must be on storage each machine sees at the same path. The front itself is
one process; run several behind a load balancer to replicate it.
"""
