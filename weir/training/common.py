"""What the trainers share: a training set (:class:`TrainingSet`, the one type of a set of training judgments given on
the command line), the seeds of a model's members, and cross-validation over queries (each fold scored by a model
fitted on the other folds only, the folds' runs joined into one run and evaluated against the first stage's; the
folds themselves are :mod:`weir.evaluation.folds`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from weir.evaluation.folds import folds_of
from weir.evaluation.measures import evaluate
from weir.core.provenance import write_card
from weir.core.types import InputError, Run


@dataclass(frozen=True, kw_only=True)
class TrainingSet:
    """One set of training judgments, as given on the command line: topics and qrels, with where their documents are
    (a ``collection``, or an ``index`` of it) and how a trainer takes them. Each trainer reads the fields it
    :meth:`needs <checked>`:

    - term weighting and quality (``--train``): ``collection``, ``weight`` (the set's share among several, default 1)
      and ``min_rel`` (the grade counted relevant in these qrels; default: the trainer's ``--min-rel``);
    - LTR (``--also``; the first set from its own flags) and the attention reranker (``--also``): ``index``, and the
      candidates: a TREC run (``candidates``) or a ``first_stage`` pipeline over the index, top ``depth`` each;
      ``max_queries`` (a seeded sample) and ``stage_runs`` (``NAME:RUN[;NAME:RUN]``: earlier stages' scores of the
      candidates, LTR's stage features).

    Two spellings (:meth:`parse`): ``COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]]`` and ``key=value,...``."""

    collection: str | None = None
    index: str | None = None
    topics: str
    qrels: str
    weight: float = 1.0
    min_rel: int | None = None
    candidates: str | None = None
    first_stage: str = "hybrid"
    depth: int = 100
    max_queries: int | None = None
    stage_runs: str | None = None

    @classmethod
    def of(cls, spec: TrainingSet | str) -> TrainingSet:
        """``spec`` itself, or the set its text spells (:meth:`parse`)."""
        return spec if isinstance(spec, TrainingSet) else cls.parse(spec)

    @classmethod
    def parse(cls, text: str) -> TrainingSet:
        """``COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]]`` (its three files must exist), or ``key=value`` pairs
        separated by commas with keys among the fields (``index=DIR,topics=FILE,qrels=FILE,candidates=RUN``...)."""
        if text.partition("=")[0].strip() in cls.__dataclass_fields__:
            return cls._parse_pairs(text)
        parts = text.split(":")
        if not 3 <= len(parts) <= 5 or not all(p.strip() for p in parts):
            raise InputError(f"training set {text!r}: expected COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]] or "
                             f"key=value pairs with keys {', '.join(cls.__dataclass_fields__)}")
        for p in parts[:3]:
            if not Path(p).exists():
                raise InputError(f"training set {text!r}: {p} does not exist")
        collection, topics, qrels = (p.strip() for p in parts[:3])
        return cls._typed(text, {"collection": collection, "topics": topics, "qrels": qrels,
                                 **dict(zip(("weight", "min_rel"), parts[3:]))})

    @classmethod
    def _parse_pairs(cls, text: str) -> TrainingSet:
        """The ``key=value,...`` spelling: every key a field, ``topics`` and ``qrels`` given."""
        values: dict = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or key.strip() not in cls.__dataclass_fields__:
                raise InputError(f"bad training set {text!r}: expected key=value pairs with keys "
                                 f"{', '.join(cls.__dataclass_fields__)}")
            values[key.strip()] = value.strip()
        missing = [k for k in ("topics", "qrels") if k not in values]
        if missing:
            raise InputError(f"training set {text!r} lacks {', '.join(missing)}")
        return cls._typed(text, values)

    @classmethod
    def _typed(cls, text: str, values: dict) -> TrainingSet:
        """The set of ``values`` (strings), its numbers read: ``weight`` positive, ``min_rel`` a grade."""
        try:
            for key, kind in (("weight", float), ("min_rel", int), ("depth", int), ("max_queries", int)):
                if key in values:
                    values[key] = kind(values[key])
        except ValueError:
            raise InputError(f"training set {text!r}: WEIGHT is a number, MIN_REL an integer grade, depth and "
                             "max_queries integers") from None
        if not values.get("weight", 1.0) > 0:
            raise InputError(f"training set {text!r}: the weight must be positive (got {values['weight']})")
        return cls(**values)

    def checked(self, trainer: str, needs: Sequence[str], takes: Sequence[str] = ()) -> TrainingSet:
        """This set, if ``trainer`` can use it: every field of ``needs`` given, and no field outside ``needs``,
        ``takes``, ``topics`` and ``qrels`` set away from its default (a trainer would silently ignore it)."""
        missing = [k for k in needs if getattr(self, k) is None]
        ignored = [k for k, f in self.__dataclass_fields__.items()
                   if k not in (*needs, *takes, "topics", "qrels") and getattr(self, k) != f.default]
        if missing or ignored:
            wanted = ", ".join(f"{k}=" for k in (*needs, "topics", "qrels"))
            raise InputError(f"training set of {self.topics}: {trainer} needs {wanted}"
                             + (f" (missing: {', '.join(missing)})" if missing else "")
                             + (f"; it does not take {', '.join(ignored)}" if ignored else ""))
        return self

    def record(self, fields: Sequence[str]) -> dict:
        """``fields`` of this set, in that order: what a model card's ``training_data`` says of it."""
        return {k: getattr(self, k) for k in fields}


def check_training_topics(index, topics_path: str, allow_test_topics: bool = False) -> None:
    """InputError when ``topics_path`` is the evaluation (test) topics of the collection ``index`` was built from:
    what a tuner fits must never see them (``allow_test_topics`` only for a deliberate oracle experiment)."""
    collection_root = Path(index.manifest["collection"]["path"])
    if not allow_test_topics and Path(topics_path).resolve() == (collection_root / "queries.tsv").resolve():
        raise InputError(f"{topics_path} is the collection's evaluation (test) topics: tune on a training split "
                         "(e.g. queries.train.tsv); pass --allow-test-topics only for a deliberate oracle experiment")


def seeds_of_members(seed: int, members: int) -> list[int]:
    """The seeds of a model of several members that differ only in their seed (`weir train ltr|deepimpact|deepct
    --members N`): ``seed``, ``seed + 1000``, ..."""
    if members < 1:
        raise InputError(f"--members must be at least 1, got {members}")
    return [seed + 1000 * m for m in range(members)]


# fit_and_score(training query ids, test query ids) -> (the test queries' run, a record of the fold)
FitAndScore = Callable[[set[str], set[str]], tuple[Run, dict]]


def cross_validate(kind: str, qids: Iterable[str], folds: int, seed: int, fit_and_score: FitAndScore, *,
                   first_run: Run, qrels: dict, measures: Sequence[str], min_rel: int = 1,
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
        fold = {f"{kind}_nDCG@10": evaluate(run, fold_qrels, ["nDCG@10"], min_rel=min_rel)["nDCG@10"],
                "first_stage_nDCG@10": evaluate(Run({q: first_run.get(q, []) for q in test}), fold_qrels, ["nDCG@10"],
                                                min_rel=min_rel)["nDCG@10"]}
        log(f"fold {f + 1}/{folds}: nDCG@10 {fold[f'{kind}_nDCG@10']:.4f} (first stage "
            f"{fold['first_stage_nDCG@10']:.4f})")
        per_fold.append({"fold": f, "test_queries": len(test), **fold, **info})
    first = evaluate(first_run, qrels, measures, min_rel=min_rel)
    cv = evaluate(scored, qrels, measures, min_rel=min_rel)
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
    """What a trainer does with its settings ``config`` (``folds``, ``seed``, ``cv_run``, ``min_rel``,
    ``cv_only``, ``out``): cross-validate when asked; then, unless ``cv_only``, fit on every query with
    ``fit_all(queries, out)`` (which writes the model's files and returns the fit's record); write the model card
    (``cv-card.json`` with ``cv_only``). Returns the card."""
    qids = set(qids)
    if config.folds:
        card["metrics"]["cross_validation"] = cross_validate(
            kind, qids, config.folds, config.seed, fit_and_score, first_run=first_run, qrels=qrels,
            measures=measures, min_rel=config.min_rel, cv_run=config.cv_run, log=log)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    if config.cv_only:
        write_card(out, card, "cv-card.json")
        card["metrics"]["final"] = {"train_seconds": None}
        return card
    card["metrics"]["final"] = fit_all(qids, out)
    write_card(out, card)
    return card
