"""A training set read for LTR (:class:`Examples`): its judged queries, their candidates (a run file's or a first
stage's, top ``depth``), earlier stages' scores of them (``stage_runs``), feature rows grouped by query and labels
from the qrels."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from weir.ranker.options import PipelineOptions
from weir.ranker.rerankers.ltr_features import STAGE_SCORES, FeatureExtractor
from weir.training.common import TrainingSet
from weir.core.trec import read_qrels, read_topics
from weir.core.types import InputError, Query, Run


@dataclass
class Examples:
    """Feature rows of one training set, grouped by query (rows of a query contiguous, in candidate order)."""

    queries: list[Query]
    run: Run
    X: np.ndarray
    y: np.ndarray
    qids: list[str]
    feature_seconds: float = 0.0

    def select(self, keep: set[str], *, positive_only: bool = True) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """Rows and group sizes of the queries in ``keep`` (with ``positive_only``, those with a relevant row)."""
        idx, groups = self.rows(keep, positive_only=positive_only)
        return self.X[idx], self.y[idx], groups

    def rows(self, keep: set[str], *, positive_only: bool = True) -> tuple[np.ndarray, list[int]]:
        """The positions and group sizes of the rows of :meth:`select`."""
        qids = np.asarray(self.qids)
        chosen, groups = [], []
        start = 0
        while start < len(qids):
            end = start
            while end < len(qids) and qids[end] == qids[start]:
                end += 1
            if qids[start] in keep and (not positive_only or self.y[start:end].max() > 0):
                chosen.append(np.arange(start, end))
                groups.append(end - start)
            start = end
        return (np.concatenate(chosen) if chosen else np.zeros(0, dtype=int)), groups


def load_examples(ds: TrainingSet, options: PipelineOptions | None = None,
                  log: Callable[[str], None] = print) -> Examples:
    """Candidates and features of one training set (labels from its qrels)."""
    from weir.indexer.index_dir import Index
    from weir.ranker import registry

    index = Index(ds.index)
    queries = read_topics(ds.topics)
    qrels = read_qrels(ds.qrels)
    queries = [q for q in queries if q.id in qrels]
    if ds.max_queries and len(queries) > ds.max_queries:
        rng = np.random.default_rng(7)
        keep = set(rng.choice(len(queries), ds.max_queries, replace=False).tolist())
        queries = [q for i, q in enumerate(queries) if i in keep]
    if not queries:
        raise InputError(f"{ds.topics}: no topic has qrels in {ds.qrels}")
    start = time.perf_counter()
    if ds.candidates:
        run = Run.read_trec(ds.candidates).truncated(ds.depth)
    else:
        stage = registry.build(ds.first_stage, index, options)
        run = stage(queries, k=ds.depth)
    retrieve = time.perf_counter() - start
    attach_stage_scores(run, ds.stage_runs)
    extractor = FeatureExtractor(index)
    start = time.perf_counter()
    X, rows = extractor.extract(queries, run, ds.depth)
    seconds = time.perf_counter() - start
    y = np.asarray([max(0, qrels.get(qid, {}).get(run[qid][i].doc_id, 0)) for qid, i in rows], dtype=np.float32)
    source = f"run {ds.candidates}" if ds.candidates else ds.first_stage
    log(f"{ds.topics}: {len(queries)} queries, {len(rows)} candidates ({source} top {ds.depth}, {retrieve:.1f}s); "
        f"features {seconds:.1f}s ({seconds / max(1, len(queries)) * 1000:.1f} ms/query)")
    return Examples(queries, run, X, y, [qid for qid, _ in rows], seconds)


def attach_stage_scores(run: Run, spec: str | None) -> None:
    """Record the scores that other runs give the candidates as ``Hit.stage_scores[NAME]`` (``spec``:
    ``NAME:RUN[;NAME:RUN]``), as a pipeline's earlier stage would have: how a cross-validated run of another reranker
    (e.g. ``attention:runs/attention-cv.trec``) becomes an LTR feature. A candidate missing from such a run gets none."""
    for part in (spec or "").split(";"):
        if not part.strip():
            continue
        name, sep, path = part.partition(":")
        name = name.strip()
        if not sep or name not in STAGE_SCORES:
            raise InputError(f"bad stage run {part!r}: expected NAME:RUN with NAME one of {', '.join(STAGE_SCORES)}")
        other = Run.read_trec(path.strip())
        for qid, hits in run.items():
            scores = {h.doc_id: h.score for h in other.get(qid, [])}
            for h in hits:
                if h.doc_id in scores:
                    h.stage_scores[name] = scores[h.doc_id]
