"""The generated gRPC stubs match the proto; the JVM bootstrap works in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from service import stubs

ROOT = Path(__file__).resolve().parent.parent


def test_generated_stubs_are_up_to_date(tmp_path):
    stubs.generate(tmp_path)
    for name in ("search_pb2.py", "search_pb2_grpc.py"):
        assert (tmp_path / "weir" / "v1" / name).read_text() == (ROOT / "weir" / "v1" / name).read_text(), \
            f"weir/v1/{name} is stale: run `make stubs`"


def test_pyserini_starts_in_a_fresh_process_with_the_bootstrap():
    code = ("from weir import jvm; jvm.ensure()\n"
            "from pyserini.pyclass import autoclass\n"
            "System = autoclass('java.lang.System')\n"
            "print(System.getProperty('java.version'), autoclass('java.lang.Runtime').getRuntime().maxMemory())")
    env = dict(os.environ, WEIR_JVM_HEAP="1g")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    version, max_memory = out.stdout.split()
    assert version.startswith("21")
    assert int(max_memory) <= 1 << 30


def test_bad_heap_setting_is_refused(monkeypatch):
    from weir import jvm

    monkeypatch.setenv("WEIR_JVM_HEAP", "lots")
    with pytest.raises(ValueError, match="WEIR_JVM_HEAP"):
        jvm.heap_option()


@pytest.mark.data
def test_cli_search_in_a_fresh_process(index_factory):
    """A process whose first JVM use is weir's own Lucene code (not pyserini's) still gets Anserini's classpath."""
    out = subprocess.run([sys.executable, "-m", "weir", "search", "--index", str(index_factory("adi")), "-k", "3",
                          "information retrieval"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [line.split()[0] for line in out.stdout.splitlines()] == ["1", "2", "3"]
