"""What the trainers share: a training set described on the command line, query splits and folds, and
cross-validation over queries (each fold scored by a model fitted on the other folds only, the folds' runs joined
into one run and evaluated against the first stage's)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from weir.evaluation.measures import evaluate
from weir.core.provenance import write_card
from weir.core.types import InputError, Run


@dataclass
class DataSet:
    """One source of training queries: an index, topics and qrels, and candidates from a run file or a first stage."""

    index: str
    topics: str
    qrels: str
    candidates: str | None = None
    first_stage: str = "hybrid"
    depth: int = 100
    max_queries: int | None = None
    stage_runs: str | None = None  # "NAME:RUN[;NAME:RUN]": earlier stages' scores of the candidates (stage features)

    @classmethod
    def parse(cls, text: str) -> DataSet:
        """``index=DIR,topics=FILE,qrels=FILE[,candidates=RUN][,first_stage=NAME][,depth=N][,max_queries=N]
        [,stage_runs=NAME:RUN[;NAME:RUN]]``."""
        values: dict = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or key.strip() not in cls.__dataclass_fields__:
                raise InputError(f"bad training set {text!r}: expected key=value pairs with keys "
                                 f"{', '.join(cls.__dataclass_fields__)}")
            values[key.strip()] = value.strip()
        for key in ("depth", "max_queries"):
            if key in values:
                values[key] = int(values[key])
        missing = [k for k in ("index", "topics", "qrels") if k not in values]
        if missing:
            raise InputError(f"training set {text!r} lacks {', '.join(missing)}")
        return cls(**values)


@dataclass(frozen=True)
class TrainingSource:
    """Training judgments over one collection: ``COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]]`` on the command line. A
    trainer that takes several weighs each by ``WEIGHT`` (default 1); ``MIN_REL`` is the grade counted relevant in
    these qrels (default: the trainer's, 1 unless told; 2 for TREC DL's graded judgments)."""

    collection: str
    topics: str
    qrels: str
    weight: float = 1.0
    min_rel: int | None = None

    @classmethod
    def parse(cls, text: str) -> TrainingSource:
        parts = text.split(":")
        if not 3 <= len(parts) <= 5 or not all(p.strip() for p in parts):
            raise InputError(f"training set {text!r}: expected COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]]")
        try:
            weight = float(parts[3]) if len(parts) > 3 else 1.0
            min_rel = int(parts[4]) if len(parts) > 4 else None
        except ValueError:
            raise InputError(f"training set {text!r}: WEIGHT is a number and MIN_REL an integer grade") from None
        if not weight > 0:
            raise InputError(f"training set {text!r}: the weight must be positive (got {weight})")
        for p in parts[:3]:
            if not Path(p).exists():
                raise InputError(f"training set {text!r}: {p} does not exist")
        return cls(*(p.strip() for p in parts[:3]), weight=weight, min_rel=min_rel)


def seeds_of_members(seed: int, members: int) -> list[int]:
    """The seeds of a model of several members that differ only in their seed (`weir train ltr|deepimpact|deepct
    --members N`): ``seed``, ``seed + 1000``, ..."""
    if members < 1:
        raise InputError(f"--members must be at least 1, got {members}")
    return [seed + 1000 * m for m in range(members)]


def split(qids: Sequence[str], fraction: float, seed: int) -> tuple[set[str], set[str]]:
    """(training, validation) query ids: a seeded ``fraction`` of the queries held out."""
    order = sorted(set(qids))
    rng = np.random.default_rng(seed)
    rng.shuffle(order)
    n_val = int(round(len(order) * fraction)) if fraction > 0 else 0
    return set(order[n_val:]), set(order[:n_val])


def folds_of(qids: Iterable[str], folds: int, seed: int) -> list[set[str]]:
    """``folds`` disjoint sets of query ids covering ``qids`` (a seeded shuffle dealt round-robin)."""
    order = sorted(set(qids))
    rng = np.random.default_rng(seed)
    rng.shuffle(order)
    return [set(order[i::folds]) for i in range(folds)]


# fit_and_score(training query ids, test query ids) -> (the test queries' run, a record of the fold)
FitAndScore = Callable[[set[str], set[str]], tuple[Run, dict]]


def cross_validate(kind: str, qids: Iterable[str], folds: int, seed: int, fit_and_score: FitAndScore, *,
                   first_run: Run, qrels: dict, measures: Sequence[str], binary_min_rel: int = 1,
                   cv_run: str | None = None, log: Callable[[str], None] = print) -> dict:
    """Score every query by a model fitted on the other folds; evaluate the joined run (``measures``) against
    ``first_run``; write it to ``cv_run`` when given. Returns the card's ``cross_validation`` record."""
    all_q = set(qids)
    scored, per_fold = Run(), []
    for f, test in enumerate(folds_of(all_q, folds, seed)):
        log(f"fold {f + 1}/{folds}: training on {len(all_q - test)} queries, scoring {len(test)}")
        run, info = fit_and_score(all_q - test, test)
        scored.update(run)
        fold_qrels = {q: qrels[q] for q in test if q in qrels}
        fold = {f"{kind}_nDCG@10": evaluate(run, fold_qrels, ["nDCG@10"], binary_min_rel=binary_min_rel)["nDCG@10"],
                "first_stage_nDCG@10": evaluate(Run({q: first_run.get(q, []) for q in test}), fold_qrels, ["nDCG@10"],
                                                binary_min_rel=binary_min_rel)["nDCG@10"]}
        log(f"fold {f + 1}/{folds}: nDCG@10 {fold[f'{kind}_nDCG@10']:.4f} (first stage "
            f"{fold['first_stage_nDCG@10']:.4f})")
        per_fold.append({"fold": f, "test_queries": len(test), **fold, **info})
    first = evaluate(first_run, qrels, measures, binary_min_rel=binary_min_rel)
    cv = evaluate(scored, qrels, measures, binary_min_rel=binary_min_rel)
    record = {"folds": folds, "first_stage": first, kind: cv, "per_fold": per_fold}
    if cv_run:
        scored.write_trec(cv_run, tag=f"{kind}_cv")
        record["run"] = cv_run
    log(f"{folds}-fold cross-validation over {len(all_q)} queries: nDCG@10 {cv['nDCG@10']:.4f} (first stage "
        f"{first['nDCG@10']:.4f})" + (f" -> {cv_run}" if cv_run else ""))
    return record


def fit_and_write(kind: str, config, card: dict, qids: Iterable[str], fit_and_score: FitAndScore,
                  fit_all: Callable[[set[str], Path], dict], *, first_run: Run, qrels: dict,
                  measures: Sequence[str], log: Callable[[str], None] = print) -> dict:
    """What a trainer does with its settings ``config`` (``folds``, ``seed``, ``cv_run``, ``binary_min_rel``,
    ``cv_only``, ``out``): cross-validate when asked; then, unless ``cv_only``, fit on every query with
    ``fit_all(queries, out)`` (which writes the model's files and returns the fit's record); write the model card
    (``cv-card.json`` with ``cv_only``). Returns the card."""
    qids = set(qids)
    if config.folds:
        card["metrics"]["cross_validation"] = cross_validate(
            kind, qids, config.folds, config.seed, fit_and_score, first_run=first_run, qrels=qrels,
            measures=measures, binary_min_rel=config.binary_min_rel, cv_run=config.cv_run, log=log)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    if config.cv_only:
        write_card(out, card, "cv-card.json")
        card["metrics"]["final"] = {"train_seconds": None}
        return card
    card["metrics"]["final"] = fit_all(qids, out)
    write_card(out, card)
    return card
