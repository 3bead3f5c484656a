"""LightGBM learning-to-rank reranker: features of each (query, candidate) pair (:mod:`weir.ranker.rerankers.ltr_features`),
scored by a lambdarank model trained with `weir train ltr` (:mod:`weir.training.ltr`).

A model directory holds ``model.txt`` (LightGBM's text format), ``features.json`` (the feature names, in the model's
column order) and ``card.json`` (the model card: training data, command, parameters, metrics, importance). A model of
several members (`weir train ltr --set members=N`: boosters that differ only in their random seed, whose scores are
averaged) keeps its further members in ``model.1.txt``, ``model.2.txt``, ...: LightGBM has no format for an average
of boosters, and the average is what takes the seed's luck out of row and feature sampling.

**Risk-aware scores.** The members of such a model agree where the training data pinned a candidate's score down
and disagree where it did not. A model of several members keeps that spread (the standard deviation of the members'
scores, ``stage_scores["ltr_spread"]``) and ranks by the mean minus ``risk`` times the spread: a candidate the trees
would lift only by luck moves less. ``risk`` is chosen on the training queries (`weir train ltr --set members=N`,
:mod:`weir.training.ltr.risk`) and recorded in ``features.json``; the ``ltr_risk`` option sets another (0: the mean).
Measured on six collections, each left out, the seeds' spread hardly tracks which moves lose (``models/ltr-members``
is shipped, not the default: ``research/notebook.md``, stop 59).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from weir.core.hits import BIAS_PART, RISK_PART
from weir.indexer.index_dir import Index
from weir.ranker.options import check_risk
from weir.ranker.rerankers.tree_shap import TreeShap
from weir.ranker.stage import Reranker, apply_scores
from weir.core.provenance import write_card
from weir.core.runtime import shipped_model
from weir.core.types import InputError, Query, Run

MODEL_FILE, FEATURES_FILE, CARD_FILE = "model.txt", "features.json", "card.json"
SPREAD_STAGE = "ltr_spread"  # the stage score that holds a several-member model's spread


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


def member_predictions(boosters: Sequence, X: np.ndarray) -> np.ndarray:
    """Each booster's score (up to its best iteration) of rows ``X``: an array of (members, rows)."""
    threads = 1 if len(X) < 2000 else 0
    return np.stack([b.predict(X, num_iteration=b.best_iteration or None, num_threads=threads) for b in boosters])


def risk_adjusted(members: np.ndarray, risk: float) -> tuple[np.ndarray, np.ndarray]:
    """From the members' scores (members, rows): the risk-aware score, mean minus ``risk`` times the spread (the
    members' standard deviation, 0 for one member), and the spread."""
    mean = members.mean(axis=0)
    spread = members.std(axis=0) if len(members) > 1 else np.zeros(members.shape[1])
    return (mean - risk * spread if risk else mean), spread


class LTRModel:
    """A trained LightGBM ranker (one booster, or several whose scores are averaged) and the names of the features it
    reads, in column order."""

    def __init__(self, booster, features: Sequence[str], card: dict | None = None, *, init_from: str | None = None,
                 rounds: int | None = None, risk: float = 0.0):
        self.boosters = list(booster) if isinstance(booster, (list, tuple)) else [booster]
        if not self.boosters:
            raise ValueError("an LTR model needs at least one booster")
        self.features, self.card = list(features), card or {}
        self.init_from = init_from  # boosting started from this feature, standardized per query
        # 0: cross-validation found no trees better than the init feature alone, which is then the model
        self.rounds = rounds
        # the spread's weight it ranks by (chosen in training)
        self.risk = check_risk(risk, "the model's risk", members=len(self.boosters))
        # the members' TreeSHAP tables (None: too deep, LightGBM's pred_contrib), made at the first explained call
        self._shap: list[TreeShap | None] | None = None
        self._shap_lock = threading.Lock()

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
        try:
            return cls(boosters, features, card, init_from=meta.get("init_from"), rounds=meta.get("rounds"),
                       risk=meta.get("risk", 0.0))
        except InputError as e:
            raise InputError(f"{path}: features.json: {e}") from None

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
                **({"members": len(self.boosters)} if len(self.boosters) > 1 else {}),
                **({"risk": self.risk} if self.risk else {})}
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
            parts = [b.predict(X[rows], num_iteration=b.best_iteration or None, num_threads=1, pred_contrib=True)
                     if shap is None else shap.contributions(X[rows])  # a mean of scores: the mean of their parts
                     for b, shap in zip(self.boosters, self._tree_shap())]
            out = parts[0] if len(parts) == 1 else np.mean(parts, axis=0)
        if self.init_from:
            if qids is None:
                raise ValueError("this model boosts from a feature: its contributions need the rows' query ids")
            col = self.features.index(self.init_from)
            out[:, col] += base_scores(X, query_groups(list(qids)), col)[rows]
        return out

    def _tree_shap(self) -> list[TreeShap | None]:
        with self._shap_lock:
            if self._shap is None:
                self._shap = [TreeShap.of(b, b.best_iteration or None) for b in self.boosters]
        return self._shap

    def predict(self, X: np.ndarray, qids: Sequence[str] | None = None, risk: float | None = None) -> np.ndarray:
        """Scores of rows ``X`` (this model's columns): :meth:`scored`'s, without the spread."""
        return self.scored(X, qids, risk)[0]

    def scored(self, X: np.ndarray, qids: Sequence[str] | None = None,
               risk: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Scores of rows ``X`` (this model's columns) and the members' spread of each (0 for one member): the
        members' mean minus ``risk`` (default: the model's own) times the spread. ``qids`` (rows grouped by query) is
        needed when boosting started from a feature (``init_from``): that feature, standardized per query, is
        added."""
        if not len(X):
            return np.zeros(0), np.zeros(0)
        if self.rounds == 0:  # the init feature alone
            scores, spread = np.zeros(len(X)), np.zeros(len(X))
        else:
            scores, spread = risk_adjusted(member_predictions(self.boosters, X),
                                           self.risk if risk is None else risk)
        if self.init_from:
            if qids is None:
                raise ValueError("this model boosts from a feature: predict needs the rows' query ids")
            scores = scores + base_scores(X, query_groups(list(qids)), self.features.index(self.init_from))
        return scores, spread


def per_query(qids: Sequence[str], values: np.ndarray) -> dict[str, list[float]]:
    """Values of rows grouped by query, as lists per query id."""
    out: dict[str, list[float]] = {}
    for qid, v in zip(qids, values):
        out.setdefault(qid, []).append(float(v))
    return out


class LTRReranker(Reranker):
    """Rescore the top ``depth`` candidates of each query with a LightGBM model over
    :mod:`weir.ranker.rerankers.ltr_features`."""

    name = "ltr"

    def __init__(self, index: Index, model: str | os.PathLike | None = None, *, depth: int = 100,
                 device: str | None = None, backend: str | None = None, risk: float | None = None):
        from weir.ranker.rerankers.ltr_features import FeatureExtractor

        self.model_path = Path(model) if model else shipped_model("ltr")
        self.model = LTRModel.load(self.model_path)
        try:
            self.risk = self.model.risk if risk is None else check_risk(risk, members=len(self.model.boosters))
        except InputError as e:
            raise InputError(f"{e} ({self.model_path})") from None
        self.extractor = FeatureExtractor(index, device=device, backend=backend)
        self.cols = self.model.columns(self.extractor.names)
        self.depth = depth
        self.model_card = self.model.card
        self.last_timings: dict[str, float] = {}

    def describe(self) -> dict:
        return {**super().describe(), "model_path": str(self.model_path), "features": self.model.features,
                "members": len(self.model.boosters), "risk": self.risk}

    explains = True

    def rerank(self, queries: Sequence[Query], run: Run, depth: int, explain: int = 0) -> Run:
        """Rescore the top ``depth`` (a model of several members: its spread kept as ``stage_scores["ltr_spread"]``);
        with ``explain``, the score of each query's best ``explain`` hits (ties at the last included) in its features'
        contributions, the bias and the risk penalty (reasons ``ltr:FEATURE``, ``ltr:(bias)``, ``ltr:(risk)``; NaN
        for the other hits: TreeSHAP costs about 13 microseconds a hit and member from the tables of
        :mod:`~weir.ranker.rerankers.tree_shap`, 55 through LightGBM)."""
        import time

        start = time.perf_counter()
        X, rows = self.extractor.extract(queries, run, depth)
        mid = time.perf_counter()
        qids = [qid for qid, _ in rows]
        scores, spread = self.model.scored(X[:, self.cols], qids, self.risk)
        self.last_timings = {"features": mid - start, "predict": time.perf_counter() - mid}
        by_query, spreads = per_query(qids, scores), per_query(qids, spread)
        reasons = self._reasons(X, qids, scores, spread, explain) if explain else None
        also = {SPREAD_STAGE: spreads} if len(self.model.boosters) > 1 else None
        return apply_scores(queries, run, depth, by_query, self.name, reasons, also=also)

    def _reasons(self, X: np.ndarray, qids: list[str], scores: np.ndarray, spread: np.ndarray,
                 top: int) -> dict[str, dict]:
        """Per query, ``{part: values}`` over its rescored hits (in run order): the contributions of its ``top``
        best (by score, every hit tied with the last of them included), and with a risk, its penalty; NaN
        elsewhere."""
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
        names = [*self.model.features, BIAS_PART, *([RISK_PART] if self.risk else [])]
        parts = np.full((len(qids), len(names)), np.nan)
        parts[rows, :len(self.model.features) + 1] = self.model.contributions(X[:, self.cols], qids, rows)
        if self.risk:
            parts[rows, -1] = -self.risk * spread[rows]
        self.last_timings["explain"] = time.perf_counter() - start
        return {qid: {n: parts[a:b, j] for j, n in enumerate(names)} for qid, (a, b) in spans.items()}
