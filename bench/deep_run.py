"""Deep runs, whole process: `weir run` writing a TREC run of many queries against bm25s doing the same in its own
process, and against an earlier weir; then fusion pipelines' milliseconds a query.

Runs (each a fresh process, timed whole, peak resident memory from ``/usr/bin/time -v``; rounds alternate the
commands, A B C A B C ...; printed: median [min-max] seconds, median peak RSS, and the median of the per-round
ratios bm25s seconds / weir seconds):

- ``weir``: ``weir run --index INDEX --topics T --pipeline P -k K --out RUN`` (``--weir``, default this checkout's);
- ``weir before``: the same command of another version (``--before``, e.g. ``/work/base/.venv/bin/weir``), over the
  same index; its run file is compared with ``weir``'s byte for byte;
- ``bm25s``: bm25s (``method="lucene"``, k1 0.9, b 0.4, PyStemmer English stemmer, English stopwords, title + text,
  ``n_threads=--bm25s-threads``) tokenizing and indexing the corpus, then tokenizing and retrieving the same topics
  and writing the same TREC lines, in its own process (this file, ``bm25s`` mode);
- ``pyserini`` (bm25 rows, ``--pyserini``): pyserini's ``LuceneSearcher`` over the Lucene index of weir's bm25
  component (Anserini's default English analyzer, as ``pyserini.index.lucene`` builds it: a prebuilt index, so its
  time is search + write, no indexing), k1 0.9, b 0.4, ``batch_search`` with ``--bm25s-threads`` threads, writing the
  same TREC lines, in its own process (``pyserini`` mode).

The topics: the collection's ``queries.tsv`` repeated ``--repeat`` times with distinct query ids (``qid.r``).
``--fusion`` adds, for the fusion pipelines (``hybrid``, ``deepimpact+bm25``) over the topics once at k 1000, the
milliseconds a query of the search itself (``weir run``'s own timing, writing excluded), weir against ``--before``.
``--experiment`` adds ``weir experiment`` over the demo's non-neural pipelines (bm25, deepct, deepimpact,
deepimpact+bm25) on the topics at k 1000: each row's ms/query as the experiment records it (results.json), weir
against ``--before``, and the rows' sum.

Usage: python bench/deep_run.py [--index /tmp/behaviour/indexes/scifact] [--collection .../beir-scifact]
       [--repeat 50] [--k 1000,100] [--pipelines bm25,deepimpact] [--rounds 3] [--before CMD] [--fusion]
       [--pyserini] [--experiment] [--no-whole]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import COLLECTIONS, ROOT, corpus, summary


def bm25s_run(collection: Path, topics: Path, k: int, out: Path, threads: int) -> None:
    """bm25s from the corpus to the run file, in this process."""
    import bm25s
    import Stemmer

    ids, docs = corpus(collection)
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
    retriever.index(bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    qids, texts = zip(*(line.rstrip("\n").split("\t", 1) for line in open(topics, encoding="utf-8") if line.strip()))
    tokens = bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, show_progress=False)
    found, scores = retriever.retrieve(tokens, k=min(k, len(ids)), n_threads=threads, show_progress=False)
    with open(out, "w", encoding="utf-8") as f:
        for qid, rows, values in zip(qids, found.tolist(), scores.tolist()):
            f.writelines(f"{qid} Q0 {ids[d]} {r} {s:.6f} bm25s\n" for r, (d, s) in enumerate(zip(rows, values), 1))


PYSERINI_BATCH = 1000  # queries a batch_search call


def pyserini_run(lucene_index: Path, topics: Path, k: int, out: Path, threads: int) -> None:
    """pyserini from a prebuilt Lucene index to the run file, in this process."""
    from weir.core import jvm

    jvm.ensure()  # the JDK 21 that pyserini's jar needs (../shared/DESIGN.md), before pyserini starts a JVM
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(lucene_index))
    searcher.set_bm25(0.9, 0.4)
    qids, texts = zip(*(line.rstrip("\n").split("\t", 1) for line in open(topics, encoding="utf-8") if line.strip()))
    with open(out, "w", encoding="utf-8") as f:
        for start in range(0, len(qids), PYSERINI_BATCH):  # all at once, 15,000 x 1000 hit objects outgrow the RAM
            part = list(qids[start:start + PYSERINI_BATCH])
            found = searcher.batch_search(list(texts[start:start + PYSERINI_BATCH]), part, k=k, threads=threads)
            for qid in part:
                f.writelines(f"{qid} Q0 {h.docid} {r} {h.score:.6f} pyserini\n" for r, h in enumerate(found[qid], 1))


def timed(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and stderr of one process."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"failed: {shlex.join(command)}\n{done.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1)) / 1024
    return seconds, rss, done.stderr


def repeated_topics(collection: Path, repeat: int, out: Path) -> int:
    lines = [line.rstrip("\n").split("\t", 1) for line in open(collection / "queries.tsv", encoding="utf-8")
             if line.strip()]
    with open(out, "w", encoding="utf-8") as f:
        for r in range(repeat):
            f.writelines(f"{qid}.{r}\t{text}\n" if repeat > 1 else f"{qid}\t{text}\n" for qid, text in lines)
    return len(lines) * repeat


def whole_process(args, weir: list[str], before: list[str] | None, work: Path) -> None:
    topics = work / "topics.tsv"
    n = repeated_topics(args.collection, args.repeat, topics)
    print(f"{n} queries ({args.collection.name} queries.tsv x {args.repeat}); index {args.index}; "
          f"bm25s n_threads={args.bm25s_threads}")
    print(f"{'pipeline':<11} {'k':>5}  {'command':<12} {'seconds':>22}  {'peak RSS MiB':>12}  bm25s/weir")
    for pipeline in args.pipelines.split(","):
        for k in (int(x) for x in args.k.split(",")):
            commands = {"weir": weir}
            if before:
                commands["weir before"] = before
            peers = ["bm25s", *(["pyserini"] if args.pyserini and pipeline == "bm25" else [])]
            seconds: dict[str, list[float]] = {c: [] for c in [*commands, *peers]}
            rss: dict[str, list[float]] = {c: [] for c in seconds}
            for _ in range(args.rounds):
                for name, cmd in commands.items():
                    out = work / f"{name.replace(' ', '_')}.trec"
                    s, m, _ = timed([*cmd, "run", "--index", str(args.index), "--topics", str(topics), "--pipeline",
                                     pipeline, "-k", str(k), "--out", str(out)])
                    seconds[name].append(s)
                    rss[name].append(m)
                for peer in peers:
                    source = ["--collection", str(args.collection)] if peer == "bm25s" else \
                        ["--index", str(args.index / "bm25")]
                    s, m, _ = timed([sys.executable, __file__, peer, *source, "--topics", str(topics), "-k", str(k),
                                     "--out", str(work / f"{peer}.trec"), "--bm25s-threads", str(args.bm25s_threads)])
                    seconds[peer].append(s)
                    rss[peer].append(m)
            ratios = [b / w for b, w in zip(seconds["bm25s"], seconds["weir"])]
            for name in seconds:
                ratio = f"{statistics.median(ratios):.2f}x" if name == "weir" else (
                    f"{statistics.median(b / w for b, w in zip(seconds['bm25s'], seconds[name])):.2f}x")
                print(f"{pipeline:<11} {k:>5}  {name:<12} {summary(seconds[name]):>22}  "
                      f"{statistics.median(rss[name]):>12.0f}  {ratio}")
            if before:
                same = filecmp.cmp(work / "weir.trec", work / "weir_before.trec", shallow=False)
                print(f"{'':<11} {'':>5}  run files of weir and weir before identical: {same}")


def fusion(args, weir: list[str], before: list[str] | None, work: Path) -> None:
    topics = args.collection / "queries.tsv"
    n = repeated_topics(args.collection, 1, work / "once.tsv")
    commands = {"weir": weir, **({"weir before": before} if before else {})}
    print(f"\nfusion at k 1000, {n} queries, milliseconds a query (the search, `weir run`'s own timing):")
    for pipeline in ("hybrid", "deepimpact+bm25"):
        ms: dict[str, list[float]] = {c: [] for c in commands}
        for _ in range(args.rounds):
            for name, cmd in commands.items():
                _, _, err = timed([*cmd, "run", "--index", str(args.index), "--topics", str(topics), "--pipeline",
                                   pipeline, "-k", "1000", "--out", str(work / f"f.{name.replace(' ', '_')}.trec")])
                ms[name].append(float(re.search(r"hits -> .* in ([0-9.]+)s", err).group(1)) / n * 1000)
        line = "  ".join(f"{name} {summary(v)}" for name, v in ms.items())
        ratio = (f"  before/after {statistics.median(b / a for b, a in zip(ms['weir before'], ms['weir'])):.2f}x"
                 if before else "")
        print(f"  {pipeline:<16} {line}{ratio}")


EXPERIMENT_PIPELINES = ("bm25", "deepct", "deepimpact", "deepimpact+bm25")  # the demo's pipelines without a model


def experiment(args, weir: list[str], before: list[str] | None, work: Path) -> None:
    commands = {"weir": weir, **({"weir before": before} if before else {})}
    ms: dict[str, dict[str, list[float]]] = {c: {p: [] for p in (*EXPERIMENT_PIPELINES, "sum")} for c in commands}
    for _ in range(args.rounds):
        for name, cmd in commands.items():
            out = work / f"experiment.{name.replace(' ', '_')}"
            timed([*cmd, "experiment", "--index", str(args.index), "--topics", str(args.collection / "queries.tsv"),
                   "--qrels", str(args.collection / "qrels.txt"), "--pipelines", ",".join(EXPERIMENT_PIPELINES),
                   "--measures", "nDCG@10,R@100", "-k", "1000", "--out", str(out)])
            rows = {s["label"]: s["ms_per_query"] for s in json.loads((out / "results.json").read_text())["systems"]}
            for p in EXPERIMENT_PIPELINES:
                ms[name][p].append(rows[p])
            ms[name]["sum"].append(sum(rows[p] for p in EXPERIMENT_PIPELINES))
    print(f"\n`weir experiment`, non-neural rows, k 1000, ms/query as recorded (median [min-max] of {args.rounds}):")
    for p in (*EXPERIMENT_PIPELINES, "sum"):
        line = "  ".join(f"{name} {statistics.median(v[p]):.2f} [{min(v[p]):.2f}-{max(v[p]):.2f}]"
                         for name, v in ms.items())
        ratio = (f"  before/after {statistics.median(b / a for b, a in zip(ms['weir before'][p], ms['weir'][p])):.2f}x"
                 if before else "")
        print(f"  {p:<16} {line}{ratio}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("bm25s", "pyserini"):
        ap = argparse.ArgumentParser()
        ap.add_argument("mode")
        ap.add_argument("--collection", type=Path)
        ap.add_argument("--index", type=Path)
        ap.add_argument("--topics", type=Path)
        ap.add_argument("-k", type=int)
        ap.add_argument("--out", type=Path)
        ap.add_argument("--bm25s-threads", type=int, default=1)
        a = ap.parse_args()
        if a.mode == "bm25s":
            bm25s_run(a.collection, a.topics, a.k, a.out, a.bm25s_threads)
        else:
            pyserini_run(a.index, a.topics, a.k, a.out, a.bm25s_threads)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, default=Path("/tmp/behaviour/indexes/scifact"))
    ap.add_argument("--collection", type=Path, default=COLLECTIONS / "beir-scifact")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--k", default="1000,100")
    ap.add_argument("--pipelines", default="bm25,deepimpact")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--weir", default=f"{sys.executable} -m weir", help="the weir command measured")
    ap.add_argument("--before", help="an earlier weir's command, measured alongside")
    ap.add_argument("--bm25s-threads", type=int, default=1)
    ap.add_argument("--fusion", action="store_true", help="also the fusion pipelines' ms/query")
    ap.add_argument("--pyserini", action="store_true", help="also pyserini's rows (bm25)")
    ap.add_argument("--experiment", action="store_true", help="also `weir experiment`'s non-neural rows")
    ap.add_argument("--no-whole", action="store_true", help="skip the whole-process table")
    args = ap.parse_args()
    weir, before = shlex.split(args.weir), shlex.split(args.before) if args.before else None
    with tempfile.TemporaryDirectory(prefix="deep_run.") as tmp:
        if not args.no_whole:
            whole_process(args, weir, before, Path(tmp))
        if args.fusion:
            fusion(args, weir, before, Path(tmp))
        if args.experiment:
            experiment(args, weir, before, Path(tmp))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
