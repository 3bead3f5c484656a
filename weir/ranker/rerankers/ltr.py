"""LightGBM learning-to-rank reranker: features of each (query, candidate) pair (:mod:`weir.ranker.rerankers.ltr_features`),
scored by a lambdarank model trained with `weir train ltr` (:mod:`weir.training.ltr`).

A model directory holds ``model.txt`` (LightGBM's text format), ``features.json`` (the feature names, in the model's
column order) and ``card.json`` (the model card: training data, command, parameters, metrics, importance). A model of
several members (`weir train ltr --members N`: boosters that differ only in their random seed, whose scores are
averaged) keeps its further members in ``model.1.txt``, ``model.2.txt``, ...: LightGBM has no format for an average
of boosters, and the average is what takes the seed's luck out of row and feature sampling.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from weir.core.hits import BIAS_PART
from weir.indexer.index_dir import Index
from weir.ranker.stage import Reranker, apply_scores
from weir.core.provenance import write_card
from weir.core.runtime import shipped_model
from weir.core.types import InputError, Query, Run

MODEL_FILE, FEATURES_FILE, CARD_FILE = "model.txt", "features.json", "card.json"


def member_file(m: int) -> str:
    """The file of member ``m`` of a model: ``model.txt`` for the first, ``model.<m>.txt`` for the others."""
    return MODEL_FILE if m == 0 else f"model.{m}.txt"


def base_scores(X: np.ndarray, groups: Sequence[int], col: int | None) -> np.ndarray | None:
    """The init score of rows grouped by query (``groups``: sizes, in order): column ``col`` standardized within each
    query (missing values at the query's mean). ``None`` without an ``init_from`` feature."""
    if col is None:
        return None
    out = np.zeros(len(X), dtype=np.float64)
    start = 0
    for n in groups:
        v = X[start:start + n, col].astype(np.float64)
        ok = ~np.isnan(v)
        if ok.any():
            sd = v[ok].std()
            out[start:start + n] = np.where(ok, (v - v[ok].mean()) / sd if sd > 0 else 0.0, 0.0)
        start += n
    return out


def query_groups(qids: Sequence[str]) -> list[int]:
    """Group sizes of rows whose query ids come grouped (each query's rows contiguous), in order."""
    sizes: list[int] = []
    for i, q in enumerate(qids):
        if i and q == qids[i - 1]:
            sizes[-1] += 1
        else:
            sizes.append(1)
    return sizes


def predict_members(boosters: Sequence, X: np.ndarray, contributions: bool = False) -> np.ndarray:
    """The mean score of the boosters (each up to its best iteration) of rows ``X``; with ``contributions``, the
    mean of their TreeSHAP feature contributions and bias instead (LightGBM's ``pred_contrib``: a column per
    feature, then the expected value; a mean of scores is the mean of their contributions)."""
    threads = 1 if len(X) < 2000 else 0
    scores = [b.predict(X, num_iteration=b.best_iteration or None, num_threads=threads, pred_contrib=contributions)
              for b in boosters]
    return scores[0] if len(scores) == 1 else np.mean(scores, axis=0)


class LTRModel:
    """A trained LightGBM ranker (one booster, or several whose scores are averaged) and the names of the features it
    reads, in column order."""

    def __init__(self, booster, features: Sequence[str], card: dict | None = None, *, init_from: str | None = None,
                 rounds: int | None = None):
        self.boosters = list(booster) if isinstance(booster, (list, tuple)) else [booster]
        if not self.boosters:
            raise ValueError("an LTR model needs at least one booster")
        self.features, self.card = list(features), card or {}
        self.init_from = init_from  # boosting started from this feature, standardized per query
        # 0: cross-validation found no trees better than the init feature alone, which is then the model
        self.rounds = rounds

    @classmethod
    def load(cls, path: str | os.PathLike) -> LTRModel:
        import lightgbm as lgb

        path = Path(path)
        for name in (MODEL_FILE, FEATURES_FILE):
            if not (path / name).is_file():
                raise InputError(f"{path}: not an LTR model directory (no {name}); train one with `weir train ltr`")
        meta = json.loads((path / FEATURES_FILE).read_text())
        members = int(meta.get("members", 1))
        missing = [member_file(m) for m in range(members) if not (path / member_file(m)).is_file()]
        if missing:
            raise InputError(f"{path}: features.json names {members} members, missing {', '.join(missing)}")
        boosters = [lgb.Booster(model_file=str(path / member_file(m))) for m in range(members)]
        features = meta["features"]
        card = json.loads((path / CARD_FILE).read_text()) if (path / CARD_FILE).is_file() else {}
        for booster in boosters:
            if booster.num_feature() != len(features):
                raise InputError(f"{path}: the model reads {booster.num_feature()} features, features.json names "
                                 f"{len(features)}")
        if meta.get("init_from") and meta["init_from"] not in features:
            raise InputError(f"{path}: init_from {meta['init_from']!r} is not one of its features")
        if meta.get("rounds") == 0 and not meta.get("init_from"):
            raise InputError(f"{path}: a model of 0 rounds needs the init_from feature it stands for")
        return cls(boosters, features, card, init_from=meta.get("init_from"), rounds=meta.get("rounds"))

    def save(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        names = [member_file(m) for m in range(len(self.boosters))]
        for name, booster in zip(names, self.boosters):
            booster.save_model(str(path / name), num_iteration=booster.best_iteration or None)
        for stale in path.glob("model.*.txt"):  # members of a model saved here before, beyond this one's
            if stale.name not in names:
                stale.unlink()
        meta = {"features": self.features, **({"init_from": self.init_from} if self.init_from else {}),
                **({"rounds": self.rounds} if self.rounds is not None else {}),
                **({"members": len(self.boosters)} if len(self.boosters) > 1 else {})}
        (path / FEATURES_FILE).write_text(json.dumps(meta, indent=1) + "\n")
        write_card(path, self.card, CARD_FILE)

    def columns(self, available: Sequence[str]) -> list[int]:
        """Positions of this model's features among ``available`` (the extractor's); unknown names are an error."""
        where = {n: i for i, n in enumerate(available)}
        missing = [n for n in self.features if n not in where]
        if missing:
            raise InputError(f"the LTR model reads features this version cannot compute: {', '.join(missing)}")
        return [where[n] for n in self.features]

    def contributions(self, X: np.ndarray, qids: Sequence[str] | None = None,
                      rows: np.ndarray | None = None) -> np.ndarray:
        """What the scores of rows ``X`` (:meth:`predict`) are made of: a column per feature (its TreeSHAP
        contribution; for the ``init_from`` feature, plus its standardized value, which the score adds), then
        the bias (:data:`weir.core.hits.BIAS_PART`, the trees' expected value). Each row sums to its score.
        ``rows``: only these rows' (the standardization still reads every row of their queries)."""
        rows = np.arange(len(X)) if rows is None else np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return np.zeros((0, len(self.features) + 1))
        if self.rounds == 0:
            out = np.zeros((len(rows), len(self.features) + 1))
        else:
            out = np.asarray(predict_members(self.boosters, X[rows], contributions=True), dtype=np.float64)
        if self.init_from:
            if qids is None:
                raise ValueError("this model boosts from a feature: its contributions need the rows' query ids")
            col = self.features.index(self.init_from)
            out[:, col] += base_scores(X, query_groups(list(qids)), col)[rows]
        return out

    def predict(self, X: np.ndarray, qids: Sequence[str] | None = None) -> np.ndarray:
        """Scores of rows ``X`` (this model's columns); ``qids`` (rows grouped by query) is needed when boosting
        started from a feature (``init_from``): that feature, standardized per query, is added."""
        if not len(X):
            return np.zeros(0)
        if self.rounds == 0:  # the init feature alone
            scores = np.zeros(len(X))
        else:
            scores = predict_members(self.boosters, X)
        if self.init_from:
            if qids is None:
                raise ValueError("this model boosts from a feature: predict needs the rows' query ids")
            scores = scores + base_scores(X, query_groups(list(qids)), self.features.index(self.init_from))
        return scores




class LTRReranker(Reranker):
    """Rescore the top ``depth`` candidates of each query with a LightGBM model over
    :mod:`weir.ranker.rerankers.ltr_features`."""

    name = "ltr"

    def __init__(self, index: Index, model: str | os.PathLike | None = None, *, depth: int = 100,
                 device: str | None = None, backend: str | None = None):
        from weir.ranker.rerankers.ltr_features import FeatureExtractor

        self.model_path = Path(model) if model else shipped_model("ltr")
        self.model = LTRModel.load(self.model_path)
        self.extractor = FeatureExtractor(index, device=device, backend=backend)
        self.cols = self.model.columns(self.extractor.names)
        self.depth = depth
        self.model_card = self.model.card
        self.last_timings: dict[str, float] = {}

    def describe(self) -> dict:
        return {**super().describe(), "model_path": str(self.model_path), "features": self.model.features}

    explains = True

    def rerank(self, queries: Sequence[Query], run: Run, depth: int, explain: int = 0) -> Run:
        """Rescore the top ``depth``; with ``explain``, the score of each query's best ``explain`` hits (ties at the
        last included) in its features' contributions and the bias (reasons ``ltr:FEATURE``, ``ltr:(bias)``; NaN
        for the other hits: TreeSHAP costs some 60 microseconds a hit, the features' own extraction much more)."""
        import time

        start = time.perf_counter()
        X, rows = self.extractor.extract(queries, run, depth)
        mid = time.perf_counter()
        qids = [qid for qid, _ in rows]
        scores = self.model.predict(X[:, self.cols], qids)
        self.last_timings = {"features": mid - start, "predict": time.perf_counter() - mid}
        by_query: dict[str, list[float]] = {}
        for qid, s in zip(qids, scores):
            by_query.setdefault(qid, []).append(float(s))
        reasons = self._reasons(X, qids, scores, explain) if explain else None
        return apply_scores(queries, run, depth, by_query, self.name, reasons)

    def _reasons(self, X: np.ndarray, qids: list[str], scores: np.ndarray, top: int) -> dict[str, dict]:
        """Per query, ``{part: values}`` over its rescored hits (in run order): the contributions of its ``top``
        best (by score, every hit tied with the last of them included), NaN elsewhere."""
        import time

        start = time.perf_counter()
        spans: dict[str, list[int]] = {}
        for i, qid in enumerate(qids):
            spans.setdefault(qid, [i, i])[1] = i + 1
        chosen = []
        for a, b in spans.values():
            block = scores[a:b]
            kth = np.sort(block)[::-1][min(top, len(block)) - 1]
            chosen.append(np.flatnonzero(block >= kth) + a)
        rows = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
        parts = np.full((len(qids), len(self.model.features) + 1), np.nan)
        parts[rows] = self.model.contributions(X[:, self.cols], qids, rows)
        names = [*self.model.features, BIAS_PART]
        self.last_timings["explain"] = time.perf_counter() - start
        return {qid: {n: parts[a:b, j] for j, n in enumerate(names)} for qid, (a, b) in spans.items()}
