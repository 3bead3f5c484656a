"""Load on a real `weir serve` over loopback: queries/s, latency percentiles and status codes per pipeline and
concurrency, and the server's resident memory over time.

Starts one or more `weir serve` processes on 127.0.0.1 (port chosen by the server) over an index, warms each
pipeline up, then for every pipeline and concurrency drives calls for --seconds from client processes (at most 4,
each with threads for its share of the callers), every call with a deadline. The topics of the collection are
asked round-robin. The server's RSS is read from /proc every second.

    python bench/load.py --index indexes/scifact --pipelines bm25,hybrid>>ltr --concurrency 1,8,32 --seconds 20
    python bench/load.py --index indexes/scifact --pipelines bm25>>attention --concurrency 8 --seconds 15 \\
        --compare "--max-batch 1" "--max-batch 16" --rounds 3      # micro-batching's gain, alternating rounds
    python bench/load.py --index indexes/scifact --pipelines bm25,hybrid>>ltr --seconds 15 --in-process  # no gRPC
    python bench/load.py --index indexes/scifact --pipelines bm25,hybrid>>ltr --concurrency 32 --seconds 60 \\
        --rss-every 5                                             # the 60 s soak: errors and RSS drift
    python bench/load.py --index indexes/scifact --pipelines bm25 -k 1000 --include-text --timeout 0.2 \\
        --offered 0.5,1,2,4,8 --plot goodput.png                 # goodput against offered load (an open loop)

Loopback only, bounded in time: each phase ends after --seconds; client processes are joined or killed.

Overload, measured here (2026-12-05, 2-core AMD EPYC; whole SciFact index; callers are closed loops that honour the
retry pushback; OK/s counts answers within the deadline; "before" is 0c6d2cf, FIFO queueing with the in-flight limit
only, side by side with 454f67b in one `--compare` run; "after, final" is d7350d0 alone):

    python bench/load.py --index IDX --pipelines bm25 -k 1000 --include-text --timeout 0.2 --concurrency 1,8,32 \
        --seconds 10 --rounds 1 --compare "" "" --baseline-weir "env PYTHONPATH=BEFORE .venv/bin/python -P -m weir"

    | pipeline, deadline                  | callers | before OK/s | after OK/s | after, final: OK/s, refused p99 |
    |-------------------------------------|--------:|------------:|-----------:|--------------------------------:|
    | bm25 k=1000 with text, 200 ms       |       1 |        80.2 |       80.4 |                  75.5, -        |
    |                                     |       8 |       117.2 |      116.8 |                                 |
    |                                     |      32 |  7.4 (9%)   | 83.5 (104%)|           70.3 (93%), 77.5 ms   |
    | hybrid>>ltr k=10, 200 ms            |       1 |        71.8 |       64.6 |                  70.0, -        |
    |                                     |      32 | 14.4 (20%)  | 98.4 (152%)|          80.2 (115%), 108.8 ms  |
    | bm25>>attention k=10 depth 20, 1 s  |       1 |         8.1 |        8.3 |                   9.5, -        |
    |                                     |      32 | 37.6        | 39.9       |                 41.0, 313.7 ms  |

(% of the same server's one-caller figure.) After the 32 callers stop, one caller's p50 is back at 12.7 ms (bm25;
12.0 before the load) and 12.5 (hybrid>>ltr; 12.8). Isolation, `--pipelines bm25 -k 10 --concurrency 4 --flood
'bm25>>attention:32:1'`: 4 callers of bm25 k=10 during a flood of 32 attention callers, before 0.5 OK/s (196 of
201 calls DEADLINE_EXCEEDED), after (20529b8) 362.6 OK/s, p99 48.1 ms, no error. The refusals' p99 (target 10 ms)
is missed: about 2% of refusals are sheds taken off the queue after waiting, and 32 client threads share the
2 cores with the server, so even an immediate refusal is measured late by its caller.

Where the time goes, measured here (2026-12-07, 2-core Intel Xeon; SciFact bm25+dense index; each row's columns
now include the server's own figures from its metrics: refusal p99 from arrival at the handler, all and at admission
only, the share within 10 ms, admitted calls that expired, and each outcome's count). Side by side in one
`--compare` run (2 alternating rounds, 10 s cells), before -> after 0316bfc (the server's long-lived objects frozen
out of the garbage collector's full collections; before, one took up to 48 ms about 4 times a second):

    python bench/load.py --index IDX --pipelines bm25 -k 1000 --include-text --timeout 0.2 --concurrency 1,32 \
        --seconds 10 --rounds 2 --compare "" "" --baseline-weir "env PYTHONPATH=BEFORE .venv/bin/python -P -m weir"

    | pipeline, deadline              | callers | OK/s before -> after | expired / admitted      | server refusal p99 (at admission) |
    |---------------------------------|--------:|---------------------:|------------------------:|----------------------------------:|
    | bm25 k=1000 with text, 200 ms   |       1 | 57.9, 59.7 -> 82.0, 87.3 | 8/587, 9/606 -> 0/820, 0/873 | -                          |
    |                                 |      32 | 56.9, 54.0 -> 88.3, 96.0 | 160/770, 153/719 -> 6/952, 11/1029 | 114.1, 90.9 ms (0.5 ms) |
    | hybrid>>ltr k=10, 200 ms        |       1 | 58.0 -> 59.9             | 0 -> 0                  | -                                 |
    |                                 |      32 | 83.4 -> 89.0             | 10/892 -> 37/974        | 76.8 ms (0.5 ms)                  |

Refusals at admission take 0.5 ms at p99 (server side); the p99 of all refusals is set by the sheds (about 2-4% of
them), which are taken off the queue after waiting. Cells vary from run to run: in a later run of the same command
at a17ac3e, 32 callers of bm25 gave 88.0 and 80.7 OK/s with 46/977 and 37/898 admitted calls expired. Tried and not
kept: a GIL switch interval of 0.5 ms (1.03x); a margin on admission's estimate learnt from expiries (up 1.1x per
expiry, down per answer, half-life 2 s: 0.35x the answers, the refusals starving the workers); a fixed one (admit
what fits in 0.8 of the time left: 0.94x the answers, expired 20/866 and 2/788, sheds 14 and 29 against 33 and 47,
refusal p99 0.5 and 114.9 ms).

A margin for the batches' spread (2026-12-07, this machine; `[limits] admit_sigmas`, default 2: a call is admitted
when it would end in time with its batches' cost two weighted standard deviations above their mean), side by side
against the mean alone, 2 rounds each:

    python bench/load.py --index IDX --pipelines bm25 -k 1000 --include-text --timeout 0.2 --concurrency 1,32 \
        --seconds 10 --rounds 2 --compare "--admit-sigmas 0" ""          # and hybrid>>ltr -k 10 without text

    32 callers, 200 ms     OK/s, 0 -> 2           expired / admitted               server refusal p99, 0 -> 2
    bm25 k=1000 with text  79.4, 75.6 -> 74.4, 69.5  12/882, 12/817 -> 6/769, 7/726   83.7, 146.5 -> 0.7, 108.1 ms
    hybrid>>ltr k=10       69.2, 75.4 -> 65.7, 78.1  66/811, 31/840 -> 25/690, 13/809  80.1, 148.7 -> 0.5, 0.5 ms

    (one caller: bm25 73.2-83.9 OK/s, hybrid>>ltr 52.4-73.2; sheds 63, 46 -> 19, 24 and 46, 45 -> 6, 15)

Four earlier rounds of the same setting (an environment variable then, the same code) gave bm25 expired 0.1-0.7% and
refusal p99 56.9, 20.3, 52.1, 0.7 ms; hybrid>>ltr expired 1.2% and 0.1%, p99 106.0 and 0.9 ms. At 3 sigmas (bm25, 2
rounds): p99 0.5 and 0.5 ms, expired 12/685 and 2/666, 0.88x the answers of 2 sigmas.

Why hybrid>>ltr's admitted calls still expire (2026-12-07, stop 60, this machine; a per-call trace of one server,
not kept: admission time, expected and actual time, outcome, and every batch's start, end and size). An A/A run
of the default (`--compare "" ""`, 2 rounds, 32 callers) gave 4/987, 21/962, 20/887 and 0/948 expired: the cell is
that noisy. The expired calls are not refused late nor shed: gRPC cancels them at their deadline while their batch
still runs, and they come in bursts, 4 to 7 at once, each burst one batch that ran about twice its usual time (a batch
of 6 queries in 200 ms where such batches took 106 ms on average) or queued behind two such. Under the 32 callers a
batch's time has a fixed part (batches of 2 queries 49 ms, of 6 106 ms: 23 ms + 13 ms a query by least squares
over 296 batches), so the per-query mean misjudges single batches: its error 19 ms at one standard deviation, the
line's 14. Tried against the default and not kept, side by side: admission by that line (weighted least squares
per batch key; 33/988 and 11/1016 expired against 5/972 and 29/1001 at HEAD, 0.99x the answers), and a margin of
the 99th percentile of admitted calls' actual over expected time, estimated as they end (11/837 and 14/803 against
14/984 and 25/1004, 0.82x the answers). Neither moves the bursts: what the server cannot foresee is a batch slowed
by the client processes and the other worker on the same 2 cores.

One batch worker instead of two (2026-12-07, stop 62, this machine; `--pipelines "hybrid>>ltr" -k 10 --timeout 0.2
--concurrency 1,32 --seconds 10 --rounds 2 --compare "--workers 1" ""`): at 32 callers 127.0 and 121.2 OK/s against
102.3 and 103.5 (1.2x the answers), but 14/1307 and 45/1290 admitted calls expired against 8/1038 and 26/1066, and
the server's refusal p99 128.2 and 147.3 ms (18 and 23 sheds) against 0.5 and 0.5 (7 and 5). Not kept: a lone worker
answers more by packing its queue to the deadline, where any slow batch expires or sheds what waits behind it. One
caller: 78.3/89.8 against 76.6/91.2 OK/s. Nor are the slow batches the query encoder's threads oversubscribing the
cores: with one inference thread (`--baseline-weir "env WEIR_TORCH_THREADS=1 .venv/bin/python -m weir"`, the same
flags otherwise) 16/1035 and 24/1064 expired against 13/1059 and 22/1055, 1.01x the answers. A wider margin does not
stop them either (`--compare "--admit-sigmas 4" "--admit-sigmas 3"`, 3 rounds): at 4 sigmas 28/935, 8/892 and 22/919
expired, at 3 0/1012, 34/1004 and 7/979 (at the default 2, the default sides of the two comparisons above: 8/1038,
26/1066, 13/1059, 22/1055); 4 sigmas gave 0.90x the answers of 3. The server's OK p99 stays 195-198 ms at every
margin: a batch that runs twice its usual time overruns any margin the mean and spread give.

What did stop them: the LTR features compiled (88f506e, stop 62; `weir/ranker/rerankers/text_features.py`). Their
text features had been Python, a pair at a time, holding the GIL for some 3.2 ms of a hybrid>>ltr query's 7.4, so
the two batch workers ran their Python one at a time and a batch's time hung on what the other worker was doing.
Compiled, with the GIL released, side by side against 9ee5214 (`--compare "" "" --baseline-weir "env
PYTHONPATH=BEFORE .venv/bin/python -P -m weir"`, 3 rounds, hybrid>>ltr k=10, 200 ms deadlines):

    callers  OK/s, before -> after                    expired / admitted, before -> after        server refusal p99
    1        74.5, 90.1, 88.4 -> 120.7, 139.7, 147.0   0 -> 0                                     -
    32       99.5, 100.7, 99.7 -> 299.0, 306.5, 307.0  38/1037, 27/1036, 25/1026 -> 0/2999,     0.5, 0.5, 0.5 ->
                                                       0/3065, 0/3070                             39.4, 0.5, 0.5 ms

(1.62x the answers of one caller, 3.04x at 32: the workers now run in parallel.) An A/A run after it (`--compare ""
""`, 2 rounds): 32 callers 293.9, 301.4, 291.4, 303.4 OK/s (one caller 120.1-146.7), 0/2940, 0/3014, 0/2916 and
0/3034 expired, the server's refusal p99 0.5 ms in all four. The 39.4 ms cell: 9 sheds among its 283 refusals
(refusals are fewer now, so a few sheds make their 99th percentile). bm25 k=1000 with text, A/A at 9ee5214 (its path
has no LTR features), 2 rounds: 32 callers 99.8, 97.8, 101.3, 103.1 OK/s (one caller 96.8-97.9), 0 expired of
1009, 990, 1023 and 1041 admitted, the server's refusal p99 0.5 ms in all four.

Goodput against offered load (d85ba67, `--offered 0.5,1,2,4,8 --seconds 8 --compare` as above; OK/s over the
one-caller capacity, before -> after): bm25 k=1000 with text, 200 ms: 2x 0.62 -> 1.17, 4x 0.01 -> 1.13, 8x 0.01 ->
0.84; hybrid>>ltr k=10, 200 ms: 2x 2.00 -> 1.97, 4x 0.04 -> 1.49, 8x 0.04 -> 1.28; bm25>>attention depth 20, 1 s:
2x 1.09 -> 1.20, 4x 1.74 -> 1.51, 8x 2.06 -> 2.32. Refusals' p99 there: 67-164 ms, attention 834-964 ms (sheds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

from _common import COLLECTIONS
from _load import WEIR, Served, drive, offered, rss_mib, server_side


def flooded(args, port: int, topics: list[str], measure):
    """``measure()`` while the flood of ``--flood`` runs against the same server; its result, after the flood's row."""
    if not args.flood:
        return measure()
    pipeline, callers, deadline = args.flood.rsplit(":", 2)
    box: dict = {}
    flood = threading.Thread(target=lambda: box.update(r=drive(port, topics, pipeline, int(callers), args.seconds,
                                                               k=10, depth=args.depth, timeout=float(deadline))))
    flood.start()
    result = measure()
    flood.join()
    print(_row(f"(flood) {pipeline}", callers, box["r"]), flush=True)
    return result


def with_server_side(server: Served, pipeline: str, measure) -> dict:
    """``measure()``'s figures, with what the server measured of ``pipeline``'s calls meanwhile
    (:func:`_load.server_side`)."""
    from weir.service.validation import canonical

    spec = canonical(pipeline)
    before = server.decisions(spec)
    r = measure()
    return {**r, **server_side(before, server.decisions(spec))}


HEADER = ("| pipeline | callers | {}calls | OK/s | p50 ms | p95 ms | p99 ms | refused p99 ms (caller) | refused p99 ms "
          "(server; share <= 10 ms; at admission) | expired / admitted | codes |")


def _row(pipeline, c, r, extra="") -> str:
    codes = ", ".join(f"{k} {v}" for k, v in sorted(r["codes"].items()))
    if r["late"]:
        codes += f" ({r['late']} OK after the deadline)"
    server = (f"{r['refused_p99_server']:.1f} ({r['refused_within_10ms']:.1%}); at admission "
              f"{r['admission_p99_server']:.1f}" if r.get("refused") else "-")
    if r.get("outcomes"):
        codes += "; server: " + ", ".join(f"{o} {n}" for o, n in r["outcomes"].items())
        codes += f"; server's OK p99 {r['ok_p99_server']:.1f} ms"
    expired = f"{r['expired']:.0f} / {r['admitted']:.0f}" if "admitted" in r else "-"
    return (f"| {pipeline} | {c} | {extra}{r['calls']} | {r['qps']:.1f} | {r['p50']:.1f} | {r['p95']:.1f} | "
            f"{r['p99']:.1f} | {r['refused_p99']:.1f} | {server} | {expired} | {codes} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True, help="index directory to serve")
    ap.add_argument("--collection", default="beir-scifact", help="whose queries.tsv is asked (default beir-scifact)")
    ap.add_argument("--pipelines", default="bm25", help="comma-separated (default bm25)")
    ap.add_argument("--concurrency", default="1,8,32", help="callers, comma-separated (default 1,8,32)")
    ap.add_argument("--seconds", type=float, default=20, help="per pipeline and concurrency (default 20)")
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--depth", type=int, default=0, help="reranking depth (default: the pipeline's)")
    ap.add_argument("--timeout", type=float, default=10.0, help="each call's deadline in seconds (default 10)")
    ap.add_argument("--include-text", action="store_true", help="ask for the hits' titles and texts")
    ap.add_argument("--offered", help="multiples of the capacity measured with one caller, e.g. 0.5,1,2,4,8: an open "
                    "loop at each (calls at a fixed rate, whatever the answers), goodput against offered load; "
                    "with --compare, for both servers in turn")
    ap.add_argument("--plot", help="with --offered: a PNG of goodput against offered load")
    ap.add_argument("--flood", help="PIPELINE:CALLERS:DEADLINE_S, e.g. 'bm25>>attention:32:1': that many callers of "
                    "that pipeline (k 10, --depth) at the same time as every measured cell; their row is printed too "
                    "(isolation between pipelines)")
    ap.add_argument("--server-args", default="", help="extra `weir serve` flags")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two sets of extra `weir serve` flags: run both "
                    "servers side by side, alternating rounds, and report the queries/s ratio B/A")
    ap.add_argument("--rounds", type=int, default=3, help="with --compare: rounds of A then B (default 3)")
    ap.add_argument("--baseline-weir", help="with --compare: the command that starts server A (another version's "
                    "weir, e.g. \"env PYTHONPATH=/path/to/old python -m weir\"); B is this checkout's")
    ap.add_argument("--rss-every", type=float, default=0, help="also print the server's RSS every this many seconds")
    ap.add_argument("--in-process", action="store_true", help="instead of serving: the same pipelines called in this "
                    "process, one query per call for --seconds, then all topics in one call (gRPC's cost, by "
                    "difference)")
    ap.add_argument("--warmup", type=float, default=10, help="seconds of load at the highest concurrency before the "
                    "measured cells, after which 'RSS after warm-up' is read (default 10)")
    args = ap.parse_args()
    topics = [line.split("\t", 1)[1].strip() for line in open(COLLECTIONS / args.collection / "queries.tsv",
                                                               encoding="utf-8") if "\t" in line]
    pipelines = [p.strip() for p in args.pipelines.split(",") if p.strip()]
    concurrency = [int(c) for c in args.concurrency.split(",")]
    if args.in_process:
        return in_process(args, topics, pipelines)
    if args.compare:
        servers = [Served(args.index, args.compare[0], args.baseline_weir or WEIR), Served(args.index, args.compare[1])]
    else:
        servers = [Served(args.index, args.server_args)]
    try:
        _run(args, servers, topics, pipelines, concurrency)
    finally:
        for s in servers:
            s.close()


def in_process(args, topics: list[str], pipelines: list[str]) -> None:
    """The pipelines called in this process: one query per call (as one gRPC caller asks), and all topics at once."""
    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.core.types import Query

    index = Index(args.index)
    queries = [Query(str(i), t) for i, t in enumerate(topics)]
    depth = args.depth or None
    for spec in pipelines:
        pipeline = registry.build(spec, index)
        for q in queries[:20]:
            pipeline([q], k=args.k, depth=depth)
        latencies, start = [], time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            q = queries[len(latencies) % len(queries)]
            t = time.perf_counter()
            pipeline([q], k=args.k, depth=depth)
            latencies.append((time.perf_counter() - t) * 1000)
        one = len(latencies) / (time.perf_counter() - start)
        start = time.perf_counter()
        pipeline(queries, k=args.k, depth=depth)
        batch = len(queries) / (time.perf_counter() - start)
        print(f"{spec}: in process, one query per call {one:.1f} queries/s (p50 {statistics.median(latencies):.1f} ms); "
              f"all {len(queries)} topics in one call {batch:.1f} queries/s")


def _offered_sweep(args, servers: list[Served], topics: list[str], pipelines: list[str]) -> None:
    """Goodput (OK answers within the deadline, a second) against offered load, per pipeline and server: capacity
    first (one closed-loop caller), then an open loop at each multiple of it."""
    multiples = [float(m) for m in args.offered.split(",")]
    print("| pipeline | server | offered (x capacity) | offered/s | OK/s | OK/s / capacity | p50 ms | p99 ms | "
          "refused p99 ms | codes |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    curves: dict[tuple[str, str], list[tuple[float, float]]] = {}
    options = dict(k=args.k, depth=args.depth, timeout=args.timeout, include_text=args.include_text)
    for p in pipelines:
        capacity = {s.extra: drive(s.port, topics, p, 1, args.seconds, **options)["qps"] for s in servers}
        for m in multiples:
            for s in servers:
                r = offered(s.port, topics, p, m * capacity[s.extra], args.seconds, **options)
                curves.setdefault((p, s.extra), []).append((m, r["qps"] / capacity[s.extra]))
                codes = ", ".join(f"{c} {n}" for c, n in sorted(r["codes"].items()))
                print(f"| {p} | `{s.extra}` | {m:g} | {r['offered']:.1f} | {r['qps']:.1f} | "
                      f"{r['qps'] / capacity[s.extra]:.2f} | {r['p50']:.1f} | {r['p99']:.1f} | "
                      f"{r['refused_p99']:.1f} | {codes} |", flush=True)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for (p, extra), points in curves.items():
            ax.plot(*zip(*points), marker="o", label=f"{p} [{extra[:30]}]")
        ax.axhline(0.8, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("offered load (x capacity with one caller)")
        ax.set_ylabel("goodput (x capacity)")
        ax.set_title(f"goodput under overload, deadline {args.timeout * 1000:.0f} ms")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")


def _run(args, servers: list[Served], topics, pipelines, concurrency) -> None:
    from weir.service.client import SearchClient

    for s in servers:
        rest = rss_mib(s.process.pid)
        with SearchClient(f"127.0.0.1:{s.port}", timeout=120) as c:
            for p in pipelines + ([args.flood.rsplit(":", 2)[0]] if args.flood else []):
                for q in topics[:20]:
                    c.search(q, k=args.k, pipeline=p, depth=args.depth)
        s.warm = rss_mib(s.process.pid)
        print(f"server [{s.extra}] pid {s.process.pid}: RSS {rest:.0f} MiB at rest, {s.warm:.0f} MiB "
              f"after warming {', '.join(pipelines)}", flush=True)
    if args.offered:
        return _offered_sweep(args, servers, topics, pipelines)
    print(f"\n{len(topics)} {args.collection} topics round-robin, k={args.k}, depth={args.depth or 'default'}, "
          f"{args.seconds:.0f} s per cell, deadline {args.timeout:.0f} s, {os.cpu_count()} cores shared by server "
          f"and clients\n")
    if args.compare:
        print(HEADER.format("server | "))
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for p in pipelines:
            for c in concurrency:
                qps = {0: [], 1: []}
                for _ in range(args.rounds):
                    for i, s in enumerate(servers):
                        r = flooded(args, s.port, topics, lambda: with_server_side(s, p, lambda: drive(
                            s.port, topics, p, c, args.seconds, k=args.k, depth=args.depth, timeout=args.timeout,
                            include_text=args.include_text)))
                        qps[i].append(r["qps"])
                        print(_row(p, c, r, f"`{s.extra}` | "), flush=True)
                ratios = [b / a for a, b in zip(qps[0], qps[1]) if a > 0]
                print(f"\n{p} at {c} callers: `{servers[1].extra}` / `{servers[0].extra}` queries/s = "
                      f"{statistics.median(ratios):.2f}x (median of {len(ratios)} alternating rounds; "
                      f"{', '.join(f'{x:.2f}' for x in ratios)})\n")
        return
    s = servers[0]
    if args.warmup:
        for p in pipelines:
            drive(s.port, topics, p, max(concurrency), args.warmup, k=args.k, depth=args.depth,
                  timeout=args.timeout, include_text=args.include_text)
        s.warm = rss_mib(s.process.pid)
        print(f"RSS after {args.warmup:.0f} s of load per pipeline at {max(concurrency)} callers: {s.warm:.0f} MiB\n")
    s.rss.clear()
    print(HEADER.format(""))
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for p in pipelines:
        for c in concurrency:
            r = flooded(args, s.port, topics, lambda: with_server_side(s, p, lambda: drive(
                s.port, topics, p, c, args.seconds, k=args.k, depth=args.depth, timeout=args.timeout,
                include_text=args.include_text)))
            print(_row(p, c, r), flush=True)
    end = rss_mib(s.process.pid)
    peak = max((m for _, m in s.rss), default=end)
    print(f"\nserver RSS: {s.warm:.0f} MiB after warm-up, {end:.0f} MiB at the end ({(end / s.warm - 1) * 100:+.1f}%), "
          f"peak {peak:.0f} MiB")
    if args.rss_every:
        step = max(1, int(args.rss_every))
        print("RSS over time (s: MiB): " + ", ".join(f"{t:.0f}: {m:.0f}" for t, m in s.rss[::step]))


if __name__ == "__main__":
    main()
