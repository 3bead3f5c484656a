"""Several heads that differ only in their seed (``--members N``) written as one head
(:mod:`weir.indexer.weighting.members`), validated as one, optionally shrunk towards the prior by the members'
disagreement (``--shrink``), and each member's record on the card."""

from __future__ import annotations

import numpy as np

from weir.indexer.weighting.model import make_head
from weir.training.term_weighting.config import TrainConfig
from weir.training.term_weighting.data import WeightingData
from weir.training.term_weighting.loop import Training, fusion_weight


def join_members(config: TrainConfig, members: list[Training], dim: int, log) -> Training:
    """The members as one head (:mod:`weir.indexer.weighting.members`), validated as one: its history is that single
    validation, at the members' own epochs."""
    head = make_head(config.kind, dim + len(config.features), config.shape, len(members))
    for slot, member in zip(head.members, members, strict=True):
        slot.load_state_dict(member.head.state_dict())
    shrinkage = None
    if config.shrink:
        from weir.indexer.weighting.members import shrinkage_prior

        rng = np.random.default_rng(config.seed)
        shrinkage = shrinkage_prior(np.concatenate([_member_logs(head, s, rng) for s in members[0].sources], axis=1))
        shrinkage["estimated_on"] = (f"the members' log-factors of at most {SHRINK_ROWS:,} term rows (a seeded "
                                     "sample) of each training collection")
        head.shrink = shrinkage["tau2"]
        log(f"shrinkage towards the prior: tau2 {shrinkage['tau2']:.5f} over {shrinkage['rows']:,} term rows, "
            f"mean coefficient {shrinkage['mean_coefficient']:.3f}")
    t = Training(config, members[0].sources, dim, log, head=head)
    t.shrinkage = shrinkage
    per_source, mean = t.validate()
    epochs = [mt.kept()["epoch"] for mt in members]
    t.history = [{"epoch": epochs, "loss": None, "nDCG@10": mean, "sources": per_source}]
    log(f"{len(members)} members (epochs {epochs}): validation nDCG@10 {mean:.4f} ("
        + ", ".join(f"{n} {v['nDCG@10']:.4f}" for n, v in per_source.items()) + ")")
    return t


SHRINK_ROWS = 100_000  # term rows per training collection that estimate the shrinkage prior (tau2)


def _member_logs(head, s: WeightingData, rng) -> np.ndarray:
    """(members, rows) the members' log-factors of a seeded sample of ``s``'s term rows."""
    import torch

    n = len(s.tv.data)
    rows = np.sort(rng.choice(n, SHRINK_ROWS, replace=False)) if n > SHRINK_ROWS else np.arange(n)
    with torch.inference_mode():
        return np.concatenate([head.log_factors(s.x(rows[i:i + 65536])).numpy()
                               for i in range(0, len(rows), 65536)], axis=1)


def member_card(config: TrainConfig, t: Training) -> dict:
    """One member's record in its head's card: its seed, epoch and validation, and for DeepImpact the
    ``deepimpact+bm25`` weight it alone would have (as a one-member head's card has it)."""
    out = {"seed": t.rng_seed, "validation": dict(t.kept()), "history": t.history}
    if config.kind == "deepimpact":
        out["fusion"] = fusion_weight(t)
    return out
