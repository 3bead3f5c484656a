"""Fixtures the reranker and training tests share: a tiny BM25 + dense index, an untrained attention model directory."""

from __future__ import annotations

import json

import pytest

DOCS = [  # the tiny index of the LTR tests
    {"id": "d1", "title": "Apple pie", "text": "apple banana split with banana"},
    {"id": "d2", "title": "", "text": "cherry orange"},
    {"id": "d3", "title": "Banana bread", "text": "bread recipe apple"},
]


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    from indexer.build import build_index
    from indexer.index_dir import Index

    root = tmp_path_factory.mktemp("tiny")
    (root / "coll").mkdir()
    with open(root / "coll" / "corpus.jsonl", "w") as f:
        for d in DOCS:
            f.write(json.dumps(d) + "\n")
    build_index(root / "coll", root / "index", components=("bm25", "dense"))
    return Index(root / "index")


HEADS = [[5, 3], [2, 0]]
WEIGHTS = [0.7, -0.2]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("attn")
    (path / "heads.json").write_text(json.dumps({"kind": "attention", "base_model": "all-MiniLM-L6-v2",
                                                 "max_length": 64, "heads": HEADS, "weights": WEIGHTS, "bias": 0.1,
                                                 "calibrate": True, "idf": False}))
    return path
