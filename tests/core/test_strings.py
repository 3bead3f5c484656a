"""The string table: what a list of strings gives, without a Python object per string."""

from __future__ import annotations

import numpy as np
import pytest

from weir.core.hits import DocIds
from weir.core.strings import StringTable

STRINGS = ["b", "a", "", "ab", "é", "z", "Ω-ω", "a b", "10", "9", "日本", "a"]


def test_a_table_reads_as_its_list(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("".join(s + "\n" for s in STRINGS), encoding="utf-8")
    for table in (StringTable.of(STRINGS), StringTable.read(path)):
        assert len(table) == len(STRINGS) and list(table) == STRINGS and table == STRINGS
        assert table[4] == "é" and table[-1] == "a" and table.take([6, 0, 6]) == ["Ω-ω", "b", "Ω-ω"]
        assert table.take([]) == []
        # Python's order of str (code points) is the table's order (UTF-8 bytes); equal strings by ordinal
        assert table.order().tolist() == sorted(range(len(STRINGS)), key=lambda i: (STRINGS[i], i))
        assert table.find(["日本", "nope", "", "a"]).tolist() == [10, -1, 2, 1]
        assert table.utf8().tolist() == [s.encode() for s in STRINGS]
    with pytest.raises(IndexError):
        StringTable.of(STRINGS)[len(STRINGS)]
    (tmp_path / "cut.txt").write_bytes(b"a\nb")
    with pytest.raises(ValueError, match="no newline"):
        StringTable.read(tmp_path / "cut.txt")
    with pytest.raises(ValueError, match="newline"):
        StringTable.of(["a\nb"])


def test_a_sorted_table_is_searched_as_it_is():
    terms = sorted({s for s in STRINGS}, key=lambda s: s.encode())
    table = StringTable.of(terms, sorted=True)
    assert [table.get(t) for t in terms] == list(range(len(terms)))
    assert table.get("zz") is None and table.index("é") == terms.index("é")


def test_doc_ids_over_a_table_equal_doc_ids_over_a_list():
    ids = [f"doc-{i}" for i in np.random.default_rng(0).permutation(500)] + ["é", "日本"]
    listed, tabled = DocIds(ids), DocIds(StringTable.of(ids))
    ordinals = np.array([5, 0, 501, 77])
    assert tabled.of(ordinals) == listed.of(ordinals) and len(tabled) == len(listed)
    assert np.array_equal(tabled.rank, listed.rank) and np.array_equal(tabled.utf8, listed.utf8)
    wanted = ["doc-7", "missing", "日本"]
    assert np.array_equal(tabled.find(wanted), listed.find(wanted))
    assert list(tabled.ids) == ids
