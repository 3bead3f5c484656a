"""Dense retrieval benchmarks that PRINT measured figures (nothing here is asserted):

1. encoding throughput (passages/s): our encoder vs ``SentenceTransformer(...).encode`` on the same passages;
2. faiss search latency, exact (IndexFlatIP) vs HNSW (built from the index's stored vectors), one query at a time and
   batched, query vectors encoded beforehand;
3. end-to-end latency of ``hybrid`` vs its parts (``bm25``, ``dense``, fusion), batched and one query at a time;
4. memory of the loaded dense index (resident set growth, faiss index bytes, stored vectors).

Usage (an index built with ``--with bm25,dense``):

    python -m bench.bench_dense --index /tmp/weir-dense/scifact \
        --topics ../shared/collections/beir-scifact/queries.tsv
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def bench_encoding(corpus: Path, n: int, batch_size: int) -> None:
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from weir.indexer.encoder import shared_encoder
    from weir.core.runtime import default_model_path

    with open(corpus, encoding="utf-8") as f:
        docs = [json.loads(line) for line in itertools.islice(f, n)]
    texts = [f"{d.get('title', '')} {d['text']}".strip() for d in docs]
    ours = shared_encoder(batch_size=batch_size)
    st = SentenceTransformer(default_model_path(), device=ours.device)
    ours.encode_passages(texts[:batch_size])  # warm-up
    st.encode(texts[:batch_size], batch_size=batch_size)
    rows = []
    for name, fn in (("weir Encoder", lambda: ours.encode_passages(texts)),
                     ("sentence-transformers", lambda: st.encode(texts, batch_size=batch_size)),
                     ("weir Encoder (again)", lambda: ours.encode_passages(texts))):
        start = time.perf_counter()
        out = fn()
        rows.append((name, len(texts) / (time.perf_counter() - start), out))
    diff = float(np.abs(rows[0][2] - rows[1][2]).max())
    print(f"\n## encoding throughput ({len(texts)} passages of {corpus.parent.name}, max 256 word pieces, "
          f"batch {batch_size}, {ours.device}, {getattr(ours, 'threads', '-')} torch threads)")
    for name, rate, _ in rows:
        print(f"  {name:<24} {rate:7.1f} passages/s")
    print(f"  max |ours - sentence-transformers| = {diff:.2e}")


def latency(fn, items, repeat: int = 1) -> list[float]:
    out = []
    for item in items:
        start = time.perf_counter()
        for _ in range(repeat):
            fn(item)
        out.append((time.perf_counter() - start) / repeat)
    return out


def summary(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
    return f"mean {ms(statistics.fmean(values))}, p50 {ms(statistics.median(values))}, p95 {ms(p95)}"


def bench_faiss(index, topics) -> None:
    import faiss
    import numpy as np

    from weir.indexer.dense import index_from_vectors, open_dense
    from weir.ranker.retrievers.dense import DenseRetriever

    stored = open_dense(index)
    queries = DenseRetriever(index).encode(topics)
    flat = stored.faiss if stored.kind == "flat" else index_from_vectors(stored.vectors, "flat", {})
    start = time.perf_counter()
    hnsw = index_from_vectors(stored.vectors, "hnsw", {"M": 32, "efConstruction": 200, "efSearch": 128})
    hnsw_build = time.perf_counter() - start
    _, exact = flat.search(queries, 10)
    print(f"\n## faiss search, top 10 of {flat.ntotal} vectors ({flat.d} dims), {len(queries)} queries, "
          f"{faiss.omp_get_max_threads()} faiss threads (HNSW M=32 efC=200 built in {hnsw_build:.1f}s)")
    for name, idx, ef in (("exact IndexFlatIP", flat, None), ("HNSW efSearch=64", hnsw, 64),
                          ("HNSW efSearch=128", hnsw, 128), ("HNSW efSearch=256", hnsw, 256)):
        if ef:
            idx.hnsw.efSearch = ef
        single = latency(lambda i: idx.search(queries[i:i + 1], 10), range(len(queries)))
        start = time.perf_counter()
        _, found = idx.search(queries, 10)
        batched = (time.perf_counter() - start) / len(queries)
        recall = np.mean([len(set(e) & set(a)) / 10 for e, a in zip(exact.tolist(), found.tolist())])
        print(f"  {name:<20} one query: {summary(single)}; batched: {ms(batched)}/query; recall@10 vs exact {recall:.4f}")


def bench_pipelines(index, topics, single_queries: int) -> None:
    from weir.ranker import registry
    from weir.ranker.retrievers.dense import DenseRetriever

    built = {name: registry.build(name, index) for name in ("bm25", "dense", "hybrid")}
    hybrid = built["hybrid"].stages[0]
    encoder = next(s for s in hybrid.stages if isinstance(s, DenseRetriever)).encoder
    for p in built.values():  # warm-up (JVM, model)
        p(topics[:2], k=10)
    print(f"\n## pipeline latency, top 1000 ({hybrid.method} fusion of {', '.join(s.name for s in hybrid.stages)}, "
          f"depth {hybrid.depths} per stage); the query-embedding cache is cleared before each measurement")
    for name, p in built.items():
        encoder.clear_cache()
        start = time.perf_counter()
        p(topics, k=1000)
        batched = (time.perf_counter() - start) / len(topics)
        parts = ""
        if name == "hybrid":
            parts = " (" + ", ".join(f"{n} {ms(t / len(topics))}" for n, t in hybrid.last_timings.items()) + " per query)"
        encoder.clear_cache()
        single = latency(lambda q: p([q], k=1000), topics[:single_queries])
        print(f"  {name:<7} batched ({len(topics)} queries): {ms(batched)}/query{parts}; one query at a time "
              f"({single_queries}): {summary(single)}")


def bench_memory(index_path: str) -> None:
    import faiss

    from weir.indexer.dense import open_dense
    from weir.indexer.encoder import shared_encoder
    from weir.indexer.index_dir import Index

    before = rss_mib()
    dense = open_dense(Index(index_path))
    after_index = rss_mib()
    _ = dense.rows(dense.docids[:1])
    vectors_file = dense.path / "vectors.npy"
    print(f"\n## memory of the loaded dense index ({dense.kind}, {dense.faiss.ntotal} x {dense.dim})")
    print(f"  resident set growth on open (faiss index + docids): {after_index - before:.1f} MiB")
    print(f"  faiss index serialized: {len(faiss.serialize_index(dense.faiss)) / 2**20:.1f} MiB; "
          f"index.faiss on disk {(dense.path / 'index.faiss').stat().st_size / 2**20:.1f} MiB; "
          f"vectors.npy (float16, memory-mapped) {vectors_file.stat().st_size / 2**20:.1f} MiB")
    start_rss = rss_mib()
    shared_encoder()
    print(f"  query encoder (all-MiniLM-L6-v2) resident growth: {rss_mib() - start_rss:.1f} MiB")


def main() -> None:
    from weir.indexer.index_dir import Index
    from weir.core.trec import read_topics

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", required=True, help="index directory built --with bm25,dense")
    p.add_argument("--topics", required=True, help="topics to time")
    p.add_argument("--passages", type=int, default=512, help="passages for the encoding throughput (default 512)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--single-queries", type=int, default=50, help="queries timed one at a time (default 50)")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: memory,encoding,faiss,pipelines")
    args = p.parse_args()
    skip = set(args.skip.split(","))
    if "memory" not in skip:
        bench_memory(args.index)  # first, on a fresh process
    index = Index(args.index)
    topics = read_topics(args.topics)
    if "encoding" not in skip:
        bench_encoding(Path(index.manifest["collection"]["corpus"]), args.passages, args.batch_size)
    if "faiss" not in skip:
        bench_faiss(index, topics)
    if "pipelines" not in skip:
        bench_pipelines(index, topics, args.single_queries)


if __name__ == "__main__":
    main()
