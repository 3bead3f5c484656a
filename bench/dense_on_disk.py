"""The on-disk IVF layout (``--dense-index ivfflat --dense-on-disk``) against the same IVF index in memory and the flat
index it was built from: build time and peak memory, memory of a searching process, query latency and nDCG@10.

Both IVF indexes are built from the flat index's stored vectors (``--dense-vectors-from``, no encoding), each in a
process of its own, so that its peak resident memory is its own. Each search round runs in a fresh process per index,
in alternating order: it opens the index, encodes the topics once, then times one faiss search a query (the encoded
query, top ``--k``) and reports the medians, nDCG@10 of the whole run, and the process's resident memory after the
searches split into anonymous memory (what cannot be paged out) and file pages (the memory-mapped lists and vectors,
which the kernel drops and reads back as it needs).

``--synthetic N`` measures the memory at a scale this machine has no collection for: N random unit vectors (float16,
dim 384, as ``vectors.npy`` stores them) made into an IVF-Flat index in memory and on disk, each in a process of its
own (the peaks of the build's anonymous memory and file pages, sampled every 50 ms; the resident memory of a process
that opens the index and runs 200 searches).

Usage: python bench/dense_on_disk.py --index INDEX_WITH_FLAT_DENSE --collection DIR [--nprobe 16] [--rounds 3]
       [--k 100] [--work DIR]
       python bench/dense_on_disk.py --synthetic 2000000 [--nlist 1024] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def search_round(index: str, collection: str, k: int) -> dict:
    """In this process: open ``index``, search every topic one query a call, report latency, memory, nDCG@10."""
    import numpy as np

    from weir.indexer.dense import open_dense
    from weir.indexer.index_dir import Index
    from weir.evaluation.measures import evaluate
    from weir.ranker.retrievers.dense import DenseRetriever
    from weir.core.trec import read_qrels, read_topics

    coll = Path(collection)
    topics, qrels = read_topics(coll / "queries.tsv"), read_qrels(coll / "qrels.txt")
    idx = Index(index)
    started = time.perf_counter()
    dense = open_dense(idx)
    open_seconds = time.perf_counter() - started
    retriever = DenseRetriever(idx)
    vectors = retriever.encode(topics)
    seconds, run = [], {}
    for q, v in zip(topics, vectors):
        t = time.perf_counter()
        scores, rows = dense.search(v[None, :], k, retriever.params)
        seconds.append(time.perf_counter() - t)
        run[q.id] = {dense.docids[r]: float(s) for s, r in zip(scores[0], rows[0]) if r >= 0}
    return {"open_ms": open_seconds * 1e3, "search_ms_p50": statistics.median(seconds) * 1e3,
            "search_ms_mean": float(np.mean(seconds)) * 1e3, "ndcg10": evaluate(run, qrels, ["nDCG@10"])["nDCG@10"],
            "rss_anon_mib": _status_kib("RssAnon") / 1024, "rss_file_mib": _status_kib("RssFile") / 1024}


def _child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def build(source: str, collection: str, out: Path, on_disk: bool, nprobe: int) -> dict:
    """In a child process: the IVF-Flat index from ``source``'s vectors, with its wall time and peak memory."""
    command = [sys.executable, "-m", "weir.cli", "index", "build", "--collection", collection, "--out", str(out),
               "--with", "dense", "--dense-index", "ivfflat", "--nprobe", str(nprobe), "--dense-vectors-from",
               source, "--overwrite", *(["--dense-on-disk"] if on_disk else [])]
    wrapped = ["/usr/bin/time", "-f", "%M %e", *command]
    done = subprocess.run(wrapped, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    peak_kib, wall = done.stderr.strip().splitlines()[-1].split()
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["components"]["dense"]
    return {"wall_s": float(wall), "peak_rss_mib": int(peak_kib) / 1024,  # ru_maxrss: anonymous + file pages "component_s": entry["build_seconds"],
            "parameters": entry["parameters"]}


def synthetic_build(vectors: str, out: str, on_disk: bool, nlist: int) -> dict:
    """In this process: an IVF-Flat index over the stored ``vectors`` (memory-mapped), in memory or on disk."""
    import faiss
    import numpy as np

    from weir.indexer.dense import INDEX_FILE, write_on_disk_index

    import threading

    stored = np.load(vectors, mmap_mode="r")
    params = {"metric": "inner_product", "nlist": nlist, "nprobe": 16}
    Path(out).mkdir(parents=True, exist_ok=True)
    peaks = {"RssAnon": 0, "RssFile": 0}
    done = threading.Event()

    def sample():  # the peaks of anonymous memory and of file pages, apart (ru_maxrss adds them up)
        while not done.wait(0.05):
            for field in peaks:
                peaks[field] = max(peaks[field], _status_kib(field))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    if on_disk:
        write_on_disk_index(stored, "ivfflat", params, Path(out))
    else:
        from weir.indexer.dense import index_from_vectors

        faiss.write_index(index_from_vectors(stored, "ivfflat", params), str(Path(out) / INDEX_FILE))
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    return {"seconds": seconds, "peak_anon_mib": peaks["RssAnon"] / 1024, "peak_file_mib": peaks["RssFile"] / 1024}


def synthetic_search(out: str, on_disk: bool, dim: int) -> dict:
    import faiss
    import numpy as np

    started = time.perf_counter()
    index = faiss.read_index(str(Path(out) / "index.faiss"), faiss.IO_FLAG_ONDISK_SAME_DIR if on_disk else 0)
    opened = time.perf_counter() - started
    index.nprobe = 16
    queries = np.random.default_rng(1).standard_normal((200, dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    seconds = []
    for q in queries:
        t = time.perf_counter()
        index.search(q[None, :], 100)
        seconds.append(time.perf_counter() - t)
    return {"open_s": opened, "search_ms_p50": statistics.median(seconds) * 1e3,
            "rss_anon_mib": _status_kib("RssAnon") / 1024, "rss_file_mib": _status_kib("RssFile") / 1024}


def synthetic(n: int, nlist: int, work: Path, dim: int = 384) -> None:
    import numpy as np

    work.mkdir(parents=True, exist_ok=True)
    vectors = work / "vectors.npy"
    if not vectors.is_file():
        stored = np.lib.format.open_memmap(vectors, mode="w+", dtype=np.float16, shape=(n, dim))
        rng = np.random.default_rng(0)
        for start in range(0, n, 1 << 16):
            block = rng.standard_normal((min(n, start + (1 << 16)) - start, dim)).astype(np.float32)
            stored[start:start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
        stored.flush()
        del stored
    print(f"{n:,} vectors of dim {dim} (float16 file {vectors.stat().st_size / 2**20:.0f} MiB); IVF-Flat, nlist "
          f"{nlist}, nprobe 16")
    print("| layout | build s | build peak anonymous MiB | build peak file pages MiB | index files MiB | open s | "
          "search p50 ms | searching RSS anonymous MiB | file pages MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for on_disk in (False, True):
        out = work / ("on-disk" if on_disk else "in-memory")
        built = _child(["--synthetic-build", str(vectors), str(out), str(int(on_disk)), str(nlist)])
        searched = _child(["--synthetic-search", str(out), str(int(on_disk)), str(dim)])
        size = sum(f.stat().st_size for f in out.iterdir())
        print(f"| {'on disk' if on_disk else 'in memory'} | {built['seconds']:.0f} | {built['peak_anon_mib']:.0f} | "
              f"{built['peak_file_mib']:.0f} | "
              f"{size / 2**20:.0f} | {searched['open_s']:.2f} | {searched['search_ms_p50']:.2f} | "
              f"{searched['rss_anon_mib']:.0f} | {searched['rss_file_mib']:.0f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", help="an index with a flat dense component")
    p.add_argument("--collection", help="its collection directory (queries.tsv, qrels.txt)")
    p.add_argument("--nprobe", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--work", default=None, help="where the IVF indexes are built (default: a temporary directory)")
    p.add_argument("--synthetic", type=int, default=None, metavar="N", help="N random vectors instead of an index")
    p.add_argument("--nlist", type=int, default=1024, help="--synthetic: IVF lists (default 1024)")
    p.add_argument("--search-round", nargs=3, metavar=("INDEX", "COLLECTION", "K"), help=argparse.SUPPRESS)
    p.add_argument("--synthetic-build", nargs=4, help=argparse.SUPPRESS)
    p.add_argument("--synthetic-search", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.synthetic_build:
        vectors, out, on_disk, nlist = args.synthetic_build
        print(json.dumps(synthetic_build(vectors, out, on_disk == "1", int(nlist))))
        return
    if args.synthetic_search:
        out, on_disk, dim = args.synthetic_search
        print(json.dumps(synthetic_search(out, on_disk == "1", int(dim))))
        return
    if args.synthetic:
        synthetic(args.synthetic, args.nlist, Path(args.work or tempfile.mkdtemp(prefix="dense-on-disk-")))
        return
    if args.search_round:
        index, collection, k = args.search_round
        print(json.dumps(search_round(index, collection, int(k))))
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="dense-on-disk-"))
    indexes = {"flat": args.index}
    builds = {}
    for name, on_disk in (("ivfflat in memory", False), ("ivfflat on disk", True)):
        out = work / name.replace(" ", "-")
        builds[name] = build(args.index, args.collection, out, on_disk, args.nprobe)
        indexes[name] = str(out)
        print(f"built {name}: {builds[name]['wall_s']:.1f} s, peak RSS (anonymous + file pages) "
              f"{builds[name]['peak_rss_mib']:.0f} MiB "
              f"(nlist {builds[name]['parameters']['nlist']}, nprobe {builds[name]['parameters']['nprobe']})",
              flush=True)
    rounds: dict[str, list[dict]] = {name: [] for name in indexes}
    for r in range(args.rounds):
        order = list(indexes) if r % 2 == 0 else list(reversed(indexes))
        for name in order:
            rounds[name].append(_child(["--search-round", indexes[name], args.collection, str(args.k)]))
    print(f"\n{args.rounds} rounds, alternating; medians; one faiss search a query, top {args.k}")
    print("| index | nDCG@10 | search p50 ms | open ms | RSS anonymous MiB | RSS file pages MiB | index files MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rs in rounds.items():
        def med(key, rs=rs):
            return statistics.median(r[key] for r in rs)
        size = sum(f.stat().st_size for f in (Path(indexes[name]) / "dense").iterdir() if f.name != "vectors.npy")
        print(f"| {name} | {med('ndcg10'):.4f} | {med('search_ms_p50'):.2f} | {med('open_ms'):.0f} | "
              f"{med('rss_anon_mib'):.0f} | {med('rss_file_mib'):.0f} | {size / 2**20:.1f} |")


if __name__ == "__main__":
    main()
