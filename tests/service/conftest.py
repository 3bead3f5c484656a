"""A small index with BM25 and dense components, served in-process by the service tests."""

from __future__ import annotations

import pytest

from tests.ranker.test_stage_contract import write_corpus


@pytest.fixture(scope="session")
def small_index(tmp_path_factory):
    from weir.indexer.build import build_index

    root = tmp_path_factory.mktemp("service")
    build_index(write_corpus(root / "coll"), root / "index", components=("bm25", "dense"))
    return root / "index"
