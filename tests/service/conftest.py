"""A small index with BM25 and dense components, served in-process by the service tests."""

from __future__ import annotations

import json

import pytest

from tests.ranker.test_stage_contract import TEXTS


@pytest.fixture(scope="session")
def small_index(tmp_path_factory):
    from indexer.build import build_index

    root = tmp_path_factory.mktemp("service")
    (root / "coll").mkdir()
    (root / "coll" / "corpus.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "title": title, "text": text}) + "\n" for i, (title, text) in enumerate(TEXTS)))
    build_index(root / "coll", root / "index", components=("bm25", "dense"))
    return root / "index"
