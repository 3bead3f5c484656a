"""weir's dense first stage at MS MARCO size: seeded synthetic passage vectors made from real ones, weir's default
dense index of them (``auto``: IVF-PQ re-scored from the stored vectors above 1M passages), and its recall against
exact search.

The vectors keep the shape of real MiniLM embeddings without encoding millions of passages on two cores: the 39,610
passages of the TREC DL 2019 pool are encoded once by weir's encoder (its default backend), and synthetic passage i
is ``normalize(P[a] + u * P[b] + noise)``: a pool passage, a share ``u ~ U(0, 0.5)`` of another (so that vectors lie
between the pool's topics as well as around them), and isotropic noise of norm ``--noise`` (cosine to its seed about
0.85). Queries: the 43 DL 2019 topics as weir encodes them, then synthetic queries ``normalize(P[c] + noise)`` of norm
``--query-noise`` (cosine to their seed passage about 0.7, as a query to a passage that answers it). Everything is
drawn from ``--seed``. The files live under ``$WEIR_CACHE/scale/dense-<N>``, never in the repository:
``vectors.npy`` (float16, as weir stores passage vectors), ``queries.npy``, ``exact.npy`` (each query's exact top
100 by inner product with the stored vectors, computed block by block).

Subcommands:

- ``pool``: encode the pool and the DL 2019 topics (cached);
- ``generate --docs N``: the vectors, the queries and their exact neighbours;
- ``build --docs N [--index auto] [--nprobe 16] [--rerank 100]``: weir's dense index of them, from the stored vectors as
  ``weir index build`` makes it after encoding (:func:`weir.indexer.dense.index_parameters` and
  :func:`~weir.indexer.dense.index_from_vectors`), in a process of its own: wall time and peak RSS;
- ``query --docs N [--nprobe 8,16,32] [--rerank 0,100] [--flat]``: the component opened as a server opens it, one
  faiss thread, every query one call a setting (settings taking turns query by query; ``--flat``: exact search over
  the vectors held in memory too, what a user would otherwise run): median and p99 ms, recall@10 against the exact
  top 10, the process's anonymous and file-backed memory after the searches (before ``--flat``'s index is built).

Usage: python bench/dense_scale.py pool|generate|build|query --docs 1000000 [--queries 1000] [--seed 0]

Measured on a 2-core machine with bf16 (Intel Xeon, AMX), 24 GiB, 2026-12-06 (pool encoded with openvino-bf16 in
151 s; 8.8M vectors generated with their exact neighbours in 279 s). Default settings: nlist about 4 sqrt(n), 48
sub-quantizers of 8 bits (48 bytes a passage), trained on max(262,144, 40 per list) vectors, nprobe 16.

Build (``build``, wall time, peak RSS of the building process, which counts the pages of the memory-mapped
``vectors.npy`` it reads): 1M ``--index ivfpq`` 58 s (training 40 s on 262,144 vectors), 1.43 GiB; 8.8M ``auto``
(IVF-PQ, nlist 11,894) 472 s (training 151 s on 475,760 vectors, adding 8.8M about 5 min), 7.44 GiB.

Opened (``query``): anonymous memory of the process after opening and 50 searches, imports included: 1M 142 MiB,
8.8M 633 MiB (a flat index of 8.8M would hold 13.6 GB). The re-scored rows are read from the page cache
(file-backed, shared, evictable; the kernel maps whole folios, so RssFile grows by far more than the rows read).

k=10, one thread, 1,000 queries (43 DL 2019 topics, then synthetic), settings taking turns query by query; median
(p99) ms and recall@10 against the exact top 10 (all queries / the 43 topics):

| vectors | nprobe | rerank | ms | recall@10 | DL 2019 topics |
|---|---:|---:|---:|---:|---:|
| 1M | 16 | 0 | 0.42 (0.60) | 0.6018 | |
| 1M | 16 | 100 | 0.58 (0.76) | 0.9912 | |
| 1M | 64 | 100 | 0.81 (1.04) | 0.9933 | |
| 1M (with flat taking turns) | 16 | 1000 | 1.78 (2.22) | 0.9964 | 0.9767 |
| 1M flat (exact, in memory) | | | 108.19 (111.33) | 1.0000 | 1.0000 |
| 8.8M | 16 | 0 | 1.01 (1.23) | 0.3281 | 0.2581 |
| 8.8M | 16 | 100 | 1.17 (1.39) | 0.9167 | 0.7860 |
| 8.8M | 16 | 200 | 1.33 (1.74) | 0.9836 | 0.8930 |
| 8.8M | 16 | 400 | 1.49 (2.07) | 0.9970 | 0.9605 |
| 8.8M | 16 | **1000** | 2.10 (3.23) | 0.9997 | 0.9953 |
| 8.8M | 64 | 200 | 1.78 (2.09) | 0.9837 | 0.8953 |

The codes alone (rerank 0) order candidates poorly (8 dimensions a sub-quantizer); probing more lists barely helps,
re-scoring does: the default re-scores 1,000 candidates (chosen here, on synthetic data), 2.1 ms at 8.8M. With the
flat index taking turns (1M, ``--flat``) every IVF-PQ time about doubled (0.88 ms for nprobe 16 rerank 0): each flat
search sweeps 1.5 GB through the caches.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import COLLECTIONS, corpus, percentile

POOL = COLLECTIONS / "msmarco-passage-trec-dl-pool"
BLOCK = 1 << 16
EXACT_DEPTH = 100


def root() -> Path:
    return Path(os.environ.get("WEIR_CACHE") or Path.home() / ".cache" / "weir") / "scale"


def cache_dir(docs: int) -> Path:
    return root() / f"dense-{docs}"


def pool(args) -> tuple[np.ndarray, np.ndarray]:
    """The pool's passage vectors and the DL 2019 topics' query vectors (float32), encoded once and cached."""
    passages, topics = root() / "pool-vectors.npy", root() / "pool-topic-vectors.npy"
    if not passages.is_file():
        from weir.core.trec import read_topics
        from weir.indexer.encoder import shared_encoder

        root().mkdir(parents=True, exist_ok=True)
        encoder = shared_encoder(None, device="cpu")
        _, texts = corpus(POOL)
        started = time.perf_counter()
        vectors = np.concatenate([encoder.encode_passages(texts[i:i + 1024]) for i in range(0, len(texts), 1024)])
        print(f"pool: {len(texts):,} passages encoded in {time.perf_counter() - started:.0f} s "
              f"({encoder.describe().get('backend')})", file=sys.stderr)
        np.save(topics, encoder.encode_queries([q.text for q in read_topics(POOL / "queries.tsv")]))
        np.save(passages, vectors.astype(np.float32))
    return np.load(passages), np.load(topics)


def _normalized(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _noise(rng, n: int, dim: int, norm: float) -> np.ndarray:
    return rng.standard_normal((n, dim), dtype=np.float32) * np.float32(norm / np.sqrt(dim))


def generate(args) -> None:
    out = cache_dir(args.docs)
    out.mkdir(parents=True, exist_ok=True)
    P, topics = pool(args)
    dim = P.shape[1]
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    stored = np.lib.format.open_memmap(out / "vectors.npy.partial", mode="w+", dtype=np.float16,
                                       shape=(args.docs, dim))
    for first in range(0, args.docs, BLOCK):
        m = min(BLOCK, args.docs - first)
        a, b = rng.integers(0, len(P), m), rng.integers(0, len(P), m)
        u = rng.uniform(0, 0.5, (m, 1)).astype(np.float32)
        stored[first:first + m] = _normalized(P[a] + u * P[b] + _noise(rng, m, dim, args.noise)).astype(np.float16)
        print(f"\r{first + m:,} vectors", end="", file=sys.stderr, flush=True)
    stored.flush()
    del stored
    os.replace(out / "vectors.npy.partial", out / "vectors.npy")
    print(file=sys.stderr)
    synthetic = args.queries - len(topics)
    c = rng.integers(0, len(P), synthetic)
    queries = np.concatenate([topics, _normalized(P[c] + _noise(rng, synthetic, dim, args.query_noise))])
    np.save(out / "queries.npy", queries.astype(np.float32))
    np.save(out / "exact.npy", exact_neighbours(np.load(out / "vectors.npy", mmap_mode="r"), queries))
    info = {"docs": args.docs, "seed": args.seed, "noise": args.noise, "query_noise": args.query_noise,
            "queries": len(queries), "seconds": round(time.perf_counter() - started, 1)}
    (out / "generated.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))


def exact_neighbours(vectors: np.ndarray, queries: np.ndarray, depth: int = EXACT_DEPTH) -> np.ndarray:
    """Each query's top ``depth`` rows by inner product with the stored (float16) vectors, ties by row: a block of
    rows at a time, the running best kept."""
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    for first in range(0, len(vectors), 1 << 18):
        block = np.asarray(vectors[first:first + (1 << 18)], dtype=np.float32)
        scores = np.concatenate([best_scores, queries @ block.T], axis=1)
        rows = np.concatenate([best_rows, np.broadcast_to(np.arange(first, first + len(block)),
                                                          (len(queries), len(block)))], axis=1)
        keep = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
        best_scores, best_rows = np.take_along_axis(scores, keep, 1), np.take_along_axis(rows, keep, 1)
        print(f"\rexact: {first + len(block):,} rows", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    order = np.lexsort((best_rows, -best_scores), axis=1)
    return np.take_along_axis(best_rows, order, 1)


def _component(docs: int, name: str) -> Path:
    return cache_dir(docs) / name


def build(args) -> None:
    """In a child process (its own peak RSS): weir's dense index of the stored vectors, written beside them."""
    if os.environ.get("_DENSE_SCALE_CHILD") != "1":
        started = time.perf_counter()
        subprocess.run([sys.executable, __file__, *sys.argv[1:]], check=True,
                       env={**os.environ, "_DENSE_SCALE_CHILD": "1"})
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2 ** 20
        print(f"build: {time.perf_counter() - started:.0f} s, peak RSS {peak:.2f} GiB")
        return
    import faiss

    from weir.indexer.dense import (DOCIDS_FILE, INDEX_FILE, DenseConfig, index_from_vectors, index_parameters,
                                    resolved_kind)

    faiss.omp_set_num_threads(os.cpu_count() or 1)
    source = cache_dir(args.docs)
    vectors = np.load(source / "vectors.npy", mmap_mode="r")
    n, dim = vectors.shape
    config = DenseConfig(index=args.index, nprobe=args.nprobe[0], rerank=args.rerank[0])
    kind, params = resolved_kind(config, n), index_parameters(config, n, dim)
    out = _component(args.docs, f"index-{args.index}")
    out.mkdir(exist_ok=True)
    started = time.perf_counter()
    index = index_from_vectors(vectors, kind, params)
    faiss.write_index(index, str(out / INDEX_FILE))
    seconds = time.perf_counter() - started
    if not (out / DOCIDS_FILE).is_file():
        with open(out / DOCIDS_FILE, "w") as f:
            f.writelines(f"{i}\n" for i in range(n))
    link = out / "vectors.npy"
    if not link.exists():
        link.symlink_to(source / "vectors.npy")
    entry = {"index": kind, "parameters": params, "documents": n, "seconds": round(seconds, 1)}
    (out / "entry.json").write_text(json.dumps(entry, indent=2) + "\n")
    print(json.dumps(entry))


def _memory_mib() -> dict:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) // 1024
    return fields


def query(args) -> None:
    import faiss

    from weir.indexer.dense import DenseIndex

    faiss.omp_set_num_threads(1)
    source = cache_dir(args.docs)
    queries = np.load(source / "queries.npy")[:args.queries]
    truth = np.load(source / "exact.npy")[:args.queries, :10]
    path = _component(args.docs, f"index-{args.index}")
    entry = json.loads((path / "entry.json").read_text())
    before = _memory_mib()
    started = time.perf_counter()
    opened = DenseIndex(path, entry)
    print(f"opened in {time.perf_counter() - started:.1f} s: {entry['index']} {entry['parameters']}; anonymous memory "
          f"{before['RssAnon']} -> {_memory_mib()['RssAnon']} MiB", file=sys.stderr)
    settings = [(p, r) for p in args.nprobe for r in args.rerank]
    for q in queries[:50]:  # the memory of a served index: what its searches touch
        opened.search(q[None], args.k, opened.search_parameters(nprobe=args.nprobe[0]))
    memory = _memory_mib()
    flat = None
    if args.flat:  # what a user would otherwise run: exact search over the same vectors held in memory
        from weir.indexer.dense import index_from_vectors

        flat = index_from_vectors(opened.vectors, "flat", {})
        settings.append(("flat", "-"))
    times = {s: [] for s in settings}
    found = {s: [] for s in settings}
    for i, q in enumerate(queries):
        if flat is not None:
            t = time.perf_counter()
            _, rows = flat.search(q[None], args.k)
            times[("flat", "-")].append(time.perf_counter() - t)
            found[("flat", "-")].append(len(set(rows[0, :10].tolist()) & set(truth[i].tolist())) / 10)
        for nprobe, rerank in settings:
            if nprobe == "flat":
                continue
            opened.entry = {**entry, "parameters": {**entry["parameters"], "rerank": rerank}}
            params = opened.search_parameters(nprobe=nprobe)
            t = time.perf_counter()
            _, rows = opened.search(q[None], args.k, params)
            times[(nprobe, rerank)].append(time.perf_counter() - t)
            found[(nprobe, rerank)].append(len(set(rows[0, :10].tolist()) & set(truth[i].tolist())) / 10)
    print(f"{args.docs:,} vectors, {len(queries)} queries, k={args.k}, one thread; anonymous {memory['RssAnon']} MiB, "
          f"file-backed {memory['RssFile']} MiB after 50 searches")
    real = len(np.load(root() / "pool-topic-vectors.npy", mmap_mode="r"))
    print(f"| nprobe | rerank | median ms | p99 ms | recall@10 | of the {real} DL 2019 topics |")
    print("|---:|---:|---:|---:|---:|---:|")
    for s in settings:
        ms = [t * 1000 for t in times[s]]
        print(f"| {s[0]} | {s[1]} | {statistics.median(ms):.2f} | {percentile(ms, 99):.2f} | "
              f"{statistics.mean(found[s]):.4f} | {statistics.mean(found[s][:real]):.4f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("pool", "generate", "build", "query"))
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise", type=float, default=0.6)
    parser.add_argument("--query-noise", type=float, default=1.0)
    parser.add_argument("--index", default="auto", help="the dense index type built and searched (default auto)")
    parser.add_argument("--nprobe", type=lambda s: [int(x) for x in s.split(",")], default=[16])
    parser.add_argument("--rerank", type=lambda s: [int(x) for x in s.split(",")], default=[100])
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--flat", action="store_true", help="query: also exact search over the vectors in memory")
    args = parser.parse_args()
    {"pool": pool, "generate": generate, "build": build, "query": query}[args.command](args)


if __name__ == "__main__":
    main()
