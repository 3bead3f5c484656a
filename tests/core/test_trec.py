"""Topics and qrels files: TSV, TREC topic files, BEIR; bad lines named."""

from __future__ import annotations

import pytest

from weir.core.trec import read_qrels, read_topics
from weir.core.types import InputError


def write(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_trec_topic_file(tmp_path):
    path = write(tmp_path / "topics.txt", "<top>\n<num> Number: 301\n<title> Topic: International Organized Crime\n"
                 "<desc> Description:\nIdentify organizations\n</top>\n<top>\n<num> 302\n<title> Poliomyelitis\n</top>\n")
    assert [(q.id, q.text) for q in read_topics(path)] == [("301", "International Organized Crime"), ("302", "Poliomyelitis")]


def test_bad_topics_and_qrels(tmp_path):
    with pytest.raises(InputError, match="topics.tsv:2: expected qid<TAB>query text"):
        read_topics(write(tmp_path / "topics.tsv", "1\tok\nno tab here\n"))
    with pytest.raises(InputError, match="duplicate query id '1'"):
        read_topics(write(tmp_path / "dup.tsv", "1\ta\n1\tb\n"))
    with pytest.raises(InputError, match="qrels.txt:1: relevance 'x' is not an integer"):
        read_qrels(write(tmp_path / "qrels.txt", "1 0 d1 x\n"))
    with pytest.raises(InputError, match="no such topics file"):
        read_topics(tmp_path / "missing.tsv")
