"""The sharded front on Ray Serve against one `weir serve` over the whole index: queries/s and latency (median, p95)
of the same queries, the two servers driven in alternating rounds (the order flips every round).

Builds the whole index and its N shards of --collection (BM25; in a temporary directory) unless given, starts
`weir serve --index WHOLE` and `weir serve --shards ...` (a local Ray instance with --ray-num-cpus CPUs) as separate
processes, then for each pipeline and concurrency drives each server for --seconds per round with bench/load.py's
client processes (calls with a deadline, the topics round-robin). Prints a table per round and the medians over the
rounds with the sharded/single ratio. Prints figures only; nothing is asserted.

Ray binds the machine's address unless it runs in a loopback-only network namespace: as root, the benchmark
re-executes itself in one (``unshare -n``, then ``ip link set lo up``) so no traffic leaves loopback.

    python bench/sharded.py --collection beir-scifact --shards 2 --concurrency 1,8 --seconds 10 --rounds 3
    python bench/sharded.py --pipelines "bm25,bm25>>attention" --depth 20 --seconds 10 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import COLLECTIONS, ROOT, stop
from _load import drive

WEIR = str(Path(sys.executable).parent / "weir")
NAMESPACE_FLAG = "WEIR_BENCH_IN_NETNS"


class Process:
    """A `weir serve` process; its port is read from the line it prints when serving."""

    def __init__(self, args: list[str], what: str, timeout: float = 300):
        self.what = what
        env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
        self.process = subprocess.Popen([WEIR, "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=env)
        found: list[int] = []

        def read() -> None:
            for line in self.process.stdout:
                match = re.search(r"^weir: serving .* on 127\.0\.0\.1:(\d+)$", line.strip())
                if match and not found:
                    found.append(int(match.group(1)))

        threading.Thread(target=read, daemon=True).start()
        start = time.monotonic()
        while not found:
            if self.process.poll() is not None or time.monotonic() - start > timeout:
                self.close()
                raise SystemExit(f"{what} did not start (exit {self.process.returncode})")
            time.sleep(0.2)
        self.port = found[0]
        self.start_seconds = time.monotonic() - start

    def close(self) -> None:
        stop(self.process, 60)


def _build(collection: Path, root: Path, shards: int) -> tuple[str, list[str]]:
    from weir.indexer.build import build_index
    from weir.indexer.shards import ShardSpec

    whole = root / "whole"
    build_index(collection, whole)
    parts = []
    for i in range(shards):
        build_index(collection, root / f"shard-{i}", shard=ShardSpec(i, shards))
        parts.append(str(root / f"shard-{i}"))
    return str(whole), parts


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collection", default="beir-scifact")
    ap.add_argument("--index", help="the whole index (default: built with the shards in a temporary directory)")
    ap.add_argument("--shard-dirs", help="its shard indexes, comma-separated (with --index)")
    ap.add_argument("--shards", type=int, default=2, help="shards to build (default 2)")
    ap.add_argument("--pipelines", default="bm25")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--depth", type=int, default=0, help="candidates reranked (default: the pipeline's)")
    ap.add_argument("--timeout", type=float, default=30.0, help="deadline of each call, seconds")
    ap.add_argument("--ray-num-cpus", type=int, default=2)
    ap.add_argument("--shard-replicas", type=int, default=1)
    ap.add_argument("--reranker-replicas", type=int, default=1)
    ap.add_argument("--no-namespace", action="store_true", help="do not re-execute in a loopback-only namespace")
    return ap.parse_args()


def in_namespace(args: argparse.Namespace) -> int | None:
    """As root (with ``unshare``), run this benchmark again in a loopback-only network namespace and return its exit
    status; None when it runs here."""
    if (not args.no_namespace and os.environ.get(NAMESPACE_FLAG) != "1" and os.geteuid() == 0
            and shutil.which("unshare")):
        command = " ".join(f"'{a}'" for a in [sys.executable, *sys.argv])
        env = {**os.environ, NAMESPACE_FLAG: "1"}
        return subprocess.call(["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {command}"], env=env)
    return None


def indexes(args: argparse.Namespace, collection: Path, tmp: str) -> tuple[str, list[str]]:
    """The whole index and its shards: those given, else built in ``tmp``."""
    if args.index:
        if not args.shard_dirs:
            raise SystemExit("--index needs --shard-dirs")
        return args.index, [p.strip() for p in args.shard_dirs.split(",")]
    t = time.perf_counter()
    whole, parts = _build(collection, Path(tmp), args.shards)
    print(f"built the whole index and {args.shards} shards of {args.collection} in "
          f"{time.perf_counter() - t:.0f}s", flush=True)
    return whole, parts


def start_servers(args: argparse.Namespace, whole: str, parts: list[str], pipelines: list[str]) -> tuple:
    """`weir serve --index WHOLE` and `weir serve --shards ...`, serving ``pipelines``."""
    served = ["--pipelines", ",".join(pipelines), "--default-pipeline", pipelines[0]]
    if args.depth:
        served += ["--depth", str(args.depth)]
    single = Process(["--index", whole, *served], "weir serve --index")
    sharded = Process(["--shards", ",".join(parts), "--ray-num-cpus", str(args.ray_num_cpus),
                       "--shard-replicas", str(args.shard_replicas),
                       "--reranker-replicas", str(args.reranker_replicas), *served], "weir serve --shards")
    return single, sharded


def drive_rounds(args: argparse.Namespace, servers: dict[str, Process], topics: list[str], pipelines: list[str],
                 levels: list[int]) -> dict[tuple, list[dict]]:
    """Warm both servers up, then drive them in alternating rounds, printing a row per phase; per (pipeline,
    callers, server), what each round measured."""
    results: dict[tuple, list[dict]] = {}
    for pipeline in pipelines:  # warm-up: every topic once through each
        for server in servers.values():
            drive(server.port, topics, pipeline, 2, 3, k=args.k, depth=args.depth, timeout=args.timeout)
    print("| round | pipeline | callers | server | calls | queries/s | p50 ms | p95 ms | codes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in range(args.rounds):
        for pipeline in pipelines:
            for c in levels:
                order = list(servers.items())
                for name, server in order if r % 2 == 0 else order[::-1]:
                    res = drive(server.port, topics, pipeline, c, args.seconds, k=args.k, depth=args.depth,
                                timeout=args.timeout)
                    results.setdefault((pipeline, c, name), []).append(res)
                    codes = ", ".join(f"{k} {v}" for k, v in sorted(res["codes"].items()))
                    print(f"| {r + 1} | {pipeline} | {c} | {name} | {res['calls']} | {res['qps']:.1f} | "
                          f"{res['p50']:.1f} | {res['p95']:.1f} | {codes} |", flush=True)
    return results


def print_medians(results: dict[tuple, list[dict]], pipelines: list[str], levels: list[int]) -> None:
    print("\nmedians over the rounds (sharded / single in brackets)")
    print("| pipeline | callers | single q/s | sharded q/s | single p50 / p95 ms | sharded p50 / p95 ms |")
    print("|---|---|---|---|---|---|")
    for pipeline in pipelines:
        for c in levels:
            med = {n: {m: statistics.median(x[m] for x in results[(pipeline, c, n)]) for m in ("qps", "p50", "p95")}
                   for n in ("single", "sharded")}
            s, h = med["single"], med["sharded"]
            print(f"| {pipeline} | {c} | {s['qps']:.1f} | {h['qps']:.1f} ({h['qps'] / s['qps']:.2f}x) | "
                  f"{s['p50']:.1f} / {s['p95']:.1f} | {h['p50']:.1f} / {h['p95']:.1f} "
                  f"({h['p50'] / s['p50']:.2f}x / {h['p95'] / s['p95']:.2f}x) |")


def main() -> int:
    args = parse_args()
    code = in_namespace(args)
    if code is not None:
        return code
    where = "a loopback-only network namespace" if os.environ.get(NAMESPACE_FLAG) == "1" else "this network namespace"

    from weir.indexer.collections import Collection

    collection = COLLECTIONS / args.collection
    topics = [q.text for q in Collection.open(collection).topics("test")]
    pipelines = [p.strip() for p in args.pipelines.split(",") if p.strip()]
    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        whole, parts = indexes(args, collection, tmp)
        single, sharded = start_servers(args, whole, parts, pipelines)
        print(f"in {where}; {len(topics)} topics; single server up in {single.start_seconds:.0f}s, sharded front "
              f"({len(parts)} shards x {args.shard_replicas} replica(s), Ray {args.ray_num_cpus} CPUs) in "
              f"{sharded.start_seconds:.0f}s; {args.seconds:.0f}s per phase, {args.rounds} rounds", flush=True)
        try:
            results = drive_rounds(args, {"single": single, "sharded": sharded}, topics, pipelines, levels)
        finally:
            sharded.close()
            single.close()
    print_medians(results, pipelines, levels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
