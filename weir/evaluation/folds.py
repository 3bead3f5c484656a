"""Seeded partitions of query ids: ``folds`` disjoint folds (cross-validation in training, cross-fitting in the
pruning sweep) and a held-out share (a trainer's validation queries). Both sort the ids, then shuffle them with
numpy's generator seeded by ``seed``, so a partition depends on the set of ids and the seed alone."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def _shuffled(qids: Iterable[str], seed: int) -> list[str]:
    order = sorted(set(qids))
    rng = np.random.default_rng(seed)
    rng.shuffle(order)
    return order


def split(qids: Iterable[str], fraction: float, seed: int) -> tuple[set[str], set[str]]:
    """(training, validation) query ids: a seeded ``fraction`` of the queries held out."""
    order = _shuffled(qids, seed)
    n_val = int(round(len(order) * fraction)) if fraction > 0 else 0
    return set(order[n_val:]), set(order[:n_val])


def folds_of(qids: Iterable[str], folds: int, seed: int) -> list[set[str]]:
    """``folds`` disjoint sets of query ids covering ``qids`` (a seeded shuffle dealt round-robin)."""
    order = _shuffled(qids, seed)
    return [set(order[i::folds]) for i in range(folds)]
