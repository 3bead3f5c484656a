"""The demo's side-by-side query: one topic asked of the running server with a first stage and with a reranking
pipeline, shown as two columns (rank, score, title; relevant hits marked from the qrels).

The topic is chosen from the experiment's runs: among the topics where the reranking pipeline puts a relevant
document first and the first stage does not, the one with the largest gain in nDCG@10 (ties: the first in the
topics file), so the difference is there to be seen.

Usage: python scripts/demo_compare.py --server HOST:PORT --experiment DIR --topics T --qrels Q
       [--first bm25] [--reranked hybrid>>ltr] [-k 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def choose(record: dict, first: str, reranked: str, qrels: dict, topics: list) -> tuple[str, str]:
    """(qid, text) of the topic where ``reranked`` gains most over ``first`` with a relevant document at rank 1."""
    from weir.core.types import Run

    systems = {s["label"]: s for s in record["systems"]}
    runs = {name: Run.read_trec(systems[name]["run_file"]) for name in (first, reranked)}
    gains = []
    for q in topics:
        relevant = {d for d, r in qrels.get(q.id, {}).items() if r > 0}
        a, b = runs[first].get(q.id, []), runs[reranked].get(q.id, [])
        if not relevant or not a or not b or a[0].doc_id in relevant or b[0].doc_id not in relevant:
            continue
        gains.append((-(_ndcg(b, relevant) - _ndcg(a, relevant)), len(gains), q))
    if not gains:
        return topics[0].id, topics[0].text
    q = min(gains)[2]
    return q.id, q.text


def _ndcg(hits, relevant: set[str], k: int = 10) -> float:
    import math

    dcg = sum(1 / math.log2(i + 2) for i, h in enumerate(hits[:k]) if h.doc_id in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return dcg / ideal if ideal else 0.0


def column(response, relevant: set[str], width: int) -> list[str]:
    lines = []
    for h in response.hits:
        mark = "✓" if h.doc_id in relevant else " "
        head = f"{h.rank:>2} {mark} {h.score:7.3f}  "
        title = textwrap.shorten((h.title or h.text or "").replace("\n", " "), width=width - len(head), placeholder="…")
        lines.append(head + title)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--experiment", required=True, help="the `weir experiment` output directory")
    ap.add_argument("--topics", required=True)
    ap.add_argument("--qrels", required=True)
    ap.add_argument("--first", default="bm25")
    ap.add_argument("--reranked", default="hybrid>>ltr")
    ap.add_argument("-k", type=int, default=5)
    args = ap.parse_args()

    from weir.service.client import SearchClient
    from weir.core.trec import read_qrels, read_topics

    record = json.loads((Path(args.experiment) / "results.json").read_text(encoding="utf-8"))
    qrels, topics = read_qrels(args.qrels), read_topics(args.topics)
    qid, text = choose(record, args.first, args.reranked, qrels, topics)
    relevant = {d for d, r in qrels.get(qid, {}).items() if r > 0}
    with SearchClient(args.server, timeout=120) as client:
        answers = [client.search(text, k=args.k, pipeline=p, include_text=True) for p in (args.first, args.reranked)]
    width = 58
    print(f'query {qid}: "{text}"  (✓ = judged relevant in the qrels; {len(relevant)} relevant)')
    print(f"{args.first:<{width}}   {args.reranked}")
    left, right = (column(a, relevant, width) for a in answers)
    for a, b in zip(left + [""] * (len(right) - len(left)), right + [""] * (len(left) - len(right))):
        print(f"{a:<{width}}   {b}")
    ms = [sum(t.milliseconds for t in a.timings) for a in answers]
    print(f"{args.first}: {ms[0]:.1f} ms; {args.reranked}: {ms[1]:.1f} ms ("
          + ", ".join(f"{t.stage} {t.milliseconds:.1f}" for t in answers[1].timings) + ")")
    found = [sum(h.doc_id in relevant for h in a.hits) for a in answers]
    print(f"relevant in the top {args.k}: {args.first} {found[0]}, {args.reranked} {found[1]}; the reranked pipeline's "
          f"first hit is {'relevant' if answers[1].hits and answers[1].hits[0].doc_id in relevant else 'not relevant'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
