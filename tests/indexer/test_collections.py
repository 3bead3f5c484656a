"""Collections streamed and validated: weir, BEIR and MS MARCO layouts; bad lines named, no index left behind."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.indexer.build import build_index
from weir.indexer.collections import Collection, Corpus
from weir.core.trec import read_qrels
from weir.core.types import InputError


def write(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def docs_jsonl(*docs) -> str:
    return "".join(json.dumps(d) + "\n" for d in docs)


def test_weir_layout_streams_documents_and_fingerprints(tmp_path):
    write(tmp_path / "corpus.jsonl", docs_jsonl({"id": "d1", "title": "T", "text": "one"}, {"id": "d2", "title": "", "text": "two"}))
    coll = Collection.open(tmp_path)
    corpus = coll.corpus()
    docs = list(corpus)
    assert [(d.id, d.contents) for d in docs] == [("d1", "T one"), ("d2", "two")]
    assert corpus.stats.documents == 2 and len(corpus.stats.sha256) == 64


def test_beir_layout_with_underscore_ids_queries_and_split_qrels(tmp_path):
    write(tmp_path / "corpus.jsonl", docs_jsonl({"_id": "d1", "title": "T", "text": "x"}))
    write(tmp_path / "queries.jsonl", docs_jsonl({"_id": "q1", "text": "first"}, {"_id": "q2", "text": "second"}))
    (tmp_path / "qrels").mkdir()
    write(tmp_path / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq2\td1\t1\n")
    coll = Collection.open(tmp_path)
    assert coll.layout == "beir"
    assert [d.id for d in coll.corpus()] == ["d1"]
    assert [q.id for q in coll.topics("test")] == ["q2"]  # only the queries judged in the split
    assert read_qrels(coll.qrels_path("test")) == {"q2": {"d1": 1}}


def test_msmarco_tsv_corpus(tmp_path):
    path = write(tmp_path / "collection.tsv", "0\tThe first passage.\n1\tThe second one.\n")
    assert [(d.id, d.text) for d in Corpus(path)] == [("0", "The first passage."), ("1", "The second one.")]


@pytest.mark.parametrize("content, message", [
    (b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "broken\n', "corpus.jsonl:2: malformed JSON"),
    (b'{"id": "a", "text": "ok"}\n{"title": "no id", "text": "x"}\n', "corpus.jsonl:2: missing document id"),
    (b'{"id": "a", "text": "ok"}\n{"id": "a", "text": "again"}\n', "corpus.jsonl:2: duplicate document id 'a'"),
    (b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "caf\xe9"}\n', "corpus.jsonl:2: not valid UTF-8"),
    (b'{"id": "a", "text": "ok"}\n{"id": "b", "title": "", "text": "  "}\n', "corpus.jsonl:2: document 'b' is empty"),
    (b'{"id": "a b", "text": "ok"}\n', "corpus.jsonl:1: document id 'a b' contains white space"),
    (b'["a", "b"]\n', "corpus.jsonl:1: expected a JSON object"),
])
def test_bad_corpus_lines_are_named_and_leave_no_index(tmp_path, content, message):
    coll = tmp_path / "coll"
    coll.mkdir()
    write(coll / "corpus.jsonl", content)
    out = tmp_path / "index"
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        build_index(coll, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coll"]  # no index, no half-built sibling


def test_skip_empty_documents_when_asked(tmp_path):
    path = write(tmp_path / "corpus.jsonl", docs_jsonl({"id": "a", "text": "x"}, {"id": "b", "title": "", "text": ""}))
    corpus = Corpus(path, skip_empty=True)
    assert [d.id for d in corpus] == ["a"] and corpus.stats.skipped_empty == ["b"]


@settings(max_examples=150, deadline=None)
@given(docs=st.lists(st.fixed_dictionaries({"id": st.text(min_size=0, max_size=8), "title": st.text(max_size=20),
                                            "text": st.text(max_size=40)}), min_size=1, max_size=6),
       cut=st.integers(0, 400), garble=st.sampled_from([b"", b"\xff", b"\xc3(", b"\x00", b"\n", b"}", b'"']),
       at=st.integers(0, 400), tsv=st.booleans())
def test_generated_corpus_files_read_whole_or_fail_naming_file_and_line(tmp_path_factory, docs, cut, garble, at, tsv):
    """Corpus files generated with any unicode ids and texts, cut at any byte and garbled at any byte: reading one
    gives every document, or ends with an InputError naming the file and the line; never another error."""
    import json

    from weir.indexer.collections import Collection

    if tsv:
        name = "corpus.tsv"
        data = "".join(f"{d['id']}\t{d['text']}\n" for d in docs).encode("utf-8", "surrogatepass")
    else:
        name = "corpus.jsonl"
        data = "".join(json.dumps(d) + "\n" for d in docs).encode("utf-8", "surrogatepass")
    if cut < len(data):
        data = data[:cut]
    data = data[:at] + garble + data[at:]
    path = tmp_path_factory.mktemp("generated") / name
    path.write_bytes(data)
    try:
        read = list(Collection.open(path).corpus(skip_empty=True))
    except InputError as e:
        message = str(e)
        assert message.startswith(f"{path}:") or message.startswith(f"{path}: "), message
        line = message[len(str(path)) + 1:].split(":", 1)[0]
        assert line.strip() == "" or line.isdigit(), message  # the line where a line is to blame
        return
    assert all(d.id and not any(c.isspace() for c in d.id) for d in read)
    assert len({d.id for d in read}) == len(read)
