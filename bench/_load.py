"""The servers and callers of bench/load.py: a `weir serve` process on loopback (:class:`Served`), closed-loop
callers (:func:`drive`: each caller's next call after its last answer, honouring a retry pushback) and an open loop
(:func:`offered`: calls at a fixed rate, whatever the answers), each from client processes, and the figures of their
calls."""

from __future__ import annotations

import multiprocessing as mp
import re
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from _common import ROOT, percentile, stop

WEIR = str(Path(sys.executable).parent / "weir")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


REFUSALS = ("overload", "deadline", "budget", "shed")  # RESOURCE_EXHAUSTED, by the server's reason
ADMITTED = ("ok", "shed", "expired", "failed")  # what can become of a call admission let in


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A `weir serve` process on loopback; its port is read from its first line of output. Its Prometheus metrics
    are served too (:meth:`decisions`: the server's own time from a call's arrival to its answer or refusal)."""

    def __init__(self, index: str, extra: str = "", weir: str = WEIR):
        self.metrics_port = _free_port()
        cmd = [*shlex.split(weir), "serve", "--index", index, "--port", "0", "--metrics-port",
               str(self.metrics_port), *shlex.split(extra)]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        line = self.process.stdout.readline()
        match = re.search(r"127\.0\.0\.1:(\d+)$", line.strip())
        if not match:
            self.process.kill()
            raise SystemExit(f"weir serve did not start: {line!r}")
        self.port, self.extra = int(match.group(1)), extra or ("defaults" if weir == WEIR else weir[-40:])
        self.rss: list[tuple[float, float]] = []
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self, every: float = 1.0) -> None:
        start = time.monotonic()
        while not self._stop.wait(every):
            try:
                self.rss.append((time.monotonic() - start, rss_mib(self.process.pid)))
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        stop(self.process, 30)

    def decisions(self, pipeline: str | None = None) -> dict[str, dict]:
        """The server's ``weir_call_seconds`` histogram of Search calls (of ``pipeline``, else summed), by outcome:
        {outcome: {"count": n, "buckets": [(upper bound s, cumulative n), ...]}} (empty: a server without it)."""
        from urllib.request import urlopen

        from prometheus_client.parser import text_string_to_metric_families

        text = urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        out: dict[str, dict] = {}
        for family in text_string_to_metric_families(text):
            if family.name != "weir_call_seconds":
                continue
            for sample in family.samples:
                if sample.labels.get("method") != "Search" or pipeline and sample.labels["pipeline"] != pipeline:
                    continue
                entry = out.setdefault(sample.labels["outcome"], {"count": 0.0, "buckets": {}})
                if sample.name.endswith("_count"):
                    entry["count"] += sample.value
                elif sample.name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    entry["buckets"][le] = entry["buckets"].get(le, 0.0) + sample.value
        return {o: {"count": e["count"], "buckets": sorted(e["buckets"].items())} for o, e in out.items()}


def server_side(before: dict, after: dict) -> dict:
    """What the server measured between two :meth:`Served.decisions`: p99 (ms, interpolated within its bucket as
    Prometheus's histogram_quantile does) of its refusals from arrival (all, and those refused at admission, before
    any queueing: all but the sheds), the share of them within 10 ms, calls admitted then expired over all admitted,
    and the count of each outcome."""
    def delta(outcomes) -> tuple[float, list[tuple[float, float]]]:
        count, buckets = 0.0, {}
        for o in outcomes:
            a, b = after.get(o), before.get(o, {"count": 0.0, "buckets": []})
            if a is None:
                continue
            count += a["count"] - b["count"]
            old = dict(b["buckets"])
            for le, n in a["buckets"]:
                buckets[le] = buckets.get(le, 0.0) + n - old.get(le, 0.0)
        return count, sorted(buckets.items())

    refused, buckets = delta(REFUSALS)
    admitted, _ = delta(ADMITTED)
    expired, _ = delta(("expired",))
    within = next((n for le, n in buckets if le == 0.01), float("nan"))
    at_admission, at_buckets = delta(tuple(r for r in REFUSALS if r != "shed"))
    answered, ok_buckets = delta(("ok",))
    outcomes = {o: delta((o,))[0] for o in sorted(set(after) | set(before))}
    return {"refused": refused, "refused_p99_server": _quantile(0.99, refused, buckets) * 1000,
            "refused_within_10ms": within / refused if refused else float("nan"),
            "admission_p99_server": _quantile(0.99, at_admission, at_buckets) * 1000,
            "ok_p99_server": _quantile(0.99, answered, ok_buckets) * 1000,
            "admitted": admitted, "expired": expired,
            "outcomes": {o: int(n) for o, n in outcomes.items() if n}}


def _quantile(q: float, count: float, buckets: list[tuple[float, float]]) -> float:
    if not count:
        return float("nan")
    rank, lower, below = q * count, 0.0, 0.0
    for le, n in buckets:
        if n >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * ((rank - below) / (n - below) if n > below else 1.0)
        lower, below = le, n
    return lower


def _client(port, topics, pipeline, k, depth, threads, offset, stride, start_at, until, timeout, out,
            include_text=False):
    """One client process: ``threads`` callers from the monotonic time ``start_at`` (shared by all processes) to
    ``until``; (latency s, code) per call. A caller told RESOURCE_EXHAUSTED with a retry pushback waits that long
    (gRPC's server pushback) before its next call, as a gRPC client's retry policy does."""
    import grpc

    sys.path.insert(0, str(ROOT))
    from weir.service.client import SearchClient

    records, lock = [], threading.Lock()

    def caller(t: int) -> None:
        mine = []
        with SearchClient(f"127.0.0.1:{port}", timeout=timeout) as c:
            c.wait_ready(30)
            time.sleep(max(0.0, start_at - time.monotonic()))
            i = offset + t * stride
            while time.monotonic() < until:
                q = topics[i % len(topics)]
                i += stride * threads
                start = time.perf_counter()
                pushback = 0.0
                try:
                    c.search(q, k=k, pipeline=pipeline, depth=depth, include_text=include_text)
                    code = "OK"
                except grpc.RpcError as e:
                    code = e.code().name
                    pushback = int(dict(e.trailing_metadata() or ()).get("grpc-retry-pushback-ms", 0)) / 1000
                mine.append((time.perf_counter() - start, code))
                if pushback:
                    time.sleep(min(pushback, max(0.0, until - time.monotonic())))
        with lock:
            records.extend(mine)

    workers = [threading.Thread(target=caller, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put(records)


def _open_client(port, topics, pipeline, k, depth, rate, offset, stride, start_at, until, timeout, out,
                 include_text=False):
    """One client process of an open loop: calls started at ``rate`` a second, evenly, from ``start_at`` to
    ``until``, each on its own (grpc.aio), whatever the answers so far: offered load that does not slow down when
    the server does, as a population of independent users; (latency s, code) per call."""
    import asyncio

    import grpc

    sys.path.insert(0, str(ROOT))
    from weir.service.stubs import search_pb2, search_pb2_grpc

    async def main():
        records = []
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = search_pb2_grpc.SearchServiceStub(channel)
            await channel.channel_ready()

            async def call(q):
                start = time.perf_counter()
                try:
                    await stub.Search(search_pb2.SearchRequest(query=q, k=k, pipeline=pipeline, depth=depth,
                                                               include_text=include_text), timeout=timeout)
                    code = "OK"
                except grpc.aio.AioRpcError as e:
                    code = e.code().name
                records.append((time.perf_counter() - start, code))

            await asyncio.sleep(max(0.0, start_at - time.monotonic()))
            tasks, n = [], 0
            while (at := start_at + n / rate) < until:
                await asyncio.sleep(max(0.0, at - time.monotonic()))
                tasks.append(asyncio.ensure_future(call(topics[(offset + n * stride) % len(topics)])))
                n += 1
            await asyncio.gather(*tasks)
        return records

    out.put(asyncio.run(main()))


def offered(port: int, topics: list[str], pipeline: str, rate: float, seconds: float, *, k: int, depth: int,
            timeout: float, include_text: bool = False) -> dict:
    """An open loop at ``rate`` calls a second for ``seconds`` (from 2 client processes); the figures of
    :func:`drive`, with the rate offered."""
    processes = 2
    queue = mp.get_context("spawn").Queue()
    start_at = time.monotonic() + 5
    procs = [mp.get_context("spawn").Process(target=_open_client, args=(
        port, topics, pipeline, k, depth, rate / processes, i, processes, start_at, start_at + seconds, timeout,
        queue, include_text)) for i in range(processes)]
    return {**_figures(_collect(procs, queue, seconds), seconds, timeout), "offered": rate}


def drive(port: int, topics: list[str], pipeline: str, concurrency: int, seconds: float, *, k: int, depth: int,
          timeout: float, include_text: bool = False) -> dict:
    """``concurrency`` callers for ``seconds``; queries/s (OK answers: within their deadline, since a late one is not
    OK), latency percentiles (ms) of OK calls and p99 of refused (RESOURCE_EXHAUSTED) ones, codes."""
    processes = min(concurrency, 4)
    share = [concurrency // processes + (i < concurrency % processes) for i in range(processes)]
    queue = mp.get_context("spawn").Queue()
    start_at = time.monotonic() + 5  # client processes take a few seconds to start
    until = start_at + seconds
    procs, offset = [], 0
    for threads in share:
        procs.append(mp.get_context("spawn").Process(target=_client, args=(
            port, topics, pipeline, k, depth, threads, offset, 1, start_at, until, timeout, queue, include_text)))
        offset += threads
    return _figures(_collect(procs, queue, seconds), seconds, timeout)


def _collect(procs: list, queue, seconds: float) -> list[tuple[float, str]]:
    """Start the client processes, gather their records, join them (killed when they do not end)."""
    for p in procs:
        p.start()
    records = []
    for _ in procs:
        records += queue.get(timeout=seconds + 120)
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    return records


def _figures(records: list[tuple[float, str]], seconds: float, timeout: float) -> dict:
    ok = [lat * 1000 for lat, code in records if code == "OK"]
    refused = [lat * 1000 for lat, code in records if code == "RESOURCE_EXHAUSTED"]
    codes = Counter(code for _, code in records)
    late = sum(lat > timeout for lat, code in records if code == "OK")  # an OK after its deadline: none expected
    return {"calls": len(records), "qps": len(ok) / seconds, "codes": dict(codes), "late": late,
            "p50": statistics.median(ok) if ok else float("nan"), "p95": percentile(ok, 95) if ok else float("nan"),
            "p99": percentile(ok, 99) if ok else float("nan"),
            "refused_p99": percentile(refused, 99) if refused else float("nan")}
