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


# --- a build killed at the instant it puts its index in place ---------------------------------------------------------

DIE_AFTER_EXCHANGE = """
import os, sys
from pathlib import Path
import weir.indexer.index_dir as d
exchange = d.exchange
def exchange_then_die(a, b):
    exchange(a, b)
    d.shutil.rmtree = lambda *a, **k: os._exit(9)  # killed right after the exchange, before the old index is removed
    return True
d.exchange = exchange_then_die
with d.staged_directory(Path(sys.argv[1]), overwrite=True) as tmp:
    (tmp / "index").write_text("new")
"""

DIE_BETWEEN_RENAMES = """
import os, sys
from pathlib import Path
import weir.indexer.index_dir as d
d.exchange = lambda a, b: False  # a system without renameat2: two renames
renames = []
def replace(a, b):
    renames.append(1)
    if len(renames) == 2:
        os._exit(9)  # killed after moving the old index aside, before moving the new one in
    os.rename(a, b)
d.os.replace = replace
with d.staged_directory(Path(sys.argv[1]), overwrite=True) as tmp:
    (tmp / "index").write_text("new")
"""


def _killed_build(script: str, out) -> None:
    import subprocess

    done = subprocess.run([sys.executable, "-c", script, str(out)], timeout=60)
    assert done.returncode == 9


def _siblings(out) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name != out.name)


def test_a_build_killed_after_its_exchange_leaves_the_new_index_and_litter_the_next_build_removes(tmp_path):
    from weir.indexer.index_dir import exchange, staged_directory

    out = tmp_path / "index"
    out.mkdir()
    (out / "index").write_text("old")
    if not exchange(out, out):  # a file system without renameat2's exchange: the other test covers it
        pytest.skip("no RENAME_EXCHANGE here")
    _killed_build(DIE_AFTER_EXCHANGE, out)
    assert (out / "index").read_text() == "new"  # never neither: the new index is in place
    assert [n.split("-")[0] for n in _siblings(out)] == ["index.building"]  # the old one, not yet removed
    with staged_directory(out, overwrite=True) as tmp:
        (tmp / "index").write_text("newer")
    assert (out / "index").read_text() == "newer" and _siblings(out) == []


def test_a_build_killed_between_its_two_renames_gets_the_old_index_back_at_the_next_build(tmp_path):
    from weir.core.types import InputError
    from weir.indexer.index_dir import staged_directory

    out = tmp_path / "index"
    out.mkdir()
    (out / "index").write_text("old")
    _killed_build(DIE_BETWEEN_RENAMES, out)
    assert not out.exists()  # the old index aside, the new one not moved in: the window two renames leave
    assert sorted(n.split("-")[0] for n in _siblings(out)) == ["index.building", "index.replaced"]
    with pytest.raises(InputError, match="already exists"), staged_directory(out, overwrite=False):
        pass  # the next build puts the old index back before anything else, and removes the dead build's
    assert (out / "index").read_text() == "old" and _siblings(out) == []
