"""The settings of `weir train ltr` (:class:`TrainConfig`): the training sets (the fields of a
:class:`~weir.training.common.TrainingSet` LTR reads), the members' seeds, the LightGBM parameters and the init
feature's column they make."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from weir.evaluation.folds import split
from weir.evaluation.risk import RISK_ALPHA
from weir.ranker.options import PipelineOptions, check_risk
from weir.training.common import TrainingSet, seeds_of_members
from weir.training.ltr.boosting import monotone_constraints
from weir.core.types import InputError

# the fields of a training set that LTR reads, as its card's training_data records them; it needs an index
SET_FIELDS = ("index", "topics", "qrels", "candidates", "first_stage", "depth", "max_queries", "stage_runs")
ROUNDS_RULES = ("1se", "1se-paired", "best")  # how inner cross-validation chooses the rounds (rounds_rule)
INNER_BY = ("queries", "sets")  # what inner cross-validation holds out (inner_by)


@dataclass
class TrainConfig:
    sets: list[TrainingSet]  # checked against SET_FIELDS
    out: str
    folds: int = 0
    cv_run: str | None = None
    val_fraction: float = 0.2
    seed: int = 13
    rounds: int | None = None  # boosting rounds at most; None: 300 with rounds_by cv, 1000 with holdout
    early_stopping: int = 50
    params: dict = field(default_factory=dict)
    options: PipelineOptions = field(default_factory=PipelineOptions)  # of the first stages giving candidates
    rounds_by: str = "cv"  # cv: inner cross-validation over the training queries; holdout: early stopping
    rounds_rule: str = "1se-paired"  # cv: the fewest rounds within one (paired) standard error of the best, or best
    init_from: str | None = None  # boost from this feature (standardized per query) instead of from zero
    monotone: bool = False  # constrain every feature of known direction (DIRECTION) to act in that direction
    inner_folds: int = 4
    inner_by: str = "queries"  # cv: inner folds of every set's queries, or one whole training set held out at a time
    min_rel: int = 1  # the lowest grade counted relevant (2 for TREC DL)
    members: int = 1  # boosters that differ only in their seed (member_seeds), their scores averaged
    # the weight of the members' spread the model ranks by (mean - risk * spread); None: chosen on the training
    # queries out of fold (weir.training.ltr.risk; rounds_by cv and several members, else 0)
    risk: float | None = None
    # the share of each set's training queries each member trains on, drawn by its seed (member_sample): below 1,
    # the members differ in the queries they saw, and their spread measures what the training data leave open
    member_queries: float = 1.0
    # each member leaves one training set out (member m: set m mod the number of sets; member_sample), so the members
    # differ in the collections they saw and their spread measures what the choice of collections leaves open: a
    # move on a collection none of them saw that only some collections taught
    member_sets: bool = False
    risk_alpha: float = RISK_ALPHA  # the URisk alpha the risk is chosen by
    command: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.rounds is None:
            self.rounds = 300 if self.rounds_by == "cv" else 1000
        if self.risk is not None:
            self.risk = check_risk(self.risk, "risk", members=self.members)
        if not 0 < self.member_queries <= 1:
            raise InputError(f"member_queries is a share of the training queries, in (0, 1] (got "
                             f"{self.member_queries})")
        if self.member_sets and self.members < 2:
            raise InputError(f"member_sets leaves one training set out of each member and needs at least 2 members "
                             f"(got {self.members})")
        if not self.risk_alpha >= 0:
            raise InputError(f"risk_alpha must be at least 0 (got {self.risk_alpha})")


def member_seeds(config: TrainConfig) -> list[int]:
    """The seeds of the members (:func:`seeds_of_members`); each member's LightGBM row and feature sampling, and its
    inner folds (:func:`~weir.training.ltr.rounds.rounds_by_cv`)."""
    return seeds_of_members(config.seed, config.members)


def member_sample(config: TrainConfig, member: int, j: int, pool: set[str], sets: int) -> set[str]:
    """The training queries of set ``j`` (of ``pool``; ``sets`` training sets in all) that member ``member`` trains
    on: none when ``member_sets`` leaves that set out of it (:func:`left_out_set`), else a ``member_queries`` share
    drawn by its seed (all of them at 1)."""
    if j == left_out_set(config, member, sets):
        return set()
    if config.member_queries >= 1:
        return pool
    return split(sorted(pool), 1 - config.member_queries, member_seeds(config)[member] + 500 + j)[0]


def left_out_set(config: TrainConfig, member: int, sets: int) -> int | None:
    """The training set member ``member`` never sees with ``member_sets`` (``member`` mod ``sets``), else None;
    refused over a single set."""
    if not config.member_sets:
        return None
    if sets < 2:
        raise InputError("member_sets leaves one training set out of each member and needs at least 2 sets (--also)")
    return member % sets


def booster_params(config: TrainConfig, features: Sequence[str]) -> dict:
    """The LightGBM parameters a training adds to :data:`~weir.training.ltr.boosting.DEFAULT_PARAMS`: the user's, and
    the monotone constraints when asked."""
    params = dict(config.params)
    if config.monotone:
        params.update({"monotone_constraints": monotone_constraints(features),
                       "monotone_constraints_method": "intermediate"})
    return params


def init_column(config: TrainConfig, features: Sequence[str]) -> int | None:
    """The column of ``config.init_from`` among ``features`` (boosting starts from it), None without one."""
    if not config.init_from:
        return None
    if config.init_from not in features:
        raise InputError(f"--init-from {config.init_from!r} is not a feature ({', '.join(features)})")
    return list(features).index(config.init_from)
