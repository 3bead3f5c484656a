"""Index builds of ADI: manifest, verification, staging, the command line's one-line errors."""

from __future__ import annotations

import json
import shutil

import pytest

from weir.indexer.build import build_index
from weir.indexer.index_dir import Index, read_manifest, verify
from weir.ranker import registry
from weir.cli import main
from tests.conftest import collection
from weir.core.types import InputError, Query

pytestmark = pytest.mark.data  # every test here reads ../shared/collections


def test_adi_index_manifest_and_search(tmp_path):
    out = tmp_path / "adi"
    manifest = build_index(collection("adi"), out)
    assert read_manifest(out) == manifest
    assert manifest["counts"]["documents"] == 82
    assert manifest["collection"]["name"] == "adi" and len(manifest["collection"]["sha256"]) == 64
    bm25 = manifest["components"]["bm25"]
    assert bm25["documents"] == 82 and bm25["bytes"] > 0 and len(bm25["sha256"]) == 64
    assert {"pyserini", "weir", "python"} <= set(manifest["versions"])
    steps = manifest["timings"]["steps"]
    assert [s["step"] for s in steps] == ["bm25", "bm25 postings", "bm25 documents"]
    assert all(s["seconds"] >= 0 and s["peak_rss_mib"] >= s["peak_anon_mib"] > 0 for s in steps)
    verify(out)
    index = Index(out)
    run = registry.build("bm25", index)([Query("q", "information retrieval systems")], k=5)
    hits = run["q"]
    assert len(hits) == 5 and [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    doc = index.documents([hits[0].doc_id])[hits[0].doc_id]
    assert doc.title or doc.text


def test_tampered_component_fails_verification(tmp_path):
    out = tmp_path / "adi"
    build_index(collection("adi"), out)
    shutil.copytree(out, tmp_path / "copy")
    victim = max((tmp_path / "copy" / "bm25").iterdir(), key=lambda p: p.stat().st_size)
    victim.write_bytes(victim.read_bytes()[:-1] + b"\0")
    with pytest.raises(InputError, match="does not match its manifest checksum"):
        verify(tmp_path / "copy")


def test_existing_index_is_kept_unless_overwrite_and_survives_a_failed_rebuild(tmp_path):
    out = tmp_path / "adi"
    first = build_index(collection("adi"), out)
    with pytest.raises(InputError, match="already exists"):
        build_index(collection("adi"), out)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "corpus.jsonl").write_text('{"id": "x", "text": "fine"}\n{"id": "x", "text": "dup"}\n')
    with pytest.raises(InputError, match="duplicate"):
        build_index(bad, out, overwrite=True)
    assert read_manifest(out)["created"] == first["created"]  # the good index still stands
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adi", "bad"]
    build_index(collection("adi"), out, overwrite=True)
    verify(out)


def test_cli_reports_bad_input_in_one_line(tmp_path, capsys):
    (tmp_path / "corpus.jsonl").write_text('{"id": "a", "text": "ok"}\n{oops}\n')
    assert main(["index", "build", "--collection", str(tmp_path), "--out", str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err
    assert "weir: error:" in err and "corpus.jsonl:2: malformed JSON" in err
    assert not (tmp_path / "idx").exists()
    assert main(["run", "--index", str(tmp_path / "nope"), "--topics", "x", "--out", "y"]) == 2
    assert "not a weir index" in capsys.readouterr().err


def test_manifest_is_json_with_parameters(tmp_path):
    out = tmp_path / "adi"
    build_index(collection("adi"), out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["components"]["bm25"]["parameters"]["contents"].startswith("title + ' ' + text")
