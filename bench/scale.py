"""weir's sparse first stage at MS MARCO size: a seeded synthetic corpus, weir's index of it, and the same queries
answered by weir's pruned search, weir's exhaustive scorer and Lucene itself.

The corpus keeps MS MARCO passage's shape without its text: each passage is seeded by a passage of the TREC DL 2019
pool (39,610 real MS MARCO passages) and keeps its length; each word is the seed's word at that place (so that words
co-occur and repeat as in real text) with probability ``--keep``, else a word drawn from the pool's unigram law, else
(``--tail``) a word of a long tail of made-up words drawn from a Zipf law, so that the vocabulary keeps growing with the
collection as a real one does (about 2.66M distinct analyzed terms at 8.8M passages in MS MARCO). Queries: the 43 DL
2019 topics, then queries of 2 to 6 distinct content words of a generated passage (their terms keep the document
frequencies real query terms have). Everything is drawn from ``--seed``: the same arguments give the same files.

Subcommands (the files live under ``$WEIR_CACHE/scale/<name>``, never in the repository):

- ``generate --docs N``: ``corpus.jsonl`` and ``queries.tsv``;
- ``build --docs N``: ``weir index build --with bm25`` of it, its wall time and peak RSS (the build's process tree);
- ``query --docs N``: per engine and k, median and p99 latency over the queries, one thread each, engines taking
  turns query by query (weir pruned, weir exhaustive, Lucene through pyserini's ``LuceneSearcher``); every answer
  of the pruned search checked against the exhaustive scorer (ids and score bits), and its top 10 against Lucene's.

- ``query --impact``: the same over DeepImpact-like impacts on the same postings (no Lucene index of them);
- ``query --pisa block_max_maxscore,...``: PISA's BM25 over the same postings takes its turn too (``bench/_pisa.py``,
  a bench-only extra);
- ``threads``: queries a second through ``BM25.retrieve``, one thread against two;
- ``serve``: ``weir serve`` over the index, one gRPC call, the server's memory, one caller against two.

Usage: python bench/scale.py generate|build|query|threads|serve --docs 1000000 [--k 10,1000] [--queries 1000]
       [--impact] [--no-lucene] [--pisa ALGORITHMS] [--seconds 20]

Measured on a 2-core Intel Xeon with AMX (24 GiB), 2026-12-07 (stop 61), main at 7317124: the 1,043 queries' first
1,000 (DL 2019's 43, then generated), one thread, engines taking turns query by query, medians (p99) in ms; ``query
--docs N --k 10,1000 --pisa maxscore,block_max_maxscore``. Every answer of the pruned search equal to the exhaustive
scorer's (ids and score bits) at both k, every top 10 equal to Lucene's. "opened" (stop 60): the process's anonymous
memory after opening the BM25 component and one search (block maxima derived), imports and JVM included, and the
seconds to that (warm page cache). PISA: ``maxscore`` / ``block_max_maxscore`` over the same postings
(``bench/_pisa.py``: block_simdbp codes, block maxima of 64; its Python wrapper makes a string of each hit's id, which
weir's engine does not), its top 10 sharing 95.5% (8.8M) to 97.5% (100k) of weir's: its mean length is its own.

| passages (postings) | k=10 weir | exhaustive | Lucene | PISA | k=1000 weir | exhaustive | Lucene | PISA | opened |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| 100k (3.9M) | 0.24 (0.56) | 0.21 | 0.79 | 0.12 / 0.09 | 0.62 (1.35) | 0.30 | 6.67 | 0.60 / 0.51 | |
| 1M (38M) | 0.71 (2.92) | 2.19 | 1.54 | 0.65 / 0.53 | 2.11 (5.74) | 2.32 | 10.04 | 1.90 / 1.80 | 185 MiB 1.1s |
| 8.8M (336M) | 4.26 (19.24) | 31.84 | 6.63 | 5.66 / 6.26 | 8.37 (29.61) | 32.90 | 20.46 | 9.66 / 10.05 | 565 MiB 3.2s |

At 8.8M: 7.5x the exhaustive scorer at k=10 and 3.9x at k=1000, 1.6x and 2.4x Lucene, 1.3x and 1.2x PISA's maxscore
over the same postings (its codes are compressed, weir's arrays are not). 8.8M / 1M at k=10: 6.0 (Lucene 4.3, PISA
8.7, the exhaustive scorer 14.5). k=100 over 1M: weir 1.08 ms, exhaustive 2.21, Lucene 2.61, PISA 0.90 / 0.88.
DeepImpact-like impacts (``--impact --no-lucene``), 8.8M: k=10 7.69 against the exhaustive 44.02 (5.7x), k=1000 15.02
against 44.13 (2.9x). ``threads`` at 8.8M (stop 60; 400 queries, micro-batches of 8, medians of 3 rounds): k=10 265
-> 529 queries/s with a second thread (1.99x), k=1000 108 -> 214 (1.98x). ``serve`` at 8.8M (stop 60): SERVING after
7.7 s (``--no-verify``), RSS 3.5 GiB of which 1.7 GiB anonymous (JVM and Python included); closed-loop callers from
client processes on the same 2 cores: one 132 OK/s (p50 6.5 ms), two 165 (the callers' processes take the cores the
second batch worker would use). Whole runs move a lot here: weir's k=10 median at 8.8M was 3.62, 4.08, 6.43 and 5.45
in four runs of stop 60 while the kernel alone, side by side in one process on the same queries, stayed 2.6-2.8 ms:
kernels are compared side by side in one process, never across runs.

Why the growth stays above 4: the work itself grows about as the postings of the query terms do. Counted in the
kernel over the 1,000 queries (a counting copy, not kept), 1M -> 8.8M at k=10: documents visited 21.3k -> 147.8k a
query (6.9x), essential postings scored 60.2k -> 376.5k (6.3x), lookups 8.6k -> 52.6k (6.1x), while the query terms
hold 148k -> 1.35M postings (9.1x); documents that reach the k-th score 100 -> 123. The bounds limit the skipping,
not the threshold's rise (stop 55: the final k-th score known from the start saved 12%).

The kernel (``weir/ranker/retrievers/maxscore.py``), block-max MaxScore document at a time, replaced MaxScore over
windows of 8,192 doc numbers (stop 55: essential terms added term at a time into a window accumulator, blocks of 128;
on an AMD EPYC, 8.8M: k=10 8.71 ms, k=1000 22.07). Side by side in one process (the kernels alone, queries prepared,
8.8M): the windows 7.86 ms at k=10 and 22.17 at k=1000; document at a time with the block-max check before each
lookup, blocks of 32, 5.14 and 15.30; blocks of 16, 8 and 64: 4.91, 4.85, 5.57 at k=10; every helper called per
document taking arrays rather than the index and query tuples: 2.58 and 7.16 (a call given the tuples cost about what
a lookup computes; why, within numba, was not examined); a lookup's blocks found by galloping and bisection: 2.63
against 2.76 and 7.58 against 7.82; the id rank read only for a document reaching the k-th score: 2.82 against 3.44;
the k-th score started at the floor of the query's terms (the 10th/100th/1000th largest block maximum; stop 61):
2.55 against 2.58 and 6.92 against 7.41 (1M: 0.42/0.43, 1.45/1.70; order alternated). Not kept: skipping an essential
posting's score when the essential terms' block maxima at the document cannot bring it in (1M, k=10: 1.02 against
0.97 ms), lookups term by term over a window's sorted candidates (1M: no change), Lucene-style windows over the
essential terms' current blocks (8.8M: 2.71 against 2.68). Through the default policy
(:func:`weir.ranker.retrievers.inverted.prunes`) a deep top k over a collection under 3M documents is answered by the
exhaustive scorer, which is faster there.

The build profiled for steps that grow faster than the collection (issue 51, item 5; stop 58, Intel Xeon with AMX):
``py-spy record --rate 50 --format raw --subprocesses -- python -m weir index build --collection
$WEIR_CACHE/scale/msmarco-like-N/corpus.jsonl --out DIR --with bm25`` at 100k and 1M (17.4 s and 128.5 s; 682 and
5,009 samples of the Python threads; Lucene's own indexing runs in the JVM, seen from Python as the indexing call and
its wait). Samples at 1M (at 100k), inclusive: postings export 1,772 (258: 6.9x for 10x the documents), its segment
reading 1,601 (226: 7.1x); Lucene indexing called from Python 1,840 (258: 7.1x); the document store 1,074 (95:
11.3x), nearly all of it reading each stored document back through pyjnius, one call a document (``_read_raw``,
949); the docid table 796 (84: 9.5x), likewise a call a document (``_stored_ids``); reading and validating the corpus
301 (30: 10x). No step grows beyond the collection's ratio by more than the sampling's noise at 100k (a few dozen
samples); at 8.8M (stop 55) each step took 9.4-10.9x its 1M time. The largest linear costs left are the per-document
calls into Java that read back the stored documents and ids (34 s of the 1M build's 128): Lucene numbers the
documents as its indexing threads add them, so the build reads them back in Lucene's order rather than writing them
from the corpus stream. Both were read into a list of every document before being written (at 8.8M the document
store's step peaked at 7.1 GiB anonymous); they are now written as read: the 1M build at 6ae1f42 and after, one
after the other on the same machine, the document store step 22.9 s and 1,900 MiB anonymous against 20.1 s and
1,669 MiB, the whole build 126.6 s against 118.4 s, every document's title and text the same by id (Lucene's doc
numbers differ from build to build: its indexing threads). At 8.8M (stop 60, generated in 151 s): 1,050 s, the
largest process's peak RSS 6.46 GB (was 9.4 GiB); its steps: Lucene 621 s, 4.0 GiB; the postings export 251 s,
6.5 GiB (6.3 anonymous); the document store 169 s, 3.2 GiB (894 MiB anonymous, was 7.1 GiB). The export alone, merged
on disk (stop 61): 282 s, peak RSS 3.8 GiB, against 267 s and 6.0 GiB merged in memory, the same files.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import COLLECTIONS, ROOT, percentile

POOL = COLLECTIONS / "msmarco-passage-trec-dl-pool"
WORD = re.compile(r"[a-z0-9]+")
# Lucene's English stop words (what Anserini's analyzer drops): never made a query term
STOP = set("a an and are as at be but by for if in into is it no not of on or such that the their then there "
           "these they this to was will with".split())
CHUNK = 50_000


def cache_dir(docs: int) -> Path:
    root = Path(os.environ.get("WEIR_CACHE") or Path.home() / ".cache" / "weir")
    return root / "scale" / f"msmarco-like-{docs}"


def _tail_word(i: int) -> str:
    """The made-up word of tail rank ``i`` (letters only, so that the analyzer keeps it one token)."""
    letters = []
    while True:
        i, r = divmod(i, 26)
        letters.append(chr(97 + r))
        if i == 0:
            break
    return "zq" + "".join(letters)


def _pool() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pool's words: its vocabulary (object array), each passage's words as vocabulary ids (flat, with offsets),
    and the unigram law's cumulative distribution."""
    vocabulary: dict[str, int] = {}
    flat, offsets = [], [0]
    with open(POOL / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            words = WORD.findall(f"{d.get('title') or ''} {d['text']}".lower())
            flat.extend(vocabulary.setdefault(w, len(vocabulary)) for w in words)
            offsets.append(len(flat))
    ids = np.array(flat, dtype=np.int64)
    counts = np.bincount(ids, minlength=len(vocabulary)).astype(np.float64)
    words = np.array(list(vocabulary), dtype=object)
    return words, ids, np.array(offsets, dtype=np.int64), np.cumsum(counts / counts.sum())


def generate(args) -> Path:
    out = cache_dir(args.docs)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    words, pool_ids, pool_offsets, cdf = _pool()
    lengths = np.diff(pool_offsets)
    usable = np.flatnonzero(lengths > 0)
    tail_words: dict[int, str] = {}
    start = time.perf_counter()
    query_source: list[list[str]] = []
    tmp = out / "corpus.jsonl.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for first in range(0, args.docs, CHUNK):
            m = min(CHUNK, args.docs - first)
            seeds = usable[rng.integers(0, len(usable), m)]
            n = lengths[seeds]
            ends = np.cumsum(n)
            within = np.arange(ends[-1]) - np.repeat(ends - n, n)
            seeded = pool_ids[np.repeat(pool_offsets[seeds], n) + within]
            u = rng.random(len(seeded))
            drawn = np.searchsorted(cdf, rng.random(len(seeded)), side="right").clip(0, len(cdf) - 1)
            tail = rng.zipf(args.zipf, len(seeded))
            token = np.where(u < args.keep, seeded, drawn)
            text = words[token]
            is_tail = u >= 1 - args.tail
            for i in np.flatnonzero(is_tail):
                t = int(tail[i])
                text[i] = tail_words.get(t) or tail_words.setdefault(t, _tail_word(t))
            flat = text.tolist()
            lines = []
            for j in range(m):
                passage = flat[ends[j] - n[j]:ends[j]]
                lines.append(f'{{"id": "{first + j}", "title": "", "text": "{" ".join(passage)}"}}\n')
                if len(query_source) < args.queries and rng.random() < 4 * args.queries / args.docs:
                    query_source.append(passage)
            f.write("".join(lines))
            done = first + m
            rate = done / (time.perf_counter() - start)
            print(f"\r{done:,} passages, {rate:,.0f}/s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    tmp.rename(out / "corpus.jsonl")
    with open(out / "queries.tsv", "w", encoding="utf-8") as f:
        for line in open(POOL / "queries.tsv", encoding="utf-8"):
            f.write(line)
        for i, passage in enumerate(query_source):
            content = sorted({w for w in passage if w not in STOP and not w.isdigit()})
            if len(content) < 2:
                continue
            chosen = rng.choice(content, min(len(content), int(rng.integers(2, 7))), replace=False)
            f.write(f"synthetic-{i}\t{' '.join(chosen)}\n")
    info = {"docs": args.docs, "seed": args.seed, "keep": args.keep, "tail": args.tail, "zipf": args.zipf,
            "queries": sum(1 for _ in open(out / "queries.tsv")), "seconds": round(time.perf_counter() - start, 1)}
    (out / "generated.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))
    return out


def build(args) -> None:
    out = cache_dir(args.docs)
    index = out / "index"
    command = [sys.executable, "-m", "weir", "index", "build", "--collection", str(out / "corpus.jsonl"),
               "--out", str(index), "--with", args.components, "--overwrite"]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024 ** 2
    print(json.dumps({"docs": args.docs, "components": args.components, "build_seconds": round(seconds, 1),
                      "peak_rss_gb_largest_process": round(peak, 2)}))


def impact_postings(postings, seed: int = 0):
    """DeepImpact-like postings over the BM25 index's: the same terms and documents, each posting's frequency replaced
    by a quantized impact in 1..255 that grows with the term's idf (lognormal around 20 at the median idf, sigma 0.7),
    as learned impacts do. Lucene never sees them: the pruned search is checked against the exhaustive scorer, which
    the exactness tests check against Lucene's impact search."""
    from weir.indexer.postings import Postings

    rng = np.random.default_rng(seed)
    df = np.diff(postings.offsets).astype(np.float64)
    idf = np.log(1 + (postings.doc_count - df + 0.5) / (df + 0.5))
    center = np.log(20) + 0.35 * (idf - np.median(idf))
    impacts = np.empty(len(postings.docs), dtype=np.uint8)
    step = 1 << 24
    for start in range(0, len(impacts), step):  # a chunk at a time: the temporaries stay small
        end = min(start + step, len(impacts))
        term = np.searchsorted(postings.offsets, np.arange(start, end), side="right") - 1
        drawn = np.exp(center[term] + 0.7 * rng.standard_normal(end - start))
        impacts[start:end] = np.clip(np.ceil(drawn), 1, 255)
    return Postings("impacts", postings.terms, postings.offsets, postings.docs, impacts, None, postings.max_doc,
                    postings.doc_count, int(impacts.sum(dtype=np.int64)), postings.docids)


def query(args) -> None:
    sys.path.insert(0, str(ROOT))
    from weir.core.trec import read_topics
    from weir.indexer.index_dir import Index
    from weir.ranker.retrievers.bm25 import BM25
    from weir.ranker.retrievers.inverted import ImpactScores, InvertedIndex

    out = cache_dir(args.docs)
    topics = read_topics(out / "queries.tsv")[:args.queries]
    start = time.perf_counter()
    bm25 = BM25(Index(out / "index"))
    engine = bm25.engine
    weights = bm25.weights([q.text for q in topics])
    engine.top(weights[0], 10)  # the block maxima, derived once
    opened = time.perf_counter() - start
    texts = {id(w): q.text for q, w in zip(topics, weights)}
    engines = {}
    if args.impact:  # one weight per unique query term, as the published DeepImpact
        engine = InvertedIndex(ImpactScores(impact_postings(engine.postings)))
        weights = [dict.fromkeys(w, 1) for w in weights]
    else:
        print(f"{args.docs:,} passages, {len(topics)} queries, index opened and block maxima derived in {opened:.1f} s")
    engines.update({"weir": lambda w, k: engine.top(w, k, exhaustive=False),
                    "weir exhaustive": lambda w, k: engine.top(w, k, exhaustive=True)})
    if args.pisa and not args.impact:
        from _pisa import Pisa

        pisa = Pisa(engine.postings, Index(out / "index").component_path("bm25"), out / "pisa")
        for algorithm in args.pisa:
            engines[f"PISA {algorithm}"] = lambda w, k, algorithm=algorithm: pisa.search(w, k, algorithm)
    if not args.no_lucene and not args.impact:
        from weir.ranker.retrievers.lucene import LuceneBM25Searcher

        lucene = LuceneBM25Searcher(Index(out / "index").component_path("bm25"))
        engines["Lucene"] = lambda w, k: lucene.search(texts[id(w)], k)
    for k in args.k:
        times = {name: [] for name in engines}
        answers = {name: [] for name in engines}
        for w in weights:  # engines take turns query by query
            for name, run in engines.items():
                t0 = time.perf_counter()
                answers[name].append(run(w, k))
                times[name].append((time.perf_counter() - t0) * 1000)
        exact = sum(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
                    for a, b in zip(answers["weir"], answers["weir exhaustive"]))
        line = [f"{'impacts' if args.impact else 'bm25'} k={k}: pruned = exhaustive on {exact}/{len(weights)}"]
        if "Lucene" in answers:
            same = sum([d for d, _ in ref[:10]] == engine.docids_of(a[0][:10])
                       for a, ref in zip(answers["weir"], answers["Lucene"]))
            line.append(f"top 10 = Lucene's on {same}/{len(weights)}")
        for name in (n for n in answers if n.startswith("PISA")):  # its own mean length and tie order
            shared = [len({d for d, _ in ref[:10]} & set(engine.docids_of(a[0][:10]))) / max(1, len(ref[:10]))
                      for a, ref in zip(answers["weir"], answers[name])]
            line.append(f"{name}'s top 10 shares {statistics.mean(shared):.1%} of weir's")
        print("; ".join(line))
        for name, values in times.items():
            print(f"  {name:16s} median {statistics.median(values):7.2f} ms  p99 {percentile(values, 99):7.2f} ms")


def threads(args) -> None:
    """Queries a second, one thread against two, the same queries (``BM25.retrieve``: analysis, the kernel, the run's
    arrays), in alternating rounds: the kernel releases the GIL, so the second thread should nearly double it."""
    import concurrent.futures as cf

    sys.path.insert(0, str(ROOT))
    from weir.core.trec import read_topics
    from weir.indexer.index_dir import Index
    from weir.ranker.retrievers.bm25 import BM25

    out = cache_dir(args.docs)
    topics = read_topics(out / "queries.tsv")[:args.queries]
    bm25 = BM25(Index(out / "index"))
    bm25.retrieve(topics[:1], 10)
    batches = [topics[i:i + 8] for i in range(0, len(topics), 8)]  # the service's micro-batches are small too
    for k in args.k:
        rates = {1: [], 2: []}
        for _ in range(args.rounds):
            for n in (1, 2):
                with cf.ThreadPoolExecutor(n) as pool:
                    start = time.perf_counter()
                    list(pool.map(lambda batch: bm25.retrieve(batch, k), batches))
                    rates[n].append(len(topics) / (time.perf_counter() - start))
        one, two = statistics.median(rates[1]), statistics.median(rates[2])
        print(f"k={k}: 1 thread {one:,.0f} queries/s, 2 threads {two:,.0f} ({two / one:.2f}x), "
              f"medians of {args.rounds} rounds")


def _memory_mib(pid: int) -> str:
    """A process's resident memory: all of it, and its anonymous part (what the page cache cannot share)."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile"):
                fields[name] = int(value.split()[0]) / 1024
    return (f"RSS {fields['VmRSS']:,.0f} MiB (anonymous {fields['RssAnon']:,.0f}, file-backed {fields['RssFile']:,.0f}:"
            f" the JVM, Python, and the page cache's mapped postings)")


def serve(args) -> None:
    """`weir serve` over the index (bm25 only, checksums not verified: the start-up check reads every byte), one gRPC
    bm25 call, the server's RSS, and closed-loop callers (1, then 2) for ``--seconds`` each."""
    from _load import Served, drive

    sys.path.insert(0, str(ROOT))
    from weir.core.trec import read_topics
    from weir.service.client import SearchClient

    out = cache_dir(args.docs)
    start = time.perf_counter()
    served = Served(str(out / "index"), "--pipelines bm25 --no-verify --workers 2")
    ready = time.perf_counter() - start
    try:
        topics = [q.text for q in read_topics(out / "queries.tsv")][:args.queries]
        with SearchClient(f"127.0.0.1:{served.port}") as client:
            hits = client.search(topics[0], pipeline="bm25", k=10).hits
        print(f"serving {args.docs:,} passages after {ready:.1f} s; bm25 k=10 for {topics[0]!r}: "
              f"{[h.doc_id for h in hits][:3]}...; server {_memory_mib(served.process.pid)}")
        for k in args.k:
            for callers in (1, 2):
                f = drive(served.port, topics, "bm25", callers, args.seconds, k=k, depth=k, timeout=10.0)
                print(f"  k={k} {callers} caller(s): {f['qps']:,.0f} OK/s, p50 {f['p50']:.2f} ms, p99 {f['p99']:.2f} ms,"
                      f" codes {f['codes']}")
        print(f"server after: {_memory_mib(served.process.pid)}")
    finally:
        served.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["generate", "build", "query", "threads", "serve"])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=float, default=0.5, help="share of words kept from the seed passage")
    ap.add_argument("--tail", type=float, default=0.06, help="share of words from the made-up tail")
    ap.add_argument("--zipf", type=float, default=1.19, help="the tail's Zipf exponent")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--components", default="bm25")
    ap.add_argument("--k", type=lambda s: [int(x) for x in s.split(",")], default=[10, 1000])
    ap.add_argument("--no-lucene", action="store_true")
    ap.add_argument("--pisa", type=lambda s: s.split(","), default=[],
                    help="query, BM25 only: PISA's algorithms to time beside (e.g. block_max_maxscore,maxscore; "
                    "bench/_pisa.py)")
    ap.add_argument("--impact", action="store_true", help="query: DeepImpact-like impacts over the same postings")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    {"generate": generate, "build": build, "query": query, "threads": threads, "serve": serve}[args.command](args)


if __name__ == "__main__":
    main()
