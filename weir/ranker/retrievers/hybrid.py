"""Hybrid first stage: fuse the rankings of two or more first stages (default BM25 + dense), with the settings tuned on
a training split by `weir tune fusion` (:mod:`weir.training.fusion`) when the index has them.

Methods (pure functions over one query's ``{docid: score}`` lists, tested on hand-computed cases; :func:`fuse` does the
same arithmetic on a query's arrays, :class:`weir.core.hits.Ranked`, which is how the pipelines fuse):

- ``rrf``: reciprocal rank fusion (Cormack et al. 2009), ``sum_i w_i / (k + rank_i(d))`` with ``k = 60``; a document
  absent from a stage's list gets nothing from it;
- ``minmax`` / ``zscore``: normalized linear combination ``sum_i w_i * norm_i(s_i(d))`` where ``norm`` is min-max
  ((s - min) / (max - min); 1 when all scores are equal) or z-score ((s - mean) / population std; 0 when the std is
  0) over the stage's list for that query; a document absent from a stage's list gets that list's lowest
  normalized score (0 for min-max), i.e. it is treated as ranked just below the list.

Fused hits keep each stage's own scores in ``Hit.stage_scores`` (e.g. ``{"bm25": 12.3, "dense": 0.71, "hybrid":
0.032}``), for rerankers and learning-to-rank features.

Settings (:func:`hybrid_settings`): explicit options, else ``<index>/tuning/fusion.json`` when its stages match,
else the defaults below (chosen on SciFact's training split). ``deepimpact+bm25`` (:func:`impact_fusion_settings`)
takes its weights from the DeepImpact model card instead, where `weir train deepimpact` recorded them.

A fusion whose weight is all on one stage (the shipped DeepImpact card's ``deepimpact+bm25``: 1.0 and 0.0) serves that
stage alone (:meth:`HybridRetriever._serve_alone`): the same hits and scores, the other stages searched only for the
queries where their documents could enter the top k, and no score of a weight-0 stage on the hits.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from weir.core.hits import DocIds, Ranked
from weir.core.types import InputError, Query, Run
from weir.ranker.stage import Retriever

METHODS = ("rrf", "minmax", "zscore")
RRF_K = 60
DEFAULT_DEPTH = 1000
TUNING_FILE = Path("tuning") / "fusion.json"
DEFAULT_STAGES = ("bm25", "dense")
DEFAULT_METHOD = "zscore"
DEFAULT_WEIGHTS = None  # equal weights
DEFAULT_IMPACT_FUSION = {"method": "minmax", "weights": [0.5, 0.5], "depth": 1000}


def check_method(method: str) -> str:
    aliases = {"linear": "minmax", "linear-minmax": "minmax", "linear-zscore": "zscore", "z-score": "zscore",
               "min-max": "minmax"}
    method = aliases.get(method, method)
    if method not in METHODS:
        raise InputError(f"unknown fusion method {method!r}; known: rrf, minmax (linear), zscore")
    return method


def normalized(values: np.ndarray, method: str) -> np.ndarray:
    """Min-max or z-score normalization of one query's scores, as float64 (the operations of :func:`normalize`, value
    for value: z-score's sums are Python's, left to right)."""
    values = np.asarray(values, dtype=np.float64)
    if not len(values):
        return values
    if method == "minmax":
        lo, hi = values.min(), values.max()
        if hi == lo:
            return np.ones(len(values))
        return (values - lo) / (hi - lo)
    if method == "zscore":
        listed = values.tolist()
        mean = sum(listed) / len(listed)
        std = math.sqrt(sum((v - mean) ** 2 for v in listed) / len(listed))
        if std == 0:
            return np.zeros(len(values))
        return (values - mean) / std
    raise InputError(f"unknown normalization {method!r}; known: minmax, zscore")


def normalize(scores: Mapping[str, float], method: str) -> dict[str, float]:
    """Min-max or z-score normalization of one query's scores."""
    if not scores:
        return {}
    return dict(zip(scores, normalized(np.fromiter(scores.values(), np.float64, len(scores)), method).tolist()))


def rrf(rankings: Sequence[Sequence[str]], weights: Sequence[float] | None = None, k: int = RRF_K) -> dict[str, float]:
    """Reciprocal rank fusion of ranked docid lists (best first): ``sum_i w_i / (k + rank)``, ranks from 1."""
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    fused: dict[str, float] = {}
    for ranking, w in zip(rankings, weights, strict=True):
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + w / (k + rank)
    return fused


def linear(score_lists: Sequence[Mapping[str, float]], weights: Sequence[float] | None = None,
           method: str = "minmax") -> dict[str, float]:
    """Weighted sum of normalized scores; a document missing from a list gets that list's lowest normalized score."""
    weights = list(weights) if weights is not None else [1.0] * len(score_lists)
    norms = [normalize(scores, method) for scores in score_lists]
    docs = dict.fromkeys(d for scores in score_lists for d in scores)
    fused = dict.fromkeys(docs, 0.0)
    for norm, w in zip(norms, weights, strict=True):
        floor = min(norm.values()) if norm else 0.0
        for d in docs:
            fused[d] += w * norm.get(d, floor)
    return fused


def _common(rankings: Sequence[Ranked]) -> tuple[DocIds, list[np.ndarray]]:
    """One numbering for the documents of stages numbered differently: the first ranking's table when it holds every
    document, else one made of this query's documents; and each ranking's documents in it."""
    table = next((r.ids for r in rankings if len(r)), rankings[0].ids)
    positions = []
    for r in rankings:
        at = r.docs if r.ids is table else table.translate(r.ids)[r.docs]
        if len(at) and at.min() < 0:
            table = DocIds(list(dict.fromkeys(d for r in rankings for d in r.doc_ids())))
            return table, [table.find(r.ids.ids[r.docs]) for r in rankings]
        positions.append(at)
    return table, positions


def fuse(rankings: Sequence[Ranked], *, method: str = "rrf", weights: Sequence[float] | None = None, k: int = RRF_K,
         depth: int | None = None, name: str = "hybrid", explain: Sequence[str] | None = None) -> Ranked:
    """One query's fusion of the rankings of several stages (a document at most once in each), on arrays: the scores
    of :func:`rrf` or :func:`linear`, bit for bit, sorted best first with ties by docid, top ``depth``. Each hit keeps
    the stages' scores it has (a later ranking's replacing an earlier's of the same name) and the fused one as
    ``name``. ``explain``: the rankings' stage names, to keep each one's part of every fused score (its weighted
    RRF term or normalized score; the floor where it did not retrieve the hit) as the reason ``name:stage``."""
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    table, positions = _common(rankings)
    union = np.unique(np.concatenate(positions)) if positions else np.zeros(0, dtype=np.int64)
    fused = np.zeros(len(union))
    stages: dict[str, np.ndarray] = {}
    reasons: dict[str, np.ndarray] | None = None if explain is None else {}
    for i, (r, at, w) in enumerate(zip(rankings, positions, weights, strict=True)):
        at = np.searchsorted(union, at)
        if method == "rrf":
            terms = w / (k + np.arange(1, len(r) + 1))
            fused[at] += terms
            if reasons is not None:  # a stage that did not retrieve a hit adds nothing to it
                part = np.zeros(len(union))
                part[at] = terms
        else:
            norm = normalized(r.scores, method)
            part = np.full(len(union), w * (norm.min() if len(norm) else 0.0))
            part[at] = w * norm
            fused += part
        if reasons is not None:
            reasons[f"{name}:{explain[i]}"] = part
        for stage, column in r.stages.items():
            merged = stages.setdefault(stage, np.full(len(union), np.nan))
            merged[at] = np.where(np.isnan(column), merged[at], column)
    stages[name] = fused
    order = np.lexsort((table.rank[union], -fused))[:depth]
    return Ranked(table, union[order], fused[order], {n: a[order] for n, a in stages.items()}, None,
                  None if reasons is None else {n: a[order] for n, a in reasons.items()})


NO_HITS = Ranked(DocIds([]), np.zeros(0, dtype=np.int64), np.zeros(0))


def fuse_runs(runs: Sequence[Run], *, method: str = "rrf", weights: Sequence[float] | None = None, k: int = RRF_K,
              depth: int | None = None, name: str = "hybrid", explain: Sequence[str] | None = None) -> Run:
    """Fuse per-query the runs of several stages (each ranked best first) into one ranked run of ``depth`` hits
    (:func:`fuse`, on the runs' arrays)."""
    method = check_method(method)
    if weights is not None and len(weights) != len(runs):
        raise InputError(f"{len(weights)} fusion weight(s) for {len(runs)} stages")
    out = Run()
    for qid in dict.fromkeys(qid for run in runs for qid in run):
        rankings = [run.ranking(qid) if qid in run else NO_HITS for run in runs]
        out[qid] = fuse(rankings, method=method, weights=weights, k=k, depth=depth, name=name, explain=explain)
    return out


class HybridRetriever(Retriever):
    """Run each first stage to its depth, fuse their rankings per query, return the top ``k``.

    ``weights``: one per stage (default equal); ``depth``: candidates per stage (one int for all, or one each;
    default 1000). The wall time of each part of the last call is kept in :attr:`last_timings`."""

    def __init__(self, stages: Sequence[Retriever], *, method: str = "rrf", weights: Sequence[float] | None = None,
                 rrf_k: int = RRF_K, depth: int | Sequence[int] = DEFAULT_DEPTH, name: str = "hybrid"):
        if len(stages) < 2:
            raise InputError("hybrid retrieval fuses two or more first stages")
        self.stages = list(stages)
        self.method = check_method(method)
        if weights is not None:
            weights = [float(w) for w in weights]
            if len(weights) != len(self.stages):
                raise InputError(f"{len(weights)} fusion weight(s) for {len(self.stages)} stages "
                                 f"({', '.join(s.name for s in self.stages)})")
            if any(w < 0 for w in weights) or not any(weights):
                raise InputError(f"fusion weights must be >= 0 and not all 0 (got {weights})")
        self.weights = weights
        if rrf_k < 0:
            raise InputError(f"the RRF constant k must be >= 0 (got {rrf_k})")
        self.rrf_k = rrf_k
        depths = [depth] * len(self.stages) if isinstance(depth, int) else [int(d) for d in depth]
        if len(depths) != len(self.stages) or any(d < 1 for d in depths):
            raise InputError(f"depth per stage: one positive number, or one for each of the {len(self.stages)} stages")
        self.depths = depths
        self.name = name
        self.last_timings: dict[str, float] = {}

    def describe(self) -> dict:
        return {**super().describe(), "stages": [s.describe() for s in self.stages], "method": self.method,
                "weights": self.weights, "rrf_k": self.rrf_k, "depth": self.depths}

    def stage_runs(self, queries: Sequence[Query], k: int) -> list[Run]:
        return [self._search(i, queries, k) for i in range(len(self.stages))]

    def _search(self, i: int, queries: Sequence[Query], k: int) -> Run:
        stage, start = self.stages[i], time.perf_counter()
        run = stage.retrieve(queries, max(self.depths[i], k))
        self.last_timings[stage.name] = self.last_timings.get(stage.name, 0.0) + time.perf_counter() - start
        return run

    def alone(self) -> int | None:
        """The stage that has all the weight, when every other stage's weight is 0 (then it is served alone)."""
        weighted = [i for i, w in enumerate(self.weights or ()) if w > 0]
        return weighted[0] if len(weighted) == 1 else None

    explains = True

    def retrieve(self, queries: Sequence[Query], k: int, explain: bool = False) -> Run:
        """The fused top ``k``; with ``explain``, each hit's fused score in its stages' parts (reasons)."""
        self.last_timings = {}
        alone = self.alone()
        names = [s.name for s in self.stages] if explain else None
        if alone is None:
            runs = self.stage_runs(queries, k)
            start = time.perf_counter()
            run = fuse_runs(runs, method=self.method, weights=self.weights, k=self.rrf_k, depth=k, name=self.name,
                            explain=names)
        else:
            start = time.perf_counter()
            run = self._serve_alone(queries, k, alone, names)
            start += sum(self.last_timings.values())  # the stages' own time is theirs, not the fusion's
        for q in queries:
            if q.id not in run:
                run[q.id] = []
        self.last_timings["fusion"] = time.perf_counter() - start
        return run

    def _serve_alone(self, queries: Sequence[Query], k: int, alone: int, explain: list[str] | None = None) -> Run:
        """A fusion whose weight is all on one stage, served by that stage alone. Every document only the other
        stages find would get the same fused score, the floor (0 for RRF, the weighted stage's lowest for min-max and
        z-score), so where the weighted stage has ``k`` documents above the floor, its ranking with the fused scores
        is the fusion's top ``k``, and the other stages are not searched. For a query where it has fewer, they are,
        and the query is fused as usual. Either way the hits carry no score of a stage whose weight is 0."""
        served = self._search(alone, queries, k)
        fused: dict[str, Ranked] = {}
        short = []
        for q in queries:
            r = served.ranking(q.id) if q.id in served else NO_HITS
            full = fuse([r], method=self.method, weights=[self.weights[alone]], k=self.rrf_k, name=self.name,
                        explain=None if explain is None else [explain[alone]])
            floor = 0.0 if self.method == "rrf" or not len(full) else full.scores[-1]
            if k == 0 or (len(full) >= k and full.scores[k - 1] > floor):
                fused[q.id] = full.take(slice(k))
            else:
                short.append(q)
        if short:
            runs = [served if i == alone else self._search(i, short, k) for i in range(len(self.stages))]
            for q in short:
                r = fuse([run.ranking(q.id) if q.id in run else NO_HITS for run in runs], method=self.method,
                         weights=self.weights, k=self.rrf_k, depth=k, name=self.name, explain=explain)
                keep = {self.name, *(served.ranking(q.id).stages if q.id in served else ())}
                fused[q.id] = Ranked(r.ids, r.docs, r.scores, {n: a for n, a in r.stages.items() if n in keep}, None,
                                     r.reasons)
        return Run({q.id: fused[q.id] for q in queries})


def parse_weights(text: str | Sequence[float] | None, stages: Sequence[str]) -> list[float] | None:
    """``"0.3,0.7"`` (one per stage, in order) or ``"bm25=0.3,dense=0.7"`` (unnamed stages get 0) -> a list; ``;``
    separates them as ``,`` does (inside a pipeline's brackets, where ``,`` separates options:
    ``deepimpact+bm25[fusion_weights=0.3;0.7]``)."""
    if text is None or text == "":
        return None
    if isinstance(text, str):
        text = text.replace(";", ",")
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


def hybrid_settings(index, options) -> dict[str, Any]:
    """The stages, method, weights, RRF k and depth per stage the ``hybrid`` pipeline uses for ``options`` (a
    :class:`weir.ranker.options.FusionOptions`)."""
    stages = options.stages or DEFAULT_STAGES
    if isinstance(stages, str):
        stages = [s.strip() for s in stages.split(",") if s.strip()]
    stages = list(stages)
    tuned = load_tuned(index)
    if tuned is not None and list(tuned.get("stages", [])) != stages:
        tuned = None  # tuned for other stages
    best = (tuned or {}).get("best", {})
    method = check_method(options.method or best.get("method") or DEFAULT_METHOD)
    weights = parse_weights(options.weights, stages)
    if weights is None and best.get("method") == method:
        weights = best.get("weights")
    if weights is None:
        weights = DEFAULT_WEIGHTS
    return {"stages": stages, "method": method, "weights": weights,
            "rrf_k": int(options.rrf_k or best.get("rrf_k") or RRF_K),
            "depth": int(options.depth_per_stage or (tuned or {}).get("depth") or DEFAULT_DEPTH),
            "tuned": str(tuning_path(index)) if tuned is not None else None}


def impact_fusion_settings(index, options) -> dict[str, Any]:
    """How ``deepimpact+bm25`` interpolates (``options``: a :class:`weir.ranker.options.FusionOptions`): the given method
    and weights, else the ``fusion`` entry of the DeepImpact model card in the index manifest (chosen on training
    queries), else min-max 0.5 / 0.5."""
    card = ((index.manifest["components"].get("deepimpact") or {}).get("model") or {}).get("card") or {}
    tuned = card.get("fusion") or {}
    method = options.method or tuned.get("method") or DEFAULT_IMPACT_FUSION["method"]
    weights = parse_weights(options.weights, ["deepimpact", "bm25"])
    if weights is None and method == tuned.get("method"):
        weights = tuned.get("weights")
    return {"method": method, "weights": weights or DEFAULT_IMPACT_FUSION["weights"],
            "depth": int(options.depth_per_stage or DEFAULT_IMPACT_FUSION["depth"]), "tuned": tuned or None}
