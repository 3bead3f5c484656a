"""Topics and qrels files, read and validated: TREC and BEIR formats. (Runs are :class:`weir.core.types.Run`.)

Topics come from TSV (``qid<TAB>text``), TREC topic files (``<top> <num> <title>``) or BEIR ``queries.jsonl``; qrels
from TREC files (``qid 0 docid rel``) or BEIR qrels TSV. Every problem is an :class:`~weir.core.types.InputError` naming
the file and line. Files are read as bytes and decoded as strict UTF-8 (:func:`read_lines`), which the corpus reader
of :mod:`weir.indexer.collections` shares.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from weir.core.types import InputError, Query


def read_lines(path: Path, digest=None) -> Iterator[tuple[int, str]]:
    """Yield (line number, decoded line) from a file read as bytes, feeding ``digest``; strict UTF-8."""
    for _, lineno, line in read_located_lines(path, digest):
        yield lineno, line


def read_located_lines(path: Path, digest=None, offset: int = 0, lineno: int = 1) -> Iterator[tuple[int, int, str]]:
    """Yield (byte offset, line number, decoded line) from byte ``offset`` (line ``lineno``) on, feeding ``digest``;
    strict UTF-8."""
    with open(path, "rb") as f:
        f.seek(offset)
        for n, raw in enumerate(f, start=lineno):
            if digest is not None:
                digest.update(raw)
            try:
                yield offset, n, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}:{n}: not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 4]!r})") from None
            offset += len(raw)


_TREC_TOPIC = re.compile(r"<top>(.*?)</top>", re.S | re.I)
_TREC_NUM = re.compile(r"<num>\s*(?:Number:)?\s*(\S+)", re.I)
_TREC_TITLE = re.compile(r"<title>\s*(?:Topic:)?\s*(.*?)\s*(?=<desc>|<narr>|</top>|<title>|\Z)", re.S | re.I)


def read_topics(path: str | os.PathLike) -> list[Query]:
    """Topics from a TSV (``qid<TAB>text``), a TREC topic file or a BEIR ``queries.jsonl``."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such topics file")
    head = path.read_bytes()[:4096].lstrip()
    if head.startswith(b"<top>") or b"<num>" in head:
        text = "".join(line for _, line in read_lines(path))
        topics = []
        for block in _TREC_TOPIC.findall(text):
            num, title = _TREC_NUM.search(block), _TREC_TITLE.search(block)
            if not num or not title:
                raise InputError(f"{path}: a TREC topic without <num> or <title>: {block[:80]!r}")
            topics.append(Query(num.group(1), " ".join(title.group(1).split())))
        return _unique(path, topics)
    topics = []
    is_json = path.suffix == ".jsonl"
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        if is_json:
            try:
                obj = json.loads(line)
                topics.append(Query(str(obj.get("_id", obj.get("id"))), obj["text"].strip()))
            except (json.JSONDecodeError, KeyError, AttributeError):
                raise InputError(f"{path}:{lineno}: expected a JSON object with \"_id\" and \"text\"") from None
        else:
            qid, sep, text = line.rstrip("\r\n").partition("\t")
            if not sep or not qid.strip():
                raise InputError(f"{path}:{lineno}: expected qid<TAB>query text")
            topics.append(Query(qid.strip(), text.strip()))
        if not topics[-1].text:
            raise InputError(f"{path}:{lineno}: query {topics[-1].id!r} has no text")
    return _unique(path, topics)


def _unique(path: Path, topics: list[Query]) -> list[Query]:
    seen: set[str] = set()
    for q in topics:
        if q.id in seen:
            raise InputError(f"{path}: duplicate query id {q.id!r}")
        seen.add(q.id)
    return topics


def iter_qrels(path: str | os.PathLike) -> Iterator[tuple[str, str, int]]:
    """(qid, docid, relevance) from TREC qrels (``qid 0 docid rel``) or BEIR qrels TSV (with its header)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such qrels file")
    for lineno, line in read_lines(path):
        parts = line.split()
        if not parts:
            continue
        if len(parts) == 4:
            qid, _, docid, rel = parts
        elif len(parts) == 3:
            qid, docid, rel = parts
            if lineno == 1 and not rel.lstrip("-").isdigit():
                continue  # BEIR header: query-id corpus-id score
        else:
            raise InputError(f"{path}:{lineno}: expected 'qid 0 docid relevance'")
        try:
            yield qid, docid, int(rel)
        except ValueError:
            raise InputError(f"{path}:{lineno}: relevance {rel!r} is not an integer") from None


def read_qrels(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for qid, docid, rel in iter_qrels(path):
        qrels.setdefault(qid, {})[docid] = rel
    return qrels
