"""The document store: the titles and texts Lucene's stored documents give, read without Java; stored by a build,
added to an older index by `weir index upgrade`, refused when stale."""

from __future__ import annotations

import json
import shutil

import pytest

from weir.indexer.build import build_index
from weir.indexer.docstore import DIRECTORY, DocumentStore
from weir.indexer.index_dir import Index, read_manifest, tree_checksum, verify, write_manifest

DOCS = [
    {"id": "b", "title": "Apple pie", "text": "apple apple banana split with banana"},
    {"id": "a", "title": "", "text": "cherry orange"},
    {"id": "c", "title": "Café", "text": "naïve 東京 text " + "long " * 400},
    {"id": "d", "title": "Café society", "text": "Café society begins with its title"},
    {"id": "e", "title": "Only a title", "text": ""},
]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("docstore")
    (root / "coll").mkdir()
    (root / "coll" / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    build_index(root / "coll", root / "index", components=("bm25",))
    return Index(root / "index")


def test_the_store_gives_what_lucene_stores(index):
    assert index.docstore is not None and index.manifest["components"]["bm25"]["document_store"]["documents"] == 5
    ids = [d["id"] for d in DOCS] + ["missing"]
    stored, lucene = index.documents(ids), index._lucene_documents(ids, 2)
    assert stored == lucene and set(stored) == {d["id"] for d in DOCS}
    assert stored["c"].title == "Café" and stored["c"].text.startswith("naïve 東京")
    assert index.documents(["d", "d", "b"]) == {"d": lucene["d"], "b": lucene["b"]} and index.documents([]) == {}


def test_upgrade_stores_the_documents_of_an_older_index(index, tmp_path, capsys):
    """An index built before the store (simulated: store removed, manifest as that build wrote it) reads Lucene,
    gets the store in place from `weir index upgrade`, its checksums hold, and it answers the same."""
    from weir.cli import main

    old = tmp_path / "old"
    shutil.copytree(index.path, old)
    shutil.rmtree(old / "bm25" / DIRECTORY)
    manifest = read_manifest(old)
    entry = manifest["components"]["bm25"]
    del entry["document_store"]
    entry["sha256"], entry["files"], entry["bytes"] = tree_checksum(old / "bm25")
    write_manifest(old, manifest)
    ids = [d["id"] for d in DOCS]
    assert Index(old).docstore is None and Index(old).documents(ids) == index.documents(ids)

    assert main(["index", "upgrade", str(old)]) == 0
    assert "bm25: document store" in capsys.readouterr().err and "postings" not in capsys.readouterr().err
    verify(old)
    assert Index(old).docstore is not None and Index(old).documents(ids) == index.documents(ids)


def test_a_store_of_another_lucene_commit_is_refused(index, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(index.component_path("bm25"), copy)
    meta = json.loads((copy / DIRECTORY / "meta.json").read_text())
    meta["lucene_commit"]["sha256"] = "0" * 64
    (copy / DIRECTORY / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="another Lucene commit"):
        DocumentStore(copy, [d["id"] for d in DOCS])
