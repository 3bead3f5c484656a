"""A term weighting head of several members that differ only in their seed (`weir train deepct|deepimpact --members
N`), as one torch module that stands wherever one head does (indexing, validation, :func:`~weir.indexer.weighting.model.
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

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

_EDGE = 1.0 - 1e-7  # tanh saturates at 1 in float32: keep atanh finite (the factor is then 2 to float precision)


class Members(nn.Module):
    def __init__(self, heads: Sequence[nn.Module], shape: str, log_bound: float, shrink: float | None = None):
        """``log_bound``: a BM25-shaped member's factor is ``exp(log_bound * tanh(o))``; ``shrink``: tau2 (both given
        by :func:`~weir.indexer.weighting.model.make_head`, which owns them and checks them)."""
        super().__init__()
        self.members = nn.ModuleList(heads)
        self.shape = shape
        self.log_bound = log_bound
        self.shrink = shrink

    def _outputs(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([m(x) for m in self.members])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = self._outputs(x)
        if self.shape != "bm25":
            return outputs.mean(0)
        tanh = torch.tanh(outputs)
        mean = tanh.mean(0)
        if self.shrink is not None:
            mean = mean * coefficient(self.log_bound * tanh.squeeze(-1), self.shrink).unsqueeze(-1)
        return torch.atanh(mean.clamp(-_EDGE, _EDGE))

    def log_factors(self, x: torch.Tensor) -> torch.Tensor:
        """(members, rows): each member's log-factor ``ln 2 tanh(o_m)`` of each row."""
        return self.log_bound * torch.tanh(self._outputs(x).squeeze(-1))


def noise_variance(logs: torch.Tensor) -> torch.Tensor:
    """Per row, the variance of the members' mean log-factor: their variance over their number (``logs``: members,
    rows)."""
    return logs.var(0, unbiased=True) / logs.shape[0]


def coefficient(logs: torch.Tensor, tau2: float) -> torch.Tensor:
    """Per row, the share of the members' mean log-factor kept: ``tau2 / (tau2 + v)`` (1 where they agree)."""
    v = noise_variance(logs)
    return tau2 / (tau2 + v) if tau2 > 0 else torch.zeros_like(v)


def shrinkage_prior(logs: np.ndarray | torch.Tensor) -> dict:
    """``tau2``, the variance of the true corrections over term rows, from the members' log-factors of those rows
    (members, rows) by the method of moments: the variance of the members' mean over rows, less the mean of
    :func:`noise_variance`, at least 0. With the figures it came from, for the card."""
    logs = torch.as_tensor(logs, dtype=torch.float64)
    total = float(logs.mean(0).var(unbiased=False))
    noise = float(noise_variance(logs).mean())
    tau2 = max(0.0, total - noise)
    return {"tau2": tau2, "rows": int(logs.shape[1]), "variance_of_mean": total, "mean_noise_variance": noise,
            "mean_coefficient": float(coefficient(logs, tau2).mean())}
