"""Fusion settings: tuned on a training split (`weir tune fusion`), stored in the index directory, used by ``hybrid``.

:func:`tune_fusion` runs each first stage once over the training topics (to the fusion depth), then fuses the
stored runs for every point of a grid (method x weight of each stage x RRF k) and keeps the best by the chosen
measure (ties: the earlier grid point, i.e. the simpler setting). The result is written to
``<index>/tuning/fusion.json`` with the topics and qrels it was tuned on (path, sha256, count) and the best grid
points, so that a figure measured later can be checked for not having been tuned on its own test queries.

:func:`hybrid_settings` resolves what the ``hybrid`` pipeline uses: explicit options, else the tuned file when its
stages match, else the defaults below (chosen on SciFact's training split; see the module's tests and the note).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ranker.fusion import DEFAULT_DEPTH, RRF_K, check_method
from weir.checksums import sha256_file
from weir.types import InputError

TUNING_FILE = Path("tuning") / "fusion.json"
DEFAULT_STAGES = ("bm25", "dense")
DEFAULT_METHOD = "zscore"
DEFAULT_WEIGHTS = None  # equal weights
WEIGHT_GRID = tuple(round(i / 20, 2) for i in range(21))  # weight of the last stage; the others share the rest
RRF_K_GRID = (10, 20, 40, 60, 100)


def parse_weights(text: str | Sequence[float] | None, stages: Sequence[str]) -> list[float] | None:
    """``"0.3,0.7"`` (one per stage, in order) or ``"bm25=0.3,dense=0.7"`` (unnamed stages get 0) -> a list."""
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        weights = [float(w) for w in text]
    elif "=" in text:
        named: dict[str, float] = {}
        for part in text.split(","):
            name, _, value = part.partition("=")
            if name.strip() not in stages:
                raise InputError(f"fusion weight for {name.strip()!r}, which is not a fused stage ({', '.join(stages)})")
            try:
                named[name.strip()] = float(value)
            except ValueError:
                raise InputError(f"fusion weight {part!r} is not NAME=NUMBER") from None
        weights = [named.get(s, 0.0) for s in stages]
    else:
        try:
            weights = [float(w) for w in text.split(",")]
        except ValueError:
            raise InputError(f"fusion weights {text!r}: numbers separated by commas, or NAME=NUMBER pairs") from None
    if len(weights) != len(stages):
        raise InputError(f"{len(weights)} fusion weight(s) for {len(stages)} stages ({', '.join(stages)})")
    return weights


def tuning_path(index) -> Path:
    return Path(index.path) / TUNING_FILE


def load_tuned(index) -> dict | None:
    path = tuning_path(index)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: malformed fusion tuning file ({e}); run `weir tune fusion` again") from None


def hybrid_settings(index, options: dict[str, Any]) -> dict[str, Any]:
    """The stages, method, weights, RRF k and depth per stage the ``hybrid`` pipeline uses for ``options``."""
    stages = options.get("hybrid_stages") or DEFAULT_STAGES
    if isinstance(stages, str):
        stages = [s.strip() for s in stages.split(",") if s.strip()]
    stages = list(stages)
    tuned = load_tuned(index)
    if tuned is not None and list(tuned.get("stages", [])) != stages:
        tuned = None  # tuned for other stages
    best = (tuned or {}).get("best", {})
    method = check_method(options.get("fusion") or best.get("method") or DEFAULT_METHOD)
    weights = parse_weights(options.get("fusion_weights"), stages)
    if weights is None and best.get("method") == method:
        weights = best.get("weights")
    if weights is None:
        weights = DEFAULT_WEIGHTS
    return {"stages": stages, "method": method, "weights": weights,
            "rrf_k": int(options.get("rrf_k") or best.get("rrf_k") or RRF_K),
            "depth": int(options.get("depth_per_stage") or (tuned or {}).get("depth") or DEFAULT_DEPTH),
            "tuned": str(tuning_path(index)) if tuned is not None else None}


def _weight_vectors(n: int) -> list[list[float]]:
    """Weights over ``n`` stages: the last stage gets w from the grid, the others share 1 - w equally."""
    return [[round((1 - w) / (n - 1), 4)] * (n - 1) + [w] for w in WEIGHT_GRID]


def _cutoff(measure: str, depth: int) -> int:
    """How deep a fused ranking must be for ``measure`` (``nDCG@10`` -> 10; no cutoff -> ``depth``)."""
    _, _, tail = measure.partition("@")
    return int(tail) if tail.isdigit() else depth


class FusionGrid:
    """The stage runs of a set of queries as arrays, so that a grid of fusions is evaluated quickly: per query the
    union of candidates sorted by docid (ties then break by docid, as :func:`ranker.fusion.fuse_runs` does) and,
    per method, a (stages x candidates) matrix that a weight vector turns into fused scores."""

    def __init__(self, runs: Sequence, qids: Sequence[str]):
        import numpy as np

        from ranker.fusion import normalize

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


def tune_fusion(index, topics_path: str, qrels_path: str, *, stages: Sequence[str] = DEFAULT_STAGES,
                measure: str = "nDCG@10", depth: int = DEFAULT_DEPTH, options: dict[str, Any] | None = None,
                methods: Sequence[str] = ("rrf", "minmax", "zscore"), allow_test_topics: bool = False,
                write: bool = True) -> dict:
    """Grid-search fusion settings on training topics; write ``tuning/fusion.json`` into the index; return it."""
    from indexer.collections import read_qrels, read_topics
    from ranker import pipelines
    from ranker.evaluate import evaluate

    collection_root = Path(index.manifest["collection"]["path"])
    if not allow_test_topics and Path(topics_path).resolve() == (collection_root / "queries.tsv").resolve():
        raise InputError(f"{topics_path} is the collection's evaluation (test) topics: tune on a training split "
                         "(e.g. queries.train.tsv); pass --allow-test-topics only for a deliberate oracle experiment")
    stages = list(stages)
    if len(stages) < 2:
        raise InputError("fusion needs two or more stages")
    options = dict(options or {})
    topics = read_topics(topics_path)
    qrels = read_qrels(qrels_path)
    judged = [q for q in topics if q.id in qrels]
    if not judged:
        raise InputError(f"no topic of {topics_path} is judged in {qrels_path}: wrong qrels?")
    runs = []
    for name in stages:
        if name not in pipelines.FIRST_STAGES or name == "hybrid":
            raise InputError(f"cannot fuse {name!r}; fusable first stages: "
                             f"{', '.join(s for s in sorted(pipelines.FIRST_STAGES) if s != 'hybrid')}")
        runs.append(pipelines.FIRST_STAGES[name](index, options).retrieve(judged, depth))
    grid = FusionGrid(runs, [q.id for q in judged])
    cutoff = min(depth, _cutoff(measure, depth))
    results = []
    for method in methods:
        method = check_method(method)
        for weights in _weight_vectors(len(stages)):
            if not any(weights):
                continue
            for k in (RRF_K_GRID if method == "rrf" else (RRF_K,)):
                value = evaluate(grid.fuse(method, weights, k, cutoff), qrels, [measure])[measure]
                results.append({"method": method, "weights": weights, "rrf_k": k, measure: round(value, 5)})
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
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if write:
        path = tuning_path(index)
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    return record
