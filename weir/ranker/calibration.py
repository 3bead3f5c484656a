"""Calibrated relevance: each hit's probability of being relevant, from its score and its query's scores.

A pipeline's score means nothing outside the pipeline that made it (a BM25 sum, a cosine, a fused rank score, an LTR
margin), and its scale moves from query to query: one global threshold on raw scores keeps too many hits of one query
and too few of the next. Here a query-dependent mapping (the Cosine Adapter's idea: map each query's raw scores to an
interpretable relevance score, then threshold once) turns a hit's score into P(relevant): a logistic regression on
the hit's score set against its query's top :data:`WINDOW` scores (:data:`FEATURES`: the score, its distance below
the top, its z-score in the top, the log of its rank, the gap between the first two, their spread, the query's
words). The probabilities of one query never rise down the ranking (each is at most the one above it), so a cutoff
(``min_relevance``) keeps a prefix of the ranking: possibly none of it.

``weir tune calibration`` fits one per pipeline on training judgments (:mod:`weir.training.calibration`, which owns
the fitting; this module only applies what it wrote) into ``<index>/tuning/calibration.json``, beside the fusion
settings. Each entry is versioned and records what the pipeline was when fitted
(:func:`weir.ranker.registry.score_identity`: its stages' options, its rerankers' model cards, the fusion
settings); a pipeline built later is calibrated only by an entry of the same identity, else it is served
uncalibrated, with a warning naming what changed, never with probabilities fitted to other scores. A logistic
regression is a dot product and a sigmoid: numpy, written here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from weir.core.hits import Ranked
from weir.core.types import InputError, Query, Run

log = logging.getLogger(__name__)

VERSION = 1
TUNING_FILE = Path("tuning") / "calibration.json"
WINDOW = 10  # the top scores a query's distribution is read from
FEATURES = ("score", "below_top", "zscore", "log_rank", "top_gap", "spread", "query_words")


def calibration_path(index) -> Path:
    return Path(index.path) / TUNING_FILE


def hit_features(scores: np.ndarray, query: str, window: int = WINDOW) -> np.ndarray:
    """The :data:`FEATURES` of each hit of one query (rows, best first) from its scores and its text: the
    distribution is that of the top ``window`` scores, whatever the number of hits asked for, so that a hit's
    features (and relevance) do not depend on k."""
    from weir.indexer.weighting.terms import words

    s = np.asarray(scores, dtype=np.float64)
    n = len(s)
    out = np.zeros((n, len(FEATURES)))
    if not n:
        return out
    top = s[:window]
    spread = float(top.std())
    out[:, 0] = s
    out[:, 1] = s - top[0]
    out[:, 2] = (s - top.mean()) / spread if spread > 0 else 0.0
    out[:, 3] = np.log(np.arange(1, n + 1))
    out[:, 4] = top[0] - top[1] if len(top) > 1 else 0.0
    out[:, 5] = spread
    out[:, 6] = np.log1p(len({w.lower() for w in words(query)}))
    return out


@dataclass(frozen=True)
class Calibration:
    """One pipeline's fitted mapping (standardize the features, then a logistic regression) and its record."""

    pipeline: str
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    window: int = WINDOW
    record: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, pipeline: str, entry: Mapping[str, Any], where: str = "calibration") -> Calibration:
        """The calibration of an entry of the tuning file; InputError for one this version cannot read."""
        if entry.get("version") != VERSION:
            raise InputError(f"{where}: {pipeline!r} was calibrated by calibration version {entry.get('version')!r}, "
                             f"this weir reads version {VERSION}: run `weir tune calibration` again")
        if list(entry.get("features", ())) != list(FEATURES):
            raise InputError(f"{where}: {pipeline!r} uses features {entry.get('features')}, this weir computes "
                             f"{list(FEATURES)}: run `weir tune calibration` again")
        try:
            arrays = [np.asarray(entry[k], dtype=np.float64) for k in ("mean", "scale", "coef")]
            intercept, window = float(entry["intercept"]), int(entry["window"])
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{where}: malformed entry for {pipeline!r} ({e}); "
                             "run `weir tune calibration` again") from None
        if any(a.shape != (len(FEATURES),) or not np.isfinite(a).all() for a in arrays) or window < 1 \
                or not np.isfinite(intercept) or (arrays[1] <= 0).any():
            raise InputError(f"{where}: malformed entry for {pipeline!r}; run `weir tune calibration` again")
        return cls(pipeline, *arrays, intercept, window, dict(entry))

    def entry(self) -> dict[str, Any]:
        """What the tuning file holds for this calibration (its record, then the fitted numbers)."""
        return {**self.record, "version": VERSION, "features": list(FEATURES), "window": self.window,
                "mean": self.mean.tolist(), "scale": self.scale.tolist(), "coef": self.coef.tolist(),
                "intercept": self.intercept}

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """P(relevant) of feature rows, as fitted (no ordering imposed)."""
        z = ((features - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(z, -60.0, 60.0)))

    def relevance(self, scores: np.ndarray, query: str) -> np.ndarray:
        """P(relevant) of each hit of one query (best first), never above the hit before it."""
        p = self.probabilities(hit_features(scores, query, self.window))
        return np.minimum.accumulate(p) if len(p) else p

    def apply(self, queries: Sequence[Query], run: Run) -> Run:
        """``run`` with each query's hits carrying their relevance (:attr:`weir.core.hits.Ranked.relevance`)."""
        texts = {q.id: q.text for q in queries}
        out = Run(timings=run.timings)
        for qid in run:
            hits = run.ranking(qid)
            out[qid] = hits.with_relevance(self.relevance(hits.scores, texts.get(qid, "")))
        return out


def read_file(index) -> dict[str, Any] | None:
    """The index's calibration file as it is (None when it has none); InputError for one that is not JSON."""
    path = calibration_path(index)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: malformed calibration file ({e}); run `weir tune calibration` again") from None
    if not isinstance(data, dict) or not isinstance(data.get("pipelines"), dict):
        raise InputError(f"{path}: malformed calibration file (no 'pipelines'); run `weir tune calibration` again")
    return data


def calibration_for(index, spec: str, identity: Callable[[], Mapping[str, Any]]) -> Calibration | None:
    """The calibration of pipeline ``spec`` (canonical) over ``index`` when the index has one fitted for a pipeline
    of the identity ``identity()`` gives (asked only when there is an entry); None (with a warning when one was
    fitted for another identity) otherwise."""
    data = read_file(index)
    entry = (data or {}).get("pipelines", {}).get(spec)
    if entry is None:
        return None
    calibration = Calibration.from_entry(spec, entry, str(calibration_path(index)))
    fitted, identity = entry.get("identity"), json.loads(json.dumps(identity()))
    if fitted != identity:
        changed = sorted(k for k in set(fitted or {}) | set(identity) if (fitted or {}).get(k) != identity.get(k))
        log.warning("%s: the calibration of %s was fitted for another configuration (%s changed since); %s is "
                    "served uncalibrated: run `weir tune calibration` again", calibration_path(index), spec,
                    ", ".join(changed) or "everything", spec)
        return None
    return calibration


def cut(hits: Ranked, min_relevance: float | None) -> Ranked:
    """The hits at or above ``min_relevance`` (a prefix: relevance never rises down a ranking); no hits stay none."""
    if min_relevance is None or not len(hits):
        return hits
    if hits.relevance is None:
        raise InputError("min_relevance needs calibrated hits")
    return hits.take(slice(int((hits.relevance >= min_relevance).sum())))


def check_min_relevance(value: float | None) -> float | None:
    """``value`` when it is a probability (0 to 1), else InputError."""
    if value is None:
        return None
    if not (isinstance(value, (int, float)) and 0.0 <= float(value) <= 1.0):
        raise InputError(f"min_relevance is a probability, between 0 and 1 (got {value!r})")
    return float(value)
