"""The index directory's helpers that need no collection: a build step's measured time and peak memory."""

from __future__ import annotations

import resource
import sys
import time

import numpy as np
import pytest

from weir.indexer.index_dir import Step


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_each_step_reports_its_own_peak_memory_and_leaves_the_process_peak_alone():
    steps: list[dict] = []
    with Step("large", steps):
        block = np.ones(300 * 2 ** 20 // 8)  # 300 MiB of anonymous memory, touched, held a while
        time.sleep(0.2)
        del block
    process_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with Step("small", steps):
        np.ones(2 ** 20).sum()
        time.sleep(0.1)
    with pytest.raises(RuntimeError), Step("failed", steps):
        raise RuntimeError("a failed step is not recorded")
    large, small = steps
    assert [large["step"], small["step"]] == ["large", "small"]
    assert large["peak_rss_mib"] - small["peak_rss_mib"] > 250
    assert large["peak_anon_mib"] - small["peak_anon_mib"] > 250
    assert large["seconds"] >= 0.2 and small["seconds"] >= 0.1
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >= process_peak  # not reset by a step
