"""URisk: each query's change against a baseline, losses counted 1 + alpha times."""

from __future__ import annotations

import pytest

from weir.evaluation.risk import urisk, urisk_of


def test_urisk_counts_each_loss_one_plus_alpha_times():
    system, baseline = {"a": 0.5, "b": 0.2, "c": 0.9}, {"a": 0.3, "b": 0.4, "d": 0.1}
    # changes: a +0.2, b -0.2, c +0.9, d -0.1 (missing from the system: 0)
    assert urisk(system, baseline, alpha=0) == pytest.approx((0.2 - 0.2 + 0.9 - 0.1) / 4)
    assert urisk(system, baseline, alpha=5) == pytest.approx((0.2 - 6 * 0.2 + 0.9 - 6 * 0.1) / 4)
    assert urisk({}, {}) == 0.0
    with pytest.raises(ValueError, match="alpha"):
        urisk_of([0.1], alpha=-1)
