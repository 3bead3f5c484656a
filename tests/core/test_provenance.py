"""What a model card records of paths: none of the machine it was trained on."""

from __future__ import annotations

import os

from weir.core.provenance import portable


def test_a_card_names_paths_relative_to_where_it_was_trained_and_the_cache_by_its_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIR_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "work"
    card = {"index": str(tmp_path / "cache" / "indexes" / "adi-bm25-dense-66a1"),
            "sets": [str(tmp_path / "shared" / "adi" / "qrels.txt"), "relative/stays", "not a path"],
            "cached": str(tmp_path / "cache-not" / "x")}
    assert portable(card, work) == {"index": "$WEIR_CACHE/indexes/adi-bm25-dense-66a1",
                                    "sets": [os.path.join("..", "shared", "adi", "qrels.txt"), "relative/stays",
                                             "not a path"],
                                    "cached": os.path.join("..", "cache-not", "x")}
