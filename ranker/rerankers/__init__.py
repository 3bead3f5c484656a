"""Second-stage rerankers, one module per backend (``ltr``, ``attention``, ``crossencoder``), and what they share:
putting new scores on the top ``depth`` hits of a run without dropping or inventing a candidate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from weir.types import Query, Run, replace_hit


def apply_scores(queries: Sequence[Query], run: Run, depth: int, scores: Mapping[str, Sequence[float]],
                 name: str) -> Run:
    """A new run: each query's top ``depth`` hits rescored with ``scores[qid]`` (one per hit, in run order) and
    sorted (ties by docid), recorded in ``stage_scores[name]``; the hits below ``depth`` follow in their old order with
    scores below the lowest new one. Queries of ``run`` that are not in ``queries`` are passed on unchanged."""
    out = Run(timings=run.timings)
    for qid, hits in run.items():
        head, tail = hits[:depth], hits[depth:]
        new = scores.get(qid)
        if new is None or not head:
            out[qid] = [replace_hit(h) for h in hits]
            continue
        if len(new) != len(head):
            raise ValueError(f"{name}: {len(new)} scores for {len(head)} candidates of query {qid}")
        rescored = []
        for h, s in zip(head, new):
            h = replace_hit(h, score=float(s))
            h.stage_scores[name] = float(s)
            rescored.append(h)
        rescored.sort(key=lambda h: (-h.score, h.doc_id))
        floor = rescored[-1].score
        rest = [replace_hit(h, score=floor - 1.0 - i) for i, h in enumerate(tail)]
        merged = rescored + rest
        for rank, h in enumerate(merged, start=1):
            h.rank = rank
        out[qid] = merged
    return out
