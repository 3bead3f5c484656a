"""The stages of a pipeline, PyTerrier-style: every stage is one kind of object with one call.

A :class:`Stage` maps (queries, run) to a run: a retriever ignores the incoming run and makes one; a reranker
reorders the hits of the run it is given and never drops or invents candidates (:func:`apply_scores` keeps that
promise for every reranker). Stages compose with ``>>`` into a :class:`Pipeline`, which times each stage (wall seconds
for the whole batch of queries, kept in ``Run.timings``).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from weir.core.hits import Ranked
from weir.core.types import InputError, Query, Run, replace_hit


class Stage(ABC):
    name: str = "stage"
    explains: bool = False  # asked to explain, it keeps the parts of its scores (``Ranked.reasons``)

    @abstractmethod
    def __call__(self, queries: Sequence[Query], run: Run | None = None, *, k: int = 1000) -> Run:
        """Return the top ``k`` hits per query."""

    def __rshift__(self, other: Stage) -> Pipeline:
        return Pipeline([self]) >> other

    def describe(self) -> dict:
        """What this stage is, for experiment records: name, class, and (override to add) parameters and model
        hashes. A stage with a ``model_card`` attribute (a dict) has it included."""
        out = {"name": self.name, "class": f"{type(self).__module__}.{type(self).__qualname__}"}
        card = getattr(self, "model_card", None)
        if isinstance(card, dict):
            out["model_card"] = card
        return out

    def clear_caches(self) -> None:
        """Forget what earlier calls cached (a stage that caches overrides this), so that the next call costs what a
        cold one does: experiments time each pipeline this way."""


class Retriever(Stage):
    """A first stage: queries in, the top ``k`` documents of the index per query out."""

    def __call__(self, queries: Sequence[Query], run: Run | None = None, *, k: int = 1000,
                 explain: bool = False) -> Run:
        return self.retrieve(queries, k, explain=True) if explain and self.explains else self.retrieve(queries, k)

    @abstractmethod
    def retrieve(self, queries: Sequence[Query], k: int) -> Run: ...


class Reranker(Stage):
    """A later stage: rescores the top ``depth`` candidates of each query, keeps the rest below them in order."""

    depth: int = 100

    def __call__(self, queries: Sequence[Query], run: Run | None = None, *, k: int = 1000,
                 depth: int | None = None, explain: bool = False) -> Run:
        if run is None:
            raise ValueError(f"{self.name} is a reranker: it needs candidates from a first stage")
        if explain and self.explains:  # the hits it hands on are explained, not every one it rescored
            return self.rerank(queries, run, depth or self.depth, explain=k).truncated(k)
        return self.rerank(queries, run, depth or self.depth).truncated(k)

    @abstractmethod
    def rerank(self, queries: Sequence[Query], run: Run, depth: int) -> Run:
        """Rescore the top ``depth`` hits of each query; hits below ``depth`` follow them in their old order. A
        reranker that ``explains`` also takes ``explain``: how many of its best hits a query to keep the reasons of
        (0: none)."""


class Pipeline(Stage):
    """A first stage followed by zero or more rerankers, run on a whole batch of queries. With a ``calibration``
    (:class:`weir.ranker.calibration.Calibration`, which the registry attaches when the index holds one fitted for
    this pipeline) each hit carries its probability of being relevant, and ``min_relevance`` keeps only the hits at or
    above it."""

    def __init__(self, stages: Sequence[Stage], calibration=None):
        if not stages:
            raise ValueError("a pipeline needs at least one stage")
        self.stages = list(stages)
        self.name = ">>".join(s.name for s in self.stages)
        self.calibration = calibration

    def __rshift__(self, other: Stage) -> Pipeline:
        others = other.stages if isinstance(other, Pipeline) else [other]
        return Pipeline(self.stages + others)

    def describe(self) -> dict:
        out = {"name": self.name, "stages": [s.describe() for s in self.stages]}
        if self.calibration is not None:
            out["calibration"] = dict(self.calibration.record)
        return out

    def clear_caches(self) -> None:
        for stage in self.stages:
            stage.clear_caches()

    def __call__(self, queries: Sequence[Query], run: Run | None = None, *, k: int = 1000,
                 depth: int | None = None, keep: Callable[[Sequence[Query]], Sequence[Query]] | None = None,
                 min_relevance: float | None = None, explain: bool = False) -> Run:
        """Run every stage; ``depth`` (when given) overrides how many candidates each reranker rescores.

        ``keep``, when given, is asked before each stage which of the queries still want an answer (a service drops
        those whose caller has gone or whose deadline passed); the others' work stops there, and a run without them
        comes back (an empty one when none is left). ``min_relevance``: only the hits at or above it (a calibrated
        pipeline only). ``explain``: the stages that can (a fusion, LTR) keep the parts of their scores."""
        self._check_cutoff(min_relevance)
        run = self._stages_run(queries, run, k=self._asked(k), depth=depth, keep=keep, explain=explain)
        return run if self.calibration is None else self._calibrated(queries, run, k, min_relevance)

    def _check_cutoff(self, min_relevance: float | None) -> None:
        from weir.ranker.calibration import check_min_relevance

        if check_min_relevance(min_relevance) is not None and self.calibration is None:
            raise InputError(f"pipeline {self.name} is not calibrated over this index, so it has no relevance to cut "
                             "at: fit it with `weir tune calibration` on training topics")

    def _asked(self, k: int) -> int:
        """How many hits the stages make for ``k``: a calibrated pipeline reads at least its window of scores."""
        if k < 1:
            raise InputError(f"k, the hits per query, must be at least 1 (got {k})")
        return k if self.calibration is None else max(k, self.calibration.window)

    def _calibrated(self, queries: Sequence[Query], run: Run, k: int, min_relevance: float | None) -> Run:
        """``run``'s top ``k`` hits a query, with their relevance and cut at ``min_relevance`` when calibrated."""
        if self.calibration is None:
            return run.truncated(k)
        from weir.ranker.calibration import cut

        out = self.calibration.apply(queries, run).truncated(k)
        if min_relevance is not None:
            for qid in out:
                out[qid] = cut(out.ranking(qid), min_relevance)
        return out

    def _stages_run(self, queries: Sequence[Query], run: Run | None, *, k: int, depth: int | None,
                    keep: Callable[[Sequence[Query]], Sequence[Query]] | None, explain: bool = False) -> Run:
        timings: dict[str, float] = {}
        for i, stage in enumerate(self.stages):
            if keep is not None:
                queries = list(keep(queries))
                if run is not None:
                    run = run.only(q.id for q in queries)
                if not queries:
                    return Run(timings=timings)
            last = i == len(self.stages) - 1
            start = time.perf_counter()
            # intermediate stages hand on as many candidates as the next stage reranks
            hand_on = k if last else max(k, depth or getattr(self.stages[i + 1], "depth", k))
            asked = {"explain": True} if explain and stage.explains else {}
            if isinstance(stage, Reranker):
                run = stage(queries, run, k=hand_on, depth=depth, **asked)
            else:
                run = stage(queries, run, k=hand_on, **asked)
            timings[stage.name] = timings.get(stage.name, 0.0) + time.perf_counter() - start
        assert run is not None
        run.timings = timings
        return run

    def search(self, queries: Sequence[Query], k: int, *, depth: int | None = None,
               remove_identical: bool = False, min_relevance: float | None = None, explain: bool = False) -> Run:
        """Run the pipeline over ``queries`` for ``k`` hits each; with ``remove_identical``, hits whose docid equals
        the qid are dropped after retrieval (BEIR's ignore_identical_ids, for ArguAna), one more hit fetched so that
        ``k`` remain, and before the hits' relevance is read from the scores. The run keeps the stages' timings."""
        if not remove_identical:
            return self(queries, k=k, depth=depth, min_relevance=min_relevance, explain=explain)
        self._check_cutoff(min_relevance)
        run = self._stages_run(queries, None, k=self._asked(k) + 1, depth=depth, keep=None, explain=explain)
        return self._calibrated(queries, run.without_identical_ids(), k, min_relevance)


class CandidateRun(Retriever):
    """A first stage that takes its candidates from an existing run (how published re-ranking figures compare)."""

    name = "candidates"

    def __init__(self, run: Run):
        self.run = run

    def retrieve(self, queries: Sequence[Query], k: int) -> Run:
        return Run({q.id: [replace_hit(h) for h in self.run.get(q.id, [])[:k]] for q in queries})


def apply_scores(queries: Sequence[Query], run: Run, depth: int, scores: Mapping[str, Sequence[float]],
                 name: str, reasons: Mapping[str, Mapping[str, np.ndarray]] | None = None, *,
                 also: Mapping[str, Mapping[str, Sequence[float]]] | None = None) -> Run:
    """A new run: each query's top ``depth`` hits rescored with ``scores[qid]`` (one per hit, in run order) and
    sorted (ties by docid), recorded in ``stage_scores[name]``; the hits below ``depth`` follow in their old order with
    scores below the lowest new one. Queries of ``run`` that are not in ``queries`` are passed on unchanged. Done on
    the queries' arrays (:meth:`weir.core.hits.Run.ranking`): no ``Hit`` is made. ``reasons[qid]``: the parts of the
    new scores (``{part: values}``, one value per rescored hit), kept as the reasons ``name:part`` beside the earlier
    stages' (NaN for the hits below ``depth``). ``also[column][qid]``: more stage scores of the same hits (e.g. a
    several-member model's spread), kept beside ``name``'s."""
    out = Run(timings=run.timings)
    for qid in run:
        hits = run.ranking(qid)
        new = scores.get(qid)
        head = min(depth, len(hits))
        if new is None or not head:
            out[qid] = hits
            continue
        if len(new) != head:
            raise ValueError(f"{name}: {len(new)} scores for {head} candidates of query {qid}")
        new = np.asarray(new, dtype=np.float64)
        order = np.lexsort((hits.ids.rank[hits.docs[:head]], -new))
        floor = new[order[-1]]
        rest = (floor - 1.0) - np.arange(len(hits) - head)
        stages = _reordered(hits.stages, {name: new, **{c: np.asarray(v[qid], dtype=np.float64)
                                                        for c, v in (also or {}).items()}}, order, head, len(hits))
        parts = (reasons or {}).get(qid)
        explained = None if hits.reasons is None and parts is None else _reordered(
            hits.reasons or {}, {f"{name}:{p}": v for p, v in (parts or {}).items()}, order, head, len(hits))
        out[qid] = Ranked(hits.ids, np.concatenate([hits.docs[:head][order], hits.docs[head:]]),
                          np.concatenate([new[order], rest]), stages, None, explained)
    return out


def _reordered(columns: Mapping[str, np.ndarray], new: Mapping[str, np.ndarray], order: np.ndarray, head: int,
               n: int) -> dict[str, np.ndarray]:
    """Per-hit columns after a rescoring of the top ``head`` of ``n`` hits into ``order``: the earlier ``columns``
    reordered, and the ``new`` ones (values of the top ``head``, in run order; NaN below), replacing any of the
    same name."""
    out = {}
    for key, column in [*columns.items(), *[(k, None) for k in new if k not in columns]]:
        column = np.full(n, np.nan) if column is None else column.astype(np.float64)
        if key in new:
            column[:head] = new[key]
        out[key] = np.concatenate([column[:head][order], column[head:]])
    return out
