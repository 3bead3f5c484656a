"""Fusion settings tuned on a training split: `weir tune fusion` for ``hybrid``, and the ``deepimpact+bm25`` weight
that `weir train deepimpact` records in its model card.

:func:`tune_fusion` runs each first stage once over the training topics (to the fusion depth), then fuses the
stored runs for every point of a grid (method x weight of each stage x RRF k, :func:`grid_search`) and keeps the
best by the chosen measure (ties: the earlier grid point, i.e. the simpler setting). The result is written to
``<index>/tuning/fusion.json`` with the topics and qrels it was tuned on (path, sha256, count) and the best grid
points, so that a figure measured later can be checked for not having been tuned on its own test queries; the
``hybrid`` pipeline reads it (:func:`weir.ranker.retrievers.hybrid.hybrid_settings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from weir.evaluation.measures import evaluate
from weir.ranker.options import PipelineOptions
from weir.ranker.retrievers.hybrid import DEFAULT_DEPTH, DEFAULT_STAGES, RRF_K, check_method, normalize, tuning_path
from weir.core.provenance import sha256_file, utc_now, write_json
from weir.core.trec import read_qrels, read_topics
from weir.core.types import InputError, Run
from weir.training.common import check_training_topics

WEIGHT_GRID = tuple(round(i / 20, 2) for i in range(21))  # weight of the last stage; the others share the rest
RRF_K_GRID = (10, 20, 40, 60, 100)


def _weight_vectors(n: int) -> list[list[float]]:
    """Weights over ``n`` stages: the last stage gets w from the grid, the others share 1 - w equally."""
    return [[round((1 - w) / (n - 1), 4)] * (n - 1) + [w] for w in WEIGHT_GRID]


def _cutoff(measure: str, depth: int) -> int:
    """How deep a fused ranking must be for ``measure`` (``nDCG@10`` -> 10; no cutoff -> ``depth``)."""
    _, _, tail = measure.partition("@")
    return int(tail) if tail.isdigit() else depth


class FusionGrid:
    """The stage runs of a set of queries as arrays, so that a grid of fusions is evaluated quickly: per query the
    union of candidates sorted by docid (ties then break by docid, as :func:`weir.ranker.retrievers.hybrid.fuse_runs`
    does) and, per method, a (stages x candidates) matrix that a weight vector turns into fused scores."""

    def __init__(self, runs: Sequence[Run], qids: Sequence[str]):
        import numpy as np

        self.queries = []
        for qid in qids:
            lists = [run.get(qid, []) for run in runs]
            docs = sorted({h.doc_id for hits in lists for h in hits})
            pos = {d: i for i, d in enumerate(docs)}
            ranks = np.zeros((len(lists), len(docs)))  # 0 = not retrieved by that stage
            normed = {m: np.zeros((len(lists), len(docs))) for m in ("minmax", "zscore")}
            for i, hits in enumerate(lists):
                for rank, h in enumerate(hits, start=1):
                    ranks[i, pos[h.doc_id]] = rank
                for method, matrix in normed.items():
                    values = normalize({h.doc_id: h.score for h in hits}, method)
                    matrix[i, :] = min(values.values()) if values else 0.0
                    for d, v in values.items():
                        matrix[i, pos[d]] = v
            self.queries.append((qid, np.array(docs, dtype=object), ranks, normed))

    def fuse(self, method: str, weights: Sequence[float], k: int = RRF_K, depth: int = 10) -> dict[str, dict[str, float]]:
        import numpy as np

        w = np.asarray(weights, dtype=float)[:, None]
        out = {}
        for qid, docs, ranks, normed in self.queries:
            if method == "rrf":
                matrix = np.where(ranks > 0, 1.0 / (k + ranks), 0.0)
            else:
                matrix = normed[method]
            fused = (w * matrix).sum(0)
            top = np.argsort(-fused, kind="stable")[:depth]
            out[qid] = {docs[i]: float(fused[i]) for i in top}
        return out


def grid_search(runs: Sequence[Run], qrels: dict, qids: Sequence[str], *, measure: str = "nDCG@10",
                methods: Sequence[str] = ("rrf", "minmax", "zscore"), depth: int = DEFAULT_DEPTH) -> list[dict]:
    """Every grid point (method x weights x RRF k) of fusing ``runs`` (one per stage, in order) over ``qids``, with
    its ``measure`` on ``qrels`` (unrounded), in grid order."""
    grid = FusionGrid(runs, qids)
    cutoff = min(depth, _cutoff(measure, depth))
    results = []
    for method in methods:
        method = check_method(method)
        for weights in _weight_vectors(len(runs)):
            if not any(weights):
                continue
            for k in (RRF_K_GRID if method == "rrf" else (RRF_K,)):
                value = evaluate(grid.fuse(method, weights, k, cutoff), qrels, [measure])[measure]
                results.append({"method": method, "weights": weights, "rrf_k": k, measure: value})
    return results


def tune_fusion(index, topics_path: str, qrels_path: str, *, stages: Sequence[str] = DEFAULT_STAGES,
                measure: str = "nDCG@10", depth: int = DEFAULT_DEPTH, options: PipelineOptions | None = None,
                methods: Sequence[str] = ("rrf", "minmax", "zscore"), allow_test_topics: bool = False,
                write: bool = True) -> dict:
    """Grid-search fusion settings on training topics; write ``tuning/fusion.json`` into the index; return it."""
    from weir.ranker import registry

    check_training_topics(index, topics_path, allow_test_topics)
    stages = list(stages)
    if len(stages) < 2:
        raise InputError("fusion needs two or more stages")
    for name in stages:
        if name not in registry.FUSABLE:
            raise InputError(f"cannot fuse {name!r}; fusable first stages: {', '.join(registry.FUSABLE)}")
    topics = read_topics(topics_path)
    qrels = read_qrels(qrels_path)
    judged = [q for q in topics if q.id in qrels]
    if not judged:
        raise InputError(f"no topic of {topics_path} is judged in {qrels_path}: wrong qrels?")
    runs = [registry.build_stage(name, index, options).retrieve(judged, depth) for name in stages]
    results = [{**r, measure: round(r[measure], 5)}
               for r in grid_search(runs, qrels, [q.id for q in judged], measure=measure, methods=methods, depth=depth)]
    singles = {name: round(evaluate(run, qrels, [measure])[measure], 5) for name, run in zip(stages, runs)}
    best = max(results, key=lambda r: r[measure])  # max keeps the first of equal values
    by_method = {m: max((r for r in results if r["method"] == m), key=lambda r: r[measure])
                 for m in dict.fromkeys(r["method"] for r in results)}
    record = {
        "stages": stages,
        "best": best,
        "depth": depth,
        "measure": measure,
        "best_by_method": by_method,
        "single_stages": singles,
        "tuned_on": {"topics": str(Path(topics_path).resolve()), "topics_sha256": sha256_file(topics_path),
                     "qrels": str(Path(qrels_path).resolve()), "qrels_sha256": sha256_file(qrels_path),
                     "queries": len(judged)},
        "grid": {"weights of the last stage": list(WEIGHT_GRID), "rrf_k": list(RRF_K_GRID), "methods": list(methods),
                 "points": len(results)},
        "created": utc_now(),
    }
    if write:
        path = tuning_path(index)
        path.parent.mkdir(exist_ok=True)
        write_json(path, record, indent=2)
    return record


def interpolation_weight(first: Run, second: Run, qrels: dict, qids: Sequence[str], names: Sequence[str],
                         depth: int = 100) -> dict[str, Any]:
    """The min-max interpolation of two runs best on ``qids`` by nDCG@10, as `weir train deepimpact` records it for
    ``deepimpact+bm25``: the weight ``w`` of ``first`` (``1 - w`` of ``second``) on the grid 0, 0.05, ..., 1; ties go
    to the weight nearer 0.5, then the larger."""
    judged = {q: qrels[q] for q in qids}
    results = grid_search([second, first], judged, list(qids), methods=("minmax",), depth=depth)
    grid = [(r["nDCG@10"], r["weights"][1]) for r in results]
    value, w = max(grid, key=lambda x: (x[0], -abs(x[1] - 0.5), x[1]))
    return {"method": "minmax", "weights": [w, round(1 - w, 2)], "stages": list(names),
            "validation_nDCG@10": value, "grid": {str(g): round(v, 4) for v, g in grid},
            "tuned_on": "validation part of the training queries"}
