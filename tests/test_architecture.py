"""The house rules a reader relies on, checked on the source: one installed package, research and benchmarks that use
only what the package makes public, and modules and functions of a size one can hold in mind."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import ROOT

MODULE_LINES, TEST_MODULE_LINES, FUNCTION_LINES = 400, 600, 60


def tracked_python(*folders: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=False).stdout
    files = out.split() if out else [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if ".venv" not in p.parts]
    return [f for f in files if not folders or f.split("/")[0] in folders]


def private_uses(source: str) -> list[str]:
    """Names of the weir package used from outside it that are private: ``from weir.x import _y``, ``m._y`` where
    ``m`` was imported from weir, or ``obj._y`` of an object whose class the file does not define (a weir object's
    internals)."""
    tree = ast.parse(source)
    weir_names: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "weir":
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{node.module}.{alias.name}")
                weir_names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "weir":
                    weir_names.add((alias.asname or alias.name).split(".")[0])
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    own |= {t.attr for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Attribute)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and (isinstance(node.value, ast.Name) and node.value.id in weir_names or node.attr not in own)):
            found.append(f"{ast.unparse(node.value)}.{node.attr}")
    return found


def test_research_and_benchmarks_use_no_private_name_of_the_package():
    offenders = {f: uses for f in tracked_python("research", "bench")
                 if (uses := private_uses((ROOT / f).read_text(encoding="utf-8")))}
    assert not offenders, f"private names of weir used outside it: {offenders}"


def test_the_private_name_check_finds_both_forms():
    source = ("from weir.training.ltr import _fit\nfrom weir.core import jvm\njvm._lock\nenc._cache.clear()\n"
              "class A:\n    def __init__(self):\n        self._own = 1\n    def f(self):\n        return self._own\n")
    assert private_uses(source) == ["weir.training.ltr._fit", "jvm._lock", "enc._cache"]


def test_modules_and_functions_stay_small():
    too_big = []
    for f in tracked_python():
        source = (ROOT / f).read_text(encoding="utf-8")
        limit = TEST_MODULE_LINES if f.startswith("tests/") else MODULE_LINES
        if source.count("\n") > limit:
            too_big.append(f"{f}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES and not f.startswith("tests/"):
                    too_big.append(f"{f}:{node.lineno} {node.name}: {lines} lines")
    assert not too_big, "split by concept:\n" + "\n".join(too_big)


def test_one_top_level_package_is_installed():
    """pyproject.toml installs the package ``weir`` alone (and its console script)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["weir*"]
    assert project["project"]["scripts"] == {"weir": "weir.cli:main"}
    assert not any((ROOT / name / "__init__.py").exists() for name in ("indexer", "ranker", "service"))


@pytest.mark.parametrize("name", ["Index", "build_index", "pipeline", "evaluate", "SearchClient", "Run", "Query"])
def test_the_public_api_is_at_the_top_and_loads_on_first_use(name):
    code = f"import sys, weir; assert 'torch' not in sys.modules; print(weir.{name}.__module__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("weir.")
