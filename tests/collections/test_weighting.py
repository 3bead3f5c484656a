"""One command builds both learned indexes of ADI with the committed heads."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.data  # every test here reads ../shared/collections


def test_one_command_builds_both_learned_indexes_of_a_collection(tmp_path, capsys):
    """`weir index build --with bm25,deepct,deepimpact` with the committed artifacts, on ADI (82 documents): one
    encoder pass for both heads, a progress bar, and searchable deepct / deepimpact / deepimpact+bm25 pipelines."""
    from weir.cli import main
    from tests.conftest import collection

    adi = collection("adi")
    out = tmp_path / "adi"
    assert main(["index", "build", "--collection", str(adi), "--out", str(out), "--with", "bm25,deepct,deepimpact"]) == 0
    err = capsys.readouterr().err
    assert "document pass (deepct+deepimpact)" in err  # one backbone pass for both heads
    manifest = json.loads((out / "manifest.json").read_text())
    for name in ("deepct", "deepimpact"):
        entry = manifest["components"][name]
        assert entry["documents"] == 82 and entry["model"]["card_sha256"] and entry["model"]["kind"] == name
    assert manifest["components"]["deepimpact"]["parameters"]["quantization"]["bits"] == 8
    for pipeline in ("deepct", "deepimpact", "deepimpact+bm25"):
        assert main(["run", "--index", str(out), "--topics", str(adi / "queries.tsv"), "--out",
                     str(tmp_path / f"{pipeline}.run"), "--pipeline", pipeline, "-k", "10"]) == 0
        assert (tmp_path / f"{pipeline}.run").stat().st_size > 0
