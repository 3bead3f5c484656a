"""Reranker throughput and latency on this machine (prints figures; nothing asserted).

- attention reranker pairs/second (batched across queries, sorted by length; each passage encoded once) vs plain
  Hugging Face loops over the same pairs, one query's batch at a time, padded to max_length, nothing cached: for a
  late-interaction model (the default), the same score computed that way; and, for reference, the joint form (query
  and passage through every layer with output_attentions, plus the N/A pass);
- LTR feature extraction and scoring per query, and end-to-end latency of bm25>>attention / hybrid>>ltr at
  several depths (one query at a time, as the service sees them).

    .venv/bin/python bench/bench_rerank.py --index indexes/dl19 --topics QUERIES --ltr-model DIR [--attention-model DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--index", required=True)
    p.add_argument("--topics", required=True)
    p.add_argument("--ltr-model", required=True)
    p.add_argument("--attention-model", default=None, help="default: models/attention")
    p.add_argument("--queries", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3, help="alternating timed rounds of each (best kept)")
    p.add_argument("--depths", default="20,50,100", help="'' to skip the latency section")
    return p.parse_args()


def time_ours(att, topics, run) -> float:
    """Seconds the attention reranker takes over ``run``'s top 100, nothing cached."""
    att.clear_caches()  # a fair comparison: no calibration pass or passage states cached
    start = time.perf_counter()
    att.rerank(topics, run, 100)
    return time.perf_counter() - start


def time_plain_late(att, topics, texts: list[str]) -> float:
    """Seconds the late score takes computed plainly: per query, its passages through HF padded to max_length, then
    the layer."""
    import torch

    from weir.ranker.rerankers.backbone import mean_over_query
    from weir.ranker.rerankers.relevance_attention import pad_states

    tok, mdl = att.model.tokenizer, att.model.model
    start = time.perf_counter()
    rel = att.model.relevance
    with torch.inference_mode():
        for qi, q in enumerate(topics):
            ps = texts[qi * 100:(qi + 1) * 100]
            qenc = tok([q.text], truncation=True, max_length=34, return_tensors="pt")
            qs = torch.nn.functional.normalize(mdl(**qenc).last_hidden_state[0], dim=-1)
            penc = tok(ps, truncation=True, max_length=att.model.max_length, padding="max_length",
                       return_tensors="pt")
            hp = torch.nn.functional.normalize(mdl(**penc).last_hidden_state, dim=-1)
            states = [hp[j, :int(penc["attention_mask"][j].sum())] for j in range(len(ps))]
            qx, qv, qw = pad_states([qs] * len(ps))
            px, pv, pw = pad_states(states)
            mean_over_query(rel(qx, qv, px, pv, pw), qw)
    return time.perf_counter() - start


def time_plain_joint(att, topics, texts: list[str]) -> float:
    """Seconds a plain loop takes: one query's 100 pairs per batch, unsorted, calibration pass recomputed each
    time."""
    import torch

    tok, mdl = att.model.tokenizer, att.model.model
    start = time.perf_counter()
    with torch.inference_mode():
        for qi, q in enumerate(topics):
            ps = texts[qi * 100:(qi + 1) * 100]
            for qq in (q.text, "N/A"):
                enc = tok([qq] * len(ps), ps, truncation=True, max_length=128, padding="max_length",
                          return_tensors="pt")
                mdl(**enc, output_attentions=True)
    return time.perf_counter() - start


def bench_throughput(att, model: str, topics, run, texts: list[str], rounds: int) -> None:
    """Print the reranker's pairs/second beside the plain loops'."""
    import torch

    # warm up both on the same pairs (first forwards of each batch shape are slow), then alternate and keep the best
    # of each: on a shared, loaded machine a single run of one after the other measures the load, not the code
    late = att.model.late
    plains = {"plain HF loop, late score": time_plain_late} if late else {}
    plains["plain HF loop, joint pairs with attentions + N/A pass"] = time_plain_joint
    time_ours(att, topics, run), [f(att, topics, texts) for f in plains.values()]
    timed = [(time_ours(att, topics, run), *[f(att, topics, texts) for f in plains.values()]) for _ in range(rounds)]
    best = [len(texts) / min(r[i] for r in timed) for i in range(len(plains) + 1)]
    print(f"attention reranker ({'late' if late else 'joint'} interaction, {model}): {best[0]:.1f} pairs/s; "
          + "; ".join(f"{name}: {v:.1f} pairs/s" for name, v in zip(plains, best[1:]))
          + f" (best of {rounds} alternating rounds after a warm-up, {len(texts)} pairs, "
          f"{torch.get_num_threads()} torch threads)")


def bench_latency(index, topics, ltr_model: str, attention_model: str, depths: str) -> None:
    """Print the end-to-end latency of bm25>>attention and hybrid>>ltr per depth, one query at a time."""
    from weir.ranker import registry
    from weir.ranker.options import PipelineOptions

    for spec in ("hybrid>>ltr", "bm25>>attention") if depths else ():
        if "hybrid" in spec and "dense" not in index.components:
            continue
        pipe = registry.build(spec, index, PipelineOptions.from_mapping({"ltr_model": ltr_model,
                                                                         "attention_model": attention_model}))
        pipe(topics[:1], k=10, depth=20)  # warm up
        for depth in (int(d) for d in depths.split(",")):
            times = []
            for q in topics:
                t0 = time.perf_counter()
                pipe([q], k=10, depth=depth)
                times.append(time.perf_counter() - t0)
            print(f"{spec} depth {depth}: {1000 * sum(times) / len(times):.0f} ms/query (mean of {len(times)})")


def main() -> None:
    args = parse_args()

    from weir.core.runtime import shipped_model
    from weir.core.trec import read_topics
    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.ranker.rerankers.attention import AttentionReranker

    index = Index(args.index)
    topics = read_topics(args.topics)[: args.queries]
    model = args.attention_model or str(shipped_model("attention"))
    run = registry.build("bm25", index)(topics, k=100)
    att = AttentionReranker(index, model, depth=100, device="cpu", batch_size=32)
    pairs = [(q.text, h.doc_id) for q in topics for h in run[q.id]]
    docs = index.documents([d for _, d in pairs])
    texts = [docs[d].contents for _, d in pairs]
    bench_throughput(att, model, topics, run, texts, args.rounds)
    bench_latency(index, topics, args.ltr_model, model, args.depths)


if __name__ == "__main__":
    main()
