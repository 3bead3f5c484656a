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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--index", required=True)
    p.add_argument("--topics", required=True)
    p.add_argument("--ltr-model", required=True)
    p.add_argument("--attention-model", default=None, help="default: models/attention")
    p.add_argument("--queries", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3, help="alternating timed rounds of each (best kept)")
    p.add_argument("--depths", default="20,50,100", help="'' to skip the latency section")
    args = p.parse_args()


    import torch

    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.ranker.options import PipelineOptions
    from weir.ranker.rerankers.attention import AttentionReranker
    from weir.ranker.rerankers.backbone import mean_over_query
    from weir.ranker.rerankers.relevance_attention import pad_states
    from weir.core.runtime import shipped_model
    from weir.core.trec import read_topics

    index = Index(args.index)
    topics = read_topics(args.topics)[: args.queries]
    model = args.attention_model or str(shipped_model("attention"))
    bm25 = registry.build("bm25", index)
    run = bm25(topics, k=100)
    att = AttentionReranker(index, model, depth=100, device="cpu", batch_size=32)
    pairs = [(q.text, h.doc_id) for q in topics for h in run[q.id]]
    docs = index.documents([d for _, d in pairs])
    texts = [docs[d].contents for _, d in pairs]
    tok, mdl = att.model.tokenizer, att.model.model

    late = att.model.late

    def ours_once() -> float:
        att._na.clear()  # a fair comparison: no calibration pass or passage states cached
        if late:
            att.model.passage_states._items.clear()
        start = time.perf_counter()
        att.rerank(topics, run, 100)
        return time.perf_counter() - start

    def plain_late_once() -> float:
        # the late score computed plainly: per query, its passages through HF padded to max_length, then the layer
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

    def plain_once() -> float:
        # plain loop: one query's 100 pairs per batch, unsorted, calibration pass recomputed each time
        start = time.perf_counter()
        with torch.inference_mode():
            for qi, q in enumerate(topics):
                ps = texts[qi * 100:(qi + 1) * 100]
                for qq in (q.text, "N/A"):
                    enc = tok([qq] * len(ps), ps, truncation=True, max_length=128, padding="max_length",
                              return_tensors="pt")
                    mdl(**enc, output_attentions=True)
        return time.perf_counter() - start

    # warm up both on the same pairs (first forwards of each batch shape are slow), then alternate and keep the best
    # of each: on a shared, loaded machine a single run of one after the other measures the load, not the code
    plains = {"plain HF loop, late score": plain_late_once} if late else {}
    plains["plain HF loop, joint pairs with attentions + N/A pass"] = plain_once
    ours_once(), [f() for f in plains.values()]
    rounds = [(ours_once(), *[f() for f in plains.values()]) for _ in range(args.rounds)]
    best = [len(pairs) / min(r[i] for r in rounds) for i in range(len(plains) + 1)]
    print(f"attention reranker ({'late' if late else 'joint'} interaction, {model}): {best[0]:.1f} pairs/s; "
          + "; ".join(f"{name}: {v:.1f} pairs/s" for name, v in zip(plains, best[1:]))
          + f" (best of {args.rounds} alternating rounds after a warm-up, {len(pairs)} pairs, "
          f"{torch.get_num_threads()} torch threads)")
    for spec in ("hybrid>>ltr", "bm25>>attention") if args.depths else ():
        if "hybrid" in spec and "dense" not in index.components:
            continue
        pipe = registry.build(spec, index, PipelineOptions.from_mapping({"ltr_model": args.ltr_model,
                                                                         "attention_model": model}))
        pipe(topics[:1], k=10, depth=20)  # warm up
        for depth in (int(d) for d in args.depths.split(",")):
            times = []
            for q in topics:
                t0 = time.perf_counter()
                pipe([q], k=10, depth=depth)
                times.append(time.perf_counter() - t0)
            print(f"{spec} depth {depth}: {1000 * sum(times) / len(times):.0f} ms/query (mean of {len(times)})")


if __name__ == "__main__":
    main()
