"""Which passage input the late-interaction attention reranker can read from the index (issue 52, item 2): nDCG@10 of
the shipped ``attention`` model reranking a first-stage run, with its passage states computed from

- ``raw``: the passage's text cut at the model's ``max_length`` word pieces (what the reranker read before issue 52);
- ``raw 256``: the passage's text cut at 256 word pieces (the document pass's first window with the ``text`` input:
  what the reranker reads now, stored in the index as int8, ``raw 256 int8``);
- ``window``: the document pass's first window (the passage's words, punctuation dropped, up to the term-weighting
  backbone's 256 word pieces, special tokens included), the states the index can store at no extra forward;

the window's stored at float16 and at int8 with a scale per vector (symmetric, the vector's largest magnitude over 127), and
paired t-tests against ``raw``. Usage::

    python research/attention_states.py ../shared/collections/beir-scifact \
        ../shared/reference-runs/e6bc371/sci-bm25.top100.trec.gz --depth 20
    python research/attention_states.py ../shared/collections/msmarco-passage-trec-dl-pool RUN --depth 100 --min-rel 2
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from weir.core.trec import read_qrels, read_topics  # noqa: E402
from weir.evaluation.measures import evaluate  # noqa: E402
from weir.evaluation.significance import paired_test  # noqa: E402


def read_run(path: Path, depth: int) -> dict[str, list[str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    ranked: dict[str, list[tuple[int, str]]] = {}
    with opener(path, "rt") as f:
        for line in f:
            qid, _, doc, rank, *_ = line.split()
            ranked.setdefault(qid, []).append((int(rank), doc))
    return {q: [d for _, d in sorted(v)[:depth]] for q, v in ranked.items()}


def corpus_texts(collection: Path, wanted: set[str]) -> dict[str, str]:
    from weir.indexer.collections import Collection

    return {d.id: d.contents for d in Collection.open(collection).corpus() if d.id in wanted}


def int8(states: torch.Tensor) -> torch.Tensor:
    scale = states.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 127
    return (torch.round(states / scale).clamp(-127, 127) * scale)


def score(model, topics, run: dict[str, list[str]], variants: dict[str, dict]) -> dict[str, dict]:
    """Per variant of the passages' states, the shipped model's score of every candidate of every query."""
    from weir.ranker.rerankers.backbone import QUERY_MAX_TOKENS
    from weir.ranker.rerankers.relevance_attention import pad_states

    head = [h for _, h in model.heads]
    runs: dict[str, dict] = {name: {} for name in variants}
    with torch.inference_mode():
        for q in topics:
            cands = run.get(q.id, [])
            if not cands:
                continue
            qs = model.encode_states([q.text], QUERY_MAX_TOKENS + 2, batch_size=1)[0]
            for name, states in variants.items():
                qx, qv, qw = pad_states([qs] * len(cands))
                px, pv, pw = pad_states([states[d] for d in cands])
                log_mass = model.relevance(qx, qv, px, pv, pw)[:, head].float().numpy()
                m = qw.numpy().astype(bool)
                scores = [float(log_mass[j][:, m[j]].mean(-1) @ model.weights + model.bias) for j in range(len(cands))]
                runs[name][q.id] = dict(zip(cands, scores))
    return runs


def projected(states: dict, dims: int, sample: int = 200_000, seed: int = 0) -> dict:
    """The states as a store of ``dims`` principal components would give them back: projected on the top ``dims``
    principal directions of a sample of the states (uncentred: the score is a dot product), int8 per state, and
    mapped back to the full width (what folding the projection onto the query side computes)."""
    rows = torch.cat([s.float() for s in states.values()])
    pick = torch.from_numpy(np.random.default_rng(seed).choice(len(rows), min(sample, len(rows)), replace=False))
    _, _, v = torch.linalg.svd(rows[pick], full_matrices=False)
    basis = v[:dims].T  # (H, dims)
    return {d: int8(s.float() @ basis) @ basis.T for d, s in states.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("collection", type=Path)
    p.add_argument("run", type=Path)
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--min-rel", type=int, default=1)
    p.add_argument("--queries", default="queries.tsv")
    p.add_argument("--pca", type=lambda v: [int(x) for x in v.split(",") if x], default=[],
                   help="also states projected on this many principal directions, e.g. 128,64")
    args = p.parse_args()

    from weir.indexer.weighting.backbone import Backbone
    from weir.ranker.rerankers.attention import AttentionModel
    from weir.core.runtime import shipped_model

    topics = read_topics(args.collection / args.queries)
    qrels = read_qrels(args.collection / "qrels.txt")
    topics = [q for q in topics if q.id in qrels]
    run = read_run(args.run, args.depth)
    wanted = {d for q in topics for d in run.get(q.id, [])}
    texts = corpus_texts(args.collection, wanted)
    model = AttentionModel(shipped_model("attention"))
    backbone = Backbone(model.settings["base_model"])
    docs = sorted(wanted)

    started = time.perf_counter()
    raw = dict(zip(docs, model.encode_states([texts[d] for d in docs], model.max_length)))
    t_raw = time.perf_counter() - started
    started = time.perf_counter()
    window = dict(zip(docs, [p.states for p in backbone.run([texts[d] for d in docs], terms=False, states=True)]))
    t_window = time.perf_counter() - started
    lengths = {"raw": np.mean([len(raw[d]) for d in docs]), "window": np.mean([len(window[d]) for d in docs])}
    print(f"{len(docs)} passages: raw {t_raw:.1f} s, mean {lengths['raw']:.1f} states; window {t_window:.1f} s, "
          f"mean {lengths['window']:.1f} states", file=sys.stderr)

    variants = {"raw": raw, "window fp16": {d: torch.from_numpy(np.asarray(s)).half() for d, s in window.items()},
                "window int8": {d: int8(torch.from_numpy(np.asarray(s, dtype=np.float32))) for d, s in window.items()}}
    variants["raw fp16"] = {d: s.half() for d, s in raw.items()}
    variants["raw 256"] = dict(zip(docs, model.encode_states([texts[d] for d in docs], backbone.max_length)))
    variants["raw 256 int8"] = {d: int8(s.float()) for d, s in variants["raw 256"].items()}
    for dims in args.pca:  # stored as int8 codes of a projection on the states' top principal directions
        variants[f"raw 256 pca{dims} int8"] = projected(variants["raw 256"], dims)
    runs = score(model, topics, run, variants)
    per_query = {}
    for name, r in runs.items():
        per_query[name] = evaluate(r, qrels, ["nDCG@10"], min_rel=args.min_rel, per_query=True)[1]["nDCG@10"]
    base = per_query["raw"]
    print(f"| states | nDCG@10 | vs raw | p (paired t) |\n|---|---:|---:|---:|")
    for name, pq in per_query.items():
        ids = sorted(set(base) & set(pq))
        a, b = [base[i] for i in ids], [pq[i] for i in ids]
        _, pvalue = paired_test(b, a)
        print(f"| {name} | {np.mean(b):.4f} | {np.mean(b) - np.mean(a):+.4f} | {pvalue:.3f} |")


if __name__ == "__main__":
    main()
