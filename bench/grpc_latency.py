"""gRPC Search latency for sequential calls through the real client: median and p99 milliseconds.

Starts `weir serve` as a separate process on loopback over an index, sends every topic once as a warm-up, then each
topic --reps times one call after another, and reports client-side latency (and the server's own stage timings).
Usage: python bench/grpc_latency.py [--collection beir-scifact] [--k 10] [--pipeline bm25] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import COLLECTIONS, ROOT, percentile

from weir.indexer.build import build_index
from weir.service.client import SearchClient
from weir.core.trec import read_topics


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collection", default="beir-scifact")
    ap.add_argument("--index", help="an existing weir index (default: build one in a temporary directory)")
    ap.add_argument("--pipeline", default="bm25")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    coll = COLLECTIONS / args.collection
    topics = read_topics(coll / "queries.tsv")
    with tempfile.TemporaryDirectory() as tmp:
        index_dir = Path(args.index) if args.index else Path(tmp) / "index"
        if not args.index:
            build_index(coll, index_dir)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "weir.cli", "serve", "--index", str(index_dir), "--port", str(port)],
                                  cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
        try:
            with SearchClient(f"127.0.0.1:{port}") as client:
                client.wait_ready(timeout=180)
                while client.health() != "SERVING":
                    time.sleep(0.1)
                for q in topics:
                    client.search(q.text, k=args.k, pipeline=args.pipeline)
                latencies, server_ms = [], []
                for _ in range(args.reps):
                    for q in topics:
                        start = time.perf_counter()
                        response = client.search(q.text, k=args.k, pipeline=args.pipeline)
                        latencies.append((time.perf_counter() - start) * 1000)
                        server_ms.append(sum(t.milliseconds for t in response.timings))
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"{args.collection}: {len(latencies)} sequential Search calls (pipeline {args.pipeline}, k={args.k})")
    print(f"  client latency ms: median {statistics.median(latencies):.2f}, p99 {percentile(latencies, 99):.2f}, "
          f"max {max(latencies):.2f}")
    print(f"  server pipeline ms: median {statistics.median(server_ms):.2f}, p99 {percentile(server_ms, 99):.2f}")


if __name__ == "__main__":
    main()
