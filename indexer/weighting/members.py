"""A term weighting head of several members that differ only in their seed (`weir train deepct|deepimpact --members
N`), as one torch module that stands wherever one head does (indexing, validation, :func:`~indexer.weighting.model.
factor`):

- a BM25-shaped head's factor is the geometric mean of its members' factors, ``exp(ln 2 * mean_m tanh(o_m))``: still
  in [1/2, 2], and exactly 1 (the prior) when every member is untrained. The module returns the output whose factor
  that is, ``atanh(mean_m tanh(o_m))``;
- with ``shrink`` (``tau2``, `weir train --shrink`), that mean log-factor is shrunk towards 0, the prior, by how much
  the members disagree on the term: ``m * tau2 / (tau2 + v)``, ``m`` the members' mean log-factor ``ln 2 tanh(o)``,
  ``v`` its variance over the members divided by their number (the variance of the mean), ``tau2`` the variance of
  the corrections themselves (:func:`shrinkage_prior`, estimated in training). This is the posterior mean of a normal
  correction around 0 observed with the members' noise (empirical Bayes, as in James-Stein): a correction the
  members agree on is kept, one they do not agree on moves towards factor 1. In ranking terms that is not quite
  "back to BM25": trained members share a common log-factor offset (about -0.6 in the shipped head), which a ranking
  ignores, so shrinking towards 0 raises a disputed term against the others (``models/RESULTS.md``, stop 28);
- a free head's weight is the mean of its members' weights.

Written here because torch keeps modules in a list (``nn.ModuleList``) but has no average of heads, nor this
shrinkage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from weir.types import InputError

_EDGE = 1.0 - 1e-7  # tanh saturates at 1 in float32: keep atanh finite (the factor is then 2 to float precision)
_LN2 = math.log(2.0)  # the bound of a BM25-shaped head's log-factor (indexer.weighting.model.FACTOR_LOG_BOUND)


class Members(nn.Module):
    def __init__(self, heads: Sequence[nn.Module], shape: str, shrink: float | None = None):
        super().__init__()
        if shrink is not None and (shape != "bm25" or len(heads) < 2 or not shrink >= 0):
            raise InputError("shrinking towards the prior needs a BM25-shaped head of 2 members or more and tau2 >= 0")
        self.members = nn.ModuleList(heads)
        self.shape = shape
        self.shrink = shrink

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = torch.stack([m(x) for m in self.members])
        if self.shape != "bm25":
            return outputs.mean(0)
        tanh = torch.tanh(outputs)
        mean = tanh.mean(0)
        if self.shrink is not None:
            mean = mean * coefficient(_LN2 * tanh.squeeze(-1), self.shrink).unsqueeze(-1)
        return torch.atanh(mean.clamp(-_EDGE, _EDGE))

    def log_factors(self, x: torch.Tensor) -> torch.Tensor:
        """(members, rows): each member's log-factor ``ln 2 tanh(o_m)`` of each row."""
        return _LN2 * torch.tanh(torch.stack([m(x) for m in self.members]).squeeze(-1))


def coefficient(logs: torch.Tensor, tau2: float) -> torch.Tensor:
    """Per row, the share of the members' mean log-factor kept: ``tau2 / (tau2 + var / M)`` (1 where they agree)."""
    v = logs.var(0, unbiased=True) / logs.shape[0]
    return tau2 / (tau2 + v) if tau2 > 0 else torch.zeros_like(v)


def shrinkage_prior(logs: np.ndarray) -> dict:
    """``tau2``, the variance of the true corrections over term rows, from the members' log-factors of those rows
    (members, rows) by the method of moments: the variance of the members' mean over rows, less the mean variance
    of that mean (``var_m / M``), at least 0. With the figures it came from, for the card."""
    logs = np.asarray(logs, dtype=np.float64)
    mean = logs.mean(0)
    noise = logs.var(0, ddof=1) / logs.shape[0]
    total = float(mean.var())
    tau2 = max(0.0, total - float(noise.mean()))
    kept = tau2 / (tau2 + noise) if tau2 > 0 else np.zeros_like(noise)
    return {"tau2": tau2, "rows": int(logs.shape[1]), "variance_of_mean": total,
            "mean_noise_variance": float(noise.mean()), "mean_coefficient": float(kept.mean())}
