"""Postings exported from a Lucene index: what Lucene holds, stored with the index, refused when stale."""

from __future__ import annotations

import json

import numpy as np
import pytest

from weir.indexer.build import build_index
from weir.indexer.index_dir import Index
from weir.indexer.lucene import DOCIDS
from weir.indexer.postings import DIRECTORY, LENGTH_TABLE, Postings, export, open_postings
from weir.core import jvm

DOCS = [
    {"id": "b", "title": "Apple pie", "text": "apple apple banana split with banana"},
    {"id": "a", "title": "", "text": "cherry orange"},
    {"id": "c", "title": "Banana bread", "text": "bread recipe apple " + "long " * 400},
    {"id": "d", "title": "", "text": "the of and"},  # stopwords only: no posting, no norm
]


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("postings")
    (root / "coll").mkdir()
    (root / "coll" / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    build_index(root / "coll", root / "index", components=("bm25",))
    return Index(root / "index")


def test_length_table_is_lucenes_smallfloat():
    small_float = jvm.autoclass("org.apache.lucene.util.SmallFloat")
    java = [small_float.byte4ToInt(b - 256 if b > 127 else b) for b in range(256)]
    assert LENGTH_TABLE.tolist() == java


def test_stored_postings_are_lucenes(small_index):
    path = small_index.component_path("bm25")
    entry = small_index.manifest["components"]["bm25"]["postings_arrays"]
    assert entry["directory"] == DIRECTORY and (path / DIRECTORY / "meta.json").is_file()
    stored, fresh = open_postings(path), export(path, progress=False)
    for name in ("offsets", "docs", "freqs", "norms"):
        assert np.array_equal(getattr(stored, name), getattr(fresh, name)), name
    assert stored.terms == fresh.terms and sorted(stored.docids) == sorted(d["id"] for d in DOCS)
    ids = stored.docids  # Lucene's doc order (the indexer's threads choose it)

    def postings(term: str) -> dict[str, int]:
        t = stored.terms.index(term)
        start, end = stored.offsets[t], stored.offsets[t + 1]
        assert list(stored.docs[start:end]) == sorted(stored.docs[start:end])
        return {ids[d]: int(f) for d, f in zip(stored.docs[start:end], stored.freqs[start:end])}

    assert postings("appl") == {"b": 3, "c": 1}  # "Apple pie" + "apple apple ...": title and text both count
    assert postings("banana") == {"b": 2, "c": 1} and postings("long") == {"c": 400}
    assert stored.doc_count == 3 and stored.max_doc == 4  # the stopword-only document has no term
    # Lucene's length norms, one byte each: 7 terms in "b" ("with" is a stopword), 405 in "c", none in "d"
    int_to_byte4 = jvm.autoclass("org.apache.lucene.util.SmallFloat").intToByte4
    norms = dict(zip(ids, stored.norms.tolist()))
    assert norms == {"b": 7, "a": int_to_byte4(2) & 0xFF, "c": int_to_byte4(405) & 0xFF, "d": 0}
    assert LENGTH_TABLE[norms["c"]] <= 405 < LENGTH_TABLE[norms["c"] + 1]
    assert stored.sum_total_term_freq == int(stored.freqs.sum())


def test_postings_of_a_changed_index_are_refused(small_index, tmp_path):
    import shutil

    path = tmp_path / "bm25"
    shutil.copytree(small_index.component_path("bm25"), path)
    commit = next(p for p in path.glob("segments_*"))
    commit.write_bytes(commit.read_bytes() + b"\0")
    with pytest.raises(ValueError, match="another state of the Lucene index"):
        Postings.read(path / DIRECTORY, path)


def test_an_index_without_stored_postings_is_exported_when_opened(small_index, tmp_path, caplog):
    import shutil

    path = tmp_path / "bm25"
    shutil.copytree(small_index.component_path("bm25"), path)
    shutil.rmtree(path / DIRECTORY)
    postings = open_postings(path)
    assert "no stored postings" in caplog.text
    assert postings.terms == open_postings(small_index.component_path("bm25")).terms


def test_weir_index_upgrade_stores_the_postings_of_an_older_index(small_index, tmp_path, capsys):
    """An index written before postings were stored (simulated: arrays removed, manifest as that build wrote it)
    gets them in place; its checksums hold, search answers the same, a second upgrade changes nothing, and a
    corrupt component is refused untouched."""
    import shutil

    from weir.indexer.index_dir import read_manifest, tree_checksum, verify, write_manifest
    from weir.ranker.retrievers.bm25 import BM25
    from weir.cli import main

    old = tmp_path / "old"
    shutil.copytree(small_index.path, old)
    shutil.rmtree(old / "bm25" / DIRECTORY)
    shutil.rmtree(old / "bm25" / "documents")
    manifest = read_manifest(old)
    entry = manifest["components"]["bm25"]
    del entry["postings_arrays"], entry["document_store"]
    entry["sha256"], entry["files"], entry["bytes"] = tree_checksum(old / "bm25")
    write_manifest(old, manifest)
    corrupt = tmp_path / "corrupt"
    shutil.copytree(old, corrupt)

    assert main(["index", "upgrade", str(old)]) == 0
    assert "bm25: postings; bm25: document store" in capsys.readouterr().err
    verify(old)
    assert (old / "bm25" / DIRECTORY / "meta.json").is_file()
    assert BM25(Index(old)).search(["apple banana"], 10) == BM25(small_index).search(["apple banana"], 10)
    assert main(["index", "upgrade", str(old)]) == 0 and "up to date" in capsys.readouterr().err

    (corrupt / "bm25" / "docids.txt").write_text("x\n")
    assert main(["index", "upgrade", str(corrupt)]) == 2
    assert "does not match its manifest checksum" in capsys.readouterr().err
    assert not (corrupt / "bm25" / DIRECTORY).exists()


def test_an_index_with_deleted_documents_searches_as_lucene_does(small_index, tmp_path):
    """Lucene's postings still hold deleted documents (its searches skip them) and its statistics still count them:
    the export leaves them out of the postings and keeps Lucene's document frequencies for idf."""
    import shutil

    from weir.ranker.retrievers.inverted import BM25Scores, InvertedIndex
    from weir.ranker.retrievers.lucene import LuceneBM25Searcher

    path = tmp_path / "bm25"
    shutil.copytree(small_index.component_path("bm25"), path)
    directory = jvm.autoclass("org.apache.lucene.store.FSDirectory").open(
        jvm.autoclass("java.nio.file.Paths").get(str(path)))
    config_class = jvm.autoclass("org.apache.lucene.index.IndexWriterConfig")
    writer_class = jvm.autoclass("org.apache.lucene.index.IndexWriter")
    # One segment first: the indexer's threads may have written "b" alone in a segment, and Lucene drops a segment
    # whose every document is deleted, which would leave no deleted document behind. The merge renumbers the
    # documents, so weir's docid table goes too: the ids are read from the stored fields, as for another tool's index.
    writer = writer_class(directory, config_class())
    writer.forceMerge(1)
    writer.commit()
    writer.close()
    (path / DOCIDS).unlink()
    config = config_class()
    config.setMergePolicy(jvm.autoclass("org.apache.lucene.index.NoMergePolicy").INSTANCE)
    writer = writer_class(directory, config)
    reader = jvm.autoclass("org.apache.lucene.index.DirectoryReader").open(writer)
    assert writer.tryDeleteDocument(reader, export(path, progress=False).docids.index("b")) >= 0
    reader.close()
    writer.commit()
    writer.close()

    with pytest.raises(ValueError, match="another state of the Lucene index"):
        open_postings(path)  # the stored arrays describe the index before the deletion
    postings = export(path, progress=False)
    assert postings.live_docs == 3 and postings.max_doc == 4
    appl = postings.terms.index("appl")
    assert postings.doc_freqs[appl] == 2 and postings.offsets[appl + 1] - postings.offsets[appl] == 1
    engine = InvertedIndex(BM25Scores(postings, 0.9, 0.4))
    reference = LuceneBM25Searcher(path)
    for text, terms in (("apple banana", {"appl": 1, "banana": 1}), ("bread", {"bread": 1}), ("pie", {"pie": 1})):
        assert engine.search(terms, 10) == reference.search(text, 10)
    assert engine.search({"pie": 1}, 10) == []  # only in the deleted document


@pytest.mark.parametrize("run", [1, 3, 1 << 22])
@pytest.mark.parametrize("on_disk", [False, True])
def test_segments_merge_into_each_terms_postings_in_segment_order(monkeypatch, tmp_path, run, on_disk):
    """Segments spilled to files as read, then merged a run of postings at a time (``MERGE_RUN``, down to one
    posting), in memory or into the ``.npy`` files themselves: each term's postings are its postings in each segment,
    in segment order, whatever the run; checked against a plain concatenation on random segments with terms shared,
    missing and alone, and one segment without postings."""
    from array import array

    from weir.indexer import postings as module

    monkeypatch.setattr(module, "MERGE_RUN", run)
    rng = np.random.default_rng(7)
    vocabulary = [f"t{i:03d}" for i in range(40)]
    segments = module._Segments.__new__(module._Segments)
    segments.terms, segments.dfs, segments.lucene_dfs = [], [], []
    segments.docs, segments.freqs = array("i"), array("i")
    segments.spill, segments.counts, segments.max_freq = tmp_path, [], 0
    expected: dict[str, list[tuple[int, int]]] = {}
    base = 0
    for segment in range(5):
        if segment == 2:  # a segment without the field
            segments.terms.append([]), segments.dfs.append(array("q")), segments.lucene_dfs.append(array("q"))
            segments.end_segment()
            continue
        terms = sorted(rng.choice(vocabulary, size=int(rng.integers(1, 30)), replace=False).tolist())
        dfs = array("q")
        for term in terms:
            df = int(rng.integers(1, 6))
            docs = sorted(rng.choice(100, size=df, replace=False) + base)
            freqs = rng.integers(1, 9, size=df).tolist()
            segments.docs.extend(int(d) for d in docs)
            segments.freqs.extend(freqs)
            dfs.append(df)
            expected.setdefault(term, []).extend(zip(map(int, docs), freqs))
        segments.terms.append(terms)
        segments.dfs.append(dfs)
        segments.lucene_dfs.append(array("q", dfs))
        segments.end_segment()
        base += 100
    out = tmp_path / "out"
    out.mkdir()
    terms, dfs, lucene_df, docs, freqs = segments.merged(out if on_disk else None)
    assert terms == sorted(expected) and freqs.dtype == np.uint8
    if on_disk:
        assert np.array_equal(np.load(out / "docs.npy"), docs) and np.array_equal(np.load(out / "freqs.npy"), freqs)
    offsets = np.concatenate([[0], np.cumsum(dfs)])
    for t, term in enumerate(terms):
        got = list(zip(docs[offsets[t]:offsets[t + 1]].tolist(), freqs[offsets[t]:offsets[t + 1]].tolist()))
        assert got == expected[term], term
    assert lucene_df.tolist() == dfs.tolist()
