"""The index directory's helpers that need no collection: a build step's measured time and peak memory."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from weir.indexer.index_dir import Step


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the peak is reset through /proc/self/clear_refs")
def test_each_step_reports_its_own_peak_memory_not_the_process_peak_so_far():
    steps: list[dict] = []
    with Step("large", steps):
        block = np.ones(300 * 2 ** 20 // 8)  # 300 MiB, touched
        del block
    with Step("small", steps):
        np.ones(2 ** 20).sum()
    with pytest.raises(RuntimeError), Step("failed", steps):
        raise RuntimeError("a failed step is not recorded")
    large, small = steps
    assert [large["step"], small["step"]] == ["large", "small"]
    assert large["peak_rss_mib"] - small["peak_rss_mib"] > 250 and "peak_since_start" not in small
    assert large["seconds"] >= 0 and small["seconds"] >= 0
