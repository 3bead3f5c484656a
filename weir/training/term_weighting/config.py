"""The settings of `weir train deepct|deepimpact` (:class:`TrainConfig`) and the sources they name: training sets
(:class:`~weir.training.common.TrainingSet`, ``--train`` or ``--collection --queries --qrels``) and self-supervised
collections."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from weir.indexer.weighting.backbone import MAX_LENGTH
from weir.training.common import TrainingSet
from weir.core.types import InputError


DRAWS = ("queries", "sources")  # how a step draws its queries from several sources (the package's docstring)
VALIDATE_BY = ("queries", "sets")  # how the validation mean weighs the sources (the package's docstring)


@dataclass
class TrainConfig:
    kind: str
    out: str
    train: list[TrainingSet | str] = field(default_factory=list)  # sets, or their COLLECTION:TOPICS:QRELS[:W[:M]]
    self_supervised: list[str] = field(default_factory=list)  # COLLECTION[:WEIGHT]
    shape: str = "bm25"
    pseudo_queries: int = 2000  # per self-supervised collection, at most
    max_queries: int = 3000  # judged queries per source at most (a seeded sample; ArguAna's synthetic set has 25,844)
    base_model: str = "all-MiniLM-L6-v2"
    max_length: int = MAX_LENGTH
    input: str = "words"  # what the backbone reads of a passage: its words, or its own text (weighting.backbone)
    titles: bool = False  # DeepCT free shape: titles as pseudo-queries of their documents
    epochs: int | None = None  # None: 10 for deepimpact, 20 for deepct
    lr: float = 1e-3
    batch_size: int = 32
    negatives: int = 15
    negative_depth: int = 100
    val_fraction: float = 0.2
    min_rel: int = 1
    seed: int = 13
    bm25_index: str | None = None
    device: str | None = None
    features: list[str] = field(default_factory=list)  # lexical inputs beside the term vector: idf, tf, length
    draws: str = "queries"  # DRAWS: every training query equally likely, or every source (both times their weight)
    validate_by: str = "queries"  # VALIDATE_BY: as drawn, or every judged source by its weight alone
    members: int = 1  # heads that differ only in their seed (init and draws), on one split; one head of their mean
    shrink: bool = False  # the members' mean correction shrunk towards the prior by their disagreement
    command: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.epochs is None:
            self.epochs = 10 if self.kind == "deepimpact" else 20

    def sources(self) -> list[tuple[TrainingSet | None, str, float]]:
        """(training set, or None for a self-supervised source; collection; weight) of every source, judged first."""
        out: list[tuple[TrainingSet | None, str, float]] = []
        for spec in self.train:
            judged = TrainingSet.of(spec).checked(f"weir train {self.kind}", needs=("collection",),
                                                  takes=("weight", "min_rel"))
            out.append((judged, judged.collection, judged.weight))
        for text in self.self_supervised:
            path, _, weight = text.partition(":") if not Path(text).exists() else (text, "", "")
            try:
                out.append((None, path, float(weight) if weight else 1.0))
            except ValueError:
                raise InputError(f"--self-supervised {text!r}: expected COLLECTION[:WEIGHT]") from None
        if not out:
            raise InputError("no training data: give --train COLLECTION:TOPICS:QRELS (repeatable) or "
                             "--self-supervised COLLECTION")
        return out
