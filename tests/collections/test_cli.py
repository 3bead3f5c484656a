"""The command line searches an index in a fresh process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.data  # every test here reads ../shared/collections




@pytest.mark.data
def test_cli_search_in_a_fresh_process(index_factory):
    """A process whose first JVM use is weir's own Lucene code (not pyserini's) still gets Anserini's classpath."""
    out = subprocess.run([str(Path(sys.executable).parent / "weir"), "search", "--index", str(index_factory("adi")), "-k", "3",
                          "information retrieval"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [line.split()[0] for line in out.stdout.splitlines()] == ["1", "2", "3"]
