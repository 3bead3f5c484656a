"""gRPC latency of Search (and BatchSearch) through real `weir serve` processes on loopback: p50 and p99 ms, with
the server's own share, for this checkout alone or side by side with another version.

Starts `weir serve` over an index (built in a temporary directory unless --index names one), this checkout's code
(``python -m weir`` with this checkout first on PYTHONPATH); with --before CMD also CMD's (another version's console
script, e.g. /work/base/.venv/bin/weir, run without PYTHONPATH). Each server is warmed up with every topic once; then
--callers concurrent callers send Search for every topic --reps times, and with --batch N BatchSearch calls of N
topics each (--batch-calls of them). With --before the two servers are measured in alternating rounds (--rounds;
the order flips every round) and the before/after ratio of p50 is printed per round and as the median.

The callers keep each response as bytes (the method's response deserializer is none), so a latency is the server's
and the transport's time, never the client's decoding: what decoding a response costs a client is measured apart,
on a sample of the responses. The server's own time per call: its mean handling time from its Prometheus metrics
(grpc_server_handling_seconds: the servicer's time, before serialization and transport) and its CPU time (/proc).
--check PIPELINES first compares the two versions' answers (timings aside) for a sample of topics; --profile DIR
records one more round of each server with py-spy (not counted in the figures) and prints where the time went.

    python bench/grpc_latency.py [--collection beir-scifact] [--k 10] [--pipeline bm25] [--reps 3]   # sequential
    python bench/grpc_latency.py --index IDX --pipeline 'hybrid>>ltr' --explain --rounds 4   # explain's cost
    python bench/grpc_latency.py --index /tmp/behaviour/indexes/scifact --before /work/base/.venv/bin/weir \\
        --k 1000 --callers 8 --reps 1 --batch 100 --batch-calls 16 --rounds 3 --check bm25,hybrid,bm25>>ltr \\
        --profile /tmp/profiles
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _common import COLLECTIONS, ROOT, percentile, stop

from weir.core.trec import read_topics
from weir.indexer.build import build_index
from weir.service.stubs import search_pb2

SERVICE = "/weir.v1.SearchService/"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A `weir serve` process on loopback (port read from the line it prints), with a Prometheus metrics port."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], index: Path, pipelines: str,
                 extra: tuple[str, ...] = ()):
        self.name, self.metrics_port = name, free_port()
        args = ["serve", "--index", str(index), "--port", "0", "--metrics-port", str(self.metrics_port), "--no-verify"]
        if pipelines:
            args += ["--pipelines", pipelines]
        args += list(extra)
        self.command = [*command, *args]
        self.process = subprocess.Popen(self.command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline()
        match = re.search(r"127\.0\.0\.1:(\d+)$", line.strip())
        if not match:
            self.close()
            raise SystemExit(f"{name}: weir serve did not start: {line!r}")
        self.port = int(match.group(1))

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def handling(self, method: str) -> tuple[float, float]:
        """(sum of seconds, count) of the server's grpc_server_handling_seconds for ``method``."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        out = []
        for what in ("sum", "count"):
            match = re.search(rf'^grpc_server_handling_seconds_{what}\{{[^}}]*grpc_method="{method}"[^}}]*\}} (\S+)$',
                              text, re.M)
            out.append(float(match.group(1)) if match else 0.0)
        return out[0], out[1]

    def close(self) -> None:
        stop(self.process, 30)


def servers(args, index: Path) -> list[Served]:
    """The servers measured: --before's (when given), then this checkout's."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    mine = dict(env, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    out = []
    if args.before:
        out.append(Served("before", shlex.split(args.before), env, index, args.pipelines, shlex.split(args.serve_args)))
    out.append(Served("after" if args.before else "this checkout", [sys.executable, "-m", "weir"], mine, index,
                      args.pipelines, shlex.split(args.serve_args)))
    return out


def calls(port: int, method: str, requests: list[bytes], callers: int, keep_every: int = 10) -> dict:
    """Send ``requests`` (serialized) from ``callers`` threads, each with its own channel, each taking the next
    request not yet sent: latencies (ms), the client's CPU seconds, and every ``keep_every``-th response's bytes."""
    import grpc

    latencies: list[float] = []
    kept: list[bytes] = []
    lock, position = threading.Lock(), iter(range(len(requests)))
    ready = threading.Barrier(callers + 1)

    def caller() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(SERVICE + method)  # bytes in, bytes out: no client-side decoding
            grpc.channel_ready_future(channel).result(timeout=60)
            ready.wait()
            while True:
                with lock:
                    i = next(position, None)
                if i is None:
                    return
                start = time.perf_counter()
                response = call(requests[i], timeout=600)
                elapsed = (time.perf_counter() - start) * 1000
                with lock:
                    latencies.append(elapsed)
                    if i % keep_every == 0:
                        kept.append(response)

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for t in threads:
        t.start()
    ready.wait()
    cpu = time.process_time()
    for t in threads:
        t.join()
    return {"latencies": latencies, "client_cpu": time.process_time() - cpu, "kept": kept}


def phase(server: Served, label: str, requests: list[bytes], callers: int) -> dict:
    """One measured phase on ``server``: client latencies, and the server's handling time and CPU time per call
    (``label``: the method, with ``+explain`` for requests that ask to explain)."""
    method = label.split("+")[0]
    handled, cpu = server.handling(method), server.cpu_seconds()
    result = calls(server.port, method, requests, callers)
    after = server.handling(method)
    n = len(result["latencies"])
    response = search_pb2.SearchResponse if method == "Search" else search_pb2.BatchSearchResponse
    decode, pipeline = [], []
    for data in result["kept"]:
        start = time.perf_counter()
        message = response.FromString(data)
        decode.append((time.perf_counter() - start) * 1000)
        results = [message] if method == "Search" else list(message.results)
        pipeline.append(max(sum(t.milliseconds for t in r.timings) for r in results))
    return {"n": n, "p50": statistics.median(result["latencies"]), "p99": percentile(result["latencies"], 99),
            "handling": (after[0] - handled[0]) / max(1, after[1] - handled[1]) * 1000,
            "server_cpu": (server.cpu_seconds() - cpu) / n * 1000, "client_cpu": result["client_cpu"] / n * 1000,
            "decode": statistics.median(decode), "pipeline": statistics.median(pipeline),
            "bytes": statistics.median(len(d) for d in result["kept"])}


def requests_of(args, topics: list[str]) -> dict[str, list[bytes]]:
    """The serialized requests of each measured method."""
    out = {"Search": [search_pb2.SearchRequest(query=t, k=args.k, pipeline=args.pipeline).SerializeToString()
                      for _ in range(args.reps) for t in topics]}
    if args.explain:
        out["Search+explain"] = [search_pb2.SearchRequest(query=t, k=args.k, pipeline=args.pipeline, explain=True)
                                 .SerializeToString() for _ in range(args.reps) for t in topics]
    if args.batch:
        out["BatchSearch"] = [search_pb2.BatchSearchRequest(
            queries=[topics[(i * args.batch + j) % len(topics)] for j in range(args.batch)], k=args.k,
            pipeline=args.pipeline).SerializeToString() for i in range(args.batch_calls)]
    return out


class Profile:
    """py-spy recording a server's stack of the thread holding the GIL while a phase runs (the server's Python work;
    native work without the GIL, such as gRPC's core threads, is not seen): ``with Profile(...):``."""

    def __init__(self, directory: str | None, server: Served, method: str):
        self.path = Path(directory) / f"{server.name.replace(' ', '-')}-{method}.txt" if directory else None
        self.pid = server.process.pid

    def __enter__(self) -> Profile:
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # py-spy writes nothing into a missing directory
            spy = str(Path(sys.executable).parent / "py-spy")
            self.process = subprocess.Popen([spy, "record", "--pid", str(self.pid), "--rate", "200", "--gil",
                                             "--format", "raw", "--output", str(self.path)], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
            time.sleep(1)
        return self

    def __exit__(self, *exc) -> None:
        if self.path:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(60)
            print(summary(self.path), flush=True)


def summary(path: Path, top: int = 12) -> str:
    """Where the recorded time went, as shares of the samples: weir's functions by inclusive time, and every
    function by self time."""
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        n = int(count)
        total += n
        for f in set(frames):
            if "(weir/" in f:
                inclusive[f] = inclusive.get(f, 0) + n
        own[frames[-1]] = own.get(frames[-1], 0) + n
    lines = [f"profile {path.name}: {total} samples at 200 Hz of the thread holding the GIL"]
    for name, table in (("weir, inclusive", inclusive), ("self", own)):
        best = sorted(table.items(), key=lambda kv: -kv[1])[:top]
        lines += [f"  {name}: " + "; ".join(f"{v / max(total, 1):.0%} {k}" for k, v in best)]
    return "\n".join(lines)


def row(server: Served, method: str, r: dict) -> str:
    return (f"| {server.name} | {method} | {r['n']} | {r['p50']:.2f} | {r['p99']:.2f} | {r['handling']:.2f} | "
            f"{r['server_cpu']:.2f} | {r['pipeline']:.2f} | {r['client_cpu']:.2f} | {r['decode']:.2f} | "
            f"{r['bytes'] / 1024:.0f} |")


def measure(args, served: list[Served], requests: dict[str, list[bytes]]) -> None:
    """Warm every server up, then the alternating rounds; print a table row per phase and the summary."""
    for s in served:
        for label, reqs in requests.items():
            calls(s.port, label.split("+")[0], reqs[:len(reqs) if label.startswith("Search") else 2], args.callers)
    print("| server | method | calls | p50 ms | p99 ms | server handling ms (mean) | server CPU ms/call | "
          "pipeline ms (median) | client CPU ms/call | client decode ms/response | KiB/response |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    results: dict[tuple[str, str], list[dict]] = {}
    for round_ in range(args.rounds):
        for s in served if round_ % 2 == 0 else served[::-1]:
            for method, reqs in list(requests.items())[::1 if round_ % 2 == 0 else -1]:
                r = phase(s, method, reqs, args.callers)
                results.setdefault((s.name, method), []).append(r)
                print(row(s, method, r), flush=True)
    print()
    if args.profile:  # one more round, recorded, not counted
        for s in served:
            for method, reqs in requests.items():
                with Profile(args.profile, s, method):
                    phase(s, method, reqs, args.callers)
        print()
    for method in requests:
        for s in served:
            rs = results[(s.name, method)]
            print(f"{method} {s.name}: p50 {statistics.median(r['p50'] for r in rs):.2f} ms, p99 "
                  f"{statistics.median(r['p99'] for r in rs):.2f} ms, server handling "
                  f"{statistics.median(r['handling'] for r in rs):.2f} ms (medians of {len(rs)} rounds)")
        if method == "Search+explain":
            for s in served:
                ratios = [e["p50"] / p["p50"] for e, p in zip(results[(s.name, method)], results[(s.name, "Search")])]
                print(f"{s.name}: explain/plain p50 = {statistics.median(ratios):.3f}x (median of {len(ratios)} "
                      f"alternating rounds; {', '.join(f'{x:.3f}' for x in ratios)})")
        if len(served) == 2:
            ratios = [b["p50"] / a["p50"] for b, a in zip(results[("before", method)], results[("after", method)])]
            print(f"{method}: before/after p50 = {statistics.median(ratios):.2f}x (median of {len(ratios)} "
                  f"alternating rounds; {', '.join(f'{x:.2f}' for x in ratios)})")


def check(args, served: list[Served], topics: list[str]) -> None:
    """Compare the two servers' answers, timings aside: Search per topic, and BatchSearch of the same topics."""
    import grpc

    def answer(s: Served, request) -> bytes:
        method = "Search" if isinstance(request, search_pb2.SearchRequest) else "BatchSearch"
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            response = channel.unary_unary(SERVICE + method)(request.SerializeToString(), timeout=600)
        message = (search_pb2.SearchResponse if method == "Search" else search_pb2.BatchSearchResponse).FromString(
            response)
        for r in [message] if method == "Search" else message.results:
            for t in r.timings:
                t.milliseconds = 0
        return message.SerializeToString(deterministic=True)  # map entries in key order

    def same(request) -> bool:
        return answer(served[0], request) == answer(served[1], request)

    sample = topics[:args.check_topics]
    for spec in filter(None, args.check.split(",")):
        for k, text in ((args.k, False), (10, True)):
            n = sum(same(search_pb2.SearchRequest(query=t, k=k, pipeline=spec, include_text=text)) for t in sample)
            batch = same(search_pb2.BatchSearchRequest(queries=sample, k=k, pipeline=spec, include_text=text))
            print(f"check {spec} k={k} include_text={text}: {n}/{len(sample)} Search answers identical; "
                  f"BatchSearch of them {'identical' if batch else 'DIFFERENT'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collection", default="beir-scifact")
    ap.add_argument("--index", help="an existing weir index (default: build one in a temporary directory)")
    ap.add_argument("--pipeline", default="bm25")
    ap.add_argument("--pipelines", default="", help="the pipelines the servers serve (default: theirs)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3, help="Search calls per topic in a phase (default 3)")
    ap.add_argument("--callers", type=int, default=1, help="concurrent callers (default 1: sequential calls)")
    ap.add_argument("--serve-args", default="", help="more `weir serve` arguments for every server, e.g. '--depth 20'")
    ap.add_argument("--batch", type=int, default=0, help="also BatchSearch calls of this many topics")
    ap.add_argument("--explain", action="store_true", help="also Search calls that ask to explain (Hit.reasons), "
                    "alternating with the plain ones; prints explain/plain p50")
    ap.add_argument("--batch-calls", type=int, default=16, help="BatchSearch calls in a phase (default 16)")
    ap.add_argument("--before", help="another version's `weir` command: measure both, in alternating rounds")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of every phase on every server (default 1)")
    ap.add_argument("--check", default="", help="with --before: pipelines whose answers are compared first")
    ap.add_argument("--check-topics", type=int, default=30)
    ap.add_argument("--profile", help="a directory: after the measured rounds, one more round of each server recorded "
                    "with py-spy there (raw collapsed stacks), and where its time went printed")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # servers closed when stopped (e.g. by `timeout`)
    coll = COLLECTIONS / args.collection
    topics = [q.text for q in read_topics(coll / "queries.tsv")]
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(args.index) if args.index else Path(tmp) / "index"
        if not args.index:
            build_index(coll, index)
        served = servers(args, index)
        try:
            for s in served:
                print(f"{s.name}: pid {s.process.pid}: {shlex.join(s.command)}", flush=True)
            if args.check and len(served) == 2:
                check(args, served, topics)
            print(f"\n{args.collection}: {len(topics)} topics, pipeline {args.pipeline}, k={args.k}, "
                  f"{args.callers} callers, {os.cpu_count()} cores shared by the servers and the callers\n")
            if args.rounds:
                measure(args, served, requests_of(args, topics))
        finally:
            for s in served:
                s.close()


if __name__ == "__main__":
    main()
