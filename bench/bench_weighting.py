"""Learned term weighting figures on this machine (printed, never asserted): inference throughput of the encoder +
DeepCT and DeepImpact heads (passages/s, one encoder pass for both), and query latency / queries per second of
deepct, deepimpact and bm25 over the same topics, one query at a time and in one batch.

    .venv/bin/python -m bench.bench_weighting --collection ../shared/collections/beir-scifact \
        --index indexes/scifact-learned --topics ../shared/collections/beir-scifact/queries.tsv [--passages 200]
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--collection", required=True)
    p.add_argument("--index", required=True, help="index with bm25, deepct and deepimpact components")
    p.add_argument("--topics", required=True)
    p.add_argument("--passages", type=int, default=200, help="passages encoded for the throughput figure")
    p.add_argument("--device", default=None)
    args = p.parse_args()

    from weir.indexer.collections import Collection
    from weir.indexer.index_dir import Index
    from weir.indexer.weighting.build import DEFAULT_MODELS
    from weir.indexer.weighting.model import TermWeighter, weigh_many
    from weir.ranker import registry
    from weir.core.runtime import shipped_model
    from weir.core.trec import read_topics

    docs = [d for _, d in zip(range(args.passages), Collection.open(args.collection).corpus())]
    di = TermWeighter(shipped_model(DEFAULT_MODELS["deepimpact"]), device=args.device)
    ct = TermWeighter(shipped_model(DEFAULT_MODELS["deepct"]), backbone=di.backbone)
    texts = [d.contents for d in docs]
    from weir.indexer.weighting.model import TermStatistics

    stats = TermStatistics(texts)
    weigh_many([ct], texts[:8])  # warm-up
    start = time.perf_counter()
    vecs = di.backbone.term_vectors(texts, di.batch_size)
    encoded = time.perf_counter() - start
    for i, (terms, v) in enumerate(vecs):
        di.apply(v, stats.features(di.features, i, terms))
        ct.apply(v, None)
    total = time.perf_counter() - start
    print(f"inference on {di.backbone.device}: {len(docs)} passages, encoder {len(docs) / encoded:.1f} passages/s, "
          f"encoder + both heads {len(docs) / total:.1f} passages/s")

    index = Index(args.index)
    topics = read_topics(args.topics)
    for name in ("bm25", "deepct", "deepimpact", "deepimpact+bm25"):
        pipe = registry.build(name, index)
        pipe(topics[:20], k=1000)  # warm-up
        single = []
        for q in topics:
            t = time.perf_counter()
            pipe([q], k=1000)
            single.append(time.perf_counter() - t)
        t = time.perf_counter()
        pipe(topics, k=1000)
        batch = time.perf_counter() - t
        print(f"{name:>16}: one at a time median {statistics.median(single) * 1000:.2f} ms, p95 "
              f"{sorted(single)[int(0.95 * len(single))] * 1000:.2f} ms ({len(single) / sum(single):.1f} q/s); "
              f"batch of {len(topics)}: {len(topics) / batch:.1f} q/s")


if __name__ == "__main__":
    main()
