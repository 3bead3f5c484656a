"""Shared fixtures. Tests that need ../shared/collections skip without it, and fail when WEIR_REQUIRE_DATA=1 (CI)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS = Path(os.environ.get("WEIR_COLLECTIONS", ROOT.parent / "shared" / "collections"))


def collection(name: str) -> Path:
    """The path of a shared collection; skip (or fail under WEIR_REQUIRE_DATA=1) when it is not there."""
    path = COLLECTIONS / name
    if not (path / "corpus.jsonl").is_file():
        reason = f"collection {name!r} not found at {path} (set WEIR_COLLECTIONS or place ../shared beside the repo)"
        if os.environ.get("WEIR_REQUIRE_DATA") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def index_factory(tmp_path_factory):
    """Build (once per session) the index of a shared collection: ``index_factory("beir-scifact", "bm25")``."""
    from indexer.build import build_index

    built: dict[tuple, Path] = {}

    def make(name: str, components: str = "bm25", **options) -> Path:
        key = (name, components, tuple(sorted(options.items())))
        if key not in built:
            out = tmp_path_factory.mktemp("indexes") / f"{name}-{components.replace(',', '-')}"
            build_index(collection(name), out, components=tuple(components.split(",")), **options)
            built[key] = out
        return built[key]

    return make
