"""A term weighting head of several members that differ only in their seed (`weir train deepct|deepimpact --members
N`), as one torch module that stands wherever one head does (indexing, validation, :func:`~indexer.weighting.model.
factor`):

- a BM25-shaped head's factor is the geometric mean of its members' factors, ``exp(ln 2 * mean_m tanh(o_m))``: still
  in [1/2, 2], and exactly 1 (the prior) when every member is untrained. The module returns the output whose factor
  that is, ``atanh(mean_m tanh(o_m))``;
- a free head's weight is the mean of its members' weights.

Written here because torch keeps modules in a list (``nn.ModuleList``) but has no average of heads.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

_EDGE = 1.0 - 1e-7  # tanh saturates at 1 in float32: keep atanh finite (the factor is then 2 to float precision)


class Members(nn.Module):
    def __init__(self, heads: Sequence[nn.Module], shape: str):
        super().__init__()
        self.members = nn.ModuleList(heads)
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = torch.stack([m(x) for m in self.members])
        if self.shape == "bm25":
            return torch.atanh(torch.tanh(outputs).mean(0).clamp(-_EDGE, _EDGE))
        return outputs.mean(0)
