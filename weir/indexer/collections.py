"""Reading collections, streamed and validated (topics and qrels files: :mod:`weir.core.trec`).

Documents are streamed one line at a time, never loaded whole. Every problem in the input is reported as an
:class:`~weir.core.types.InputError` naming the file and line: malformed JSON, a missing id, a duplicate id, bytes that are
not UTF-8, an empty document. Supported layouts:

- weir's normalized directory (as in ``../shared/collections``): ``corpus.jsonl`` of ``{"id", "title", "text"}``,
  ``queries[.split].tsv`` and ``qrels[.split].txt``;
- a BEIR directory: ``corpus.jsonl`` of ``{"_id", "title", "text"}``, ``queries.jsonl``, ``qrels/<split>.tsv``;
- an MS MARCO style ``id<TAB>text`` TSV file, or a single JSONL file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from weir.core.trec import iter_qrels, read_located_lines, read_topics
from weir.core.types import Document, InputError, Query


@dataclass
class CorpusStats:
    """Filled in while a corpus is streamed; complete once the iterator is exhausted."""

    documents: int = 0
    skipped_empty: list[str] = field(default_factory=list)
    bytes: int = 0
    sha256: str = ""


class Corpus:
    """A stream of :class:`Document` from a JSONL (weir or BEIR keys) or ``id<TAB>text`` TSV file.

    ``skip_empty``: an empty document (no title, no text) is an error by default; with ``skip_empty`` it is skipped
    and listed in :attr:`stats`. Each pass over the corpus re-validates it and recomputes its fingerprint.
    """

    def __init__(self, path: str | os.PathLike, *, skip_empty: bool = False):
        self.path = Path(path)
        if not self.path.is_file():
            raise InputError(f"{self.path}: no such corpus file")
        self.format = "tsv" if self.path.suffix in (".tsv", ".tab") else "jsonl"
        self.skip_empty = skip_empty
        self.stats = CorpusStats()

    def __iter__(self) -> Iterator[Document]:
        for _, _, doc in self.located():
            yield doc

    def located(self) -> Iterator[tuple[int, int, Document]]:
        """The documents as :meth:`__iter__` gives them, each with the byte offset and number of its line (where
        :meth:`read_block` can start reading again)."""
        stats = self.stats = CorpusStats()
        digest = hashlib.sha256()
        seen: set[str] = set()
        parse = self._parse_tsv if self.format == "tsv" else self._parse_json
        for offset, lineno, line in read_located_lines(self.path, digest):
            if not line.strip():
                continue
            doc = parse(lineno, line)
            if not doc.id:
                raise InputError(f"{self.path}:{lineno}: empty document id")
            if any(c.isspace() for c in doc.id):
                raise InputError(f"{self.path}:{lineno}: document id {doc.id!r} contains white space (TREC runs split on it)")
            if doc.id in seen:
                raise InputError(f"{self.path}:{lineno}: duplicate document id {doc.id!r}")
            seen.add(doc.id)
            if not doc.title.strip() and not doc.text.strip():
                if not self.skip_empty:
                    raise InputError(
                        f"{self.path}:{lineno}: document {doc.id!r} is empty (no title, no text); "
                        "pass --skip-empty to leave such documents out"
                    )
                stats.skipped_empty.append(doc.id)
                continue
            stats.documents += 1
            yield offset, lineno, doc
        stats.bytes = self.path.stat().st_size
        stats.sha256 = digest.hexdigest()

    def read_block(self, offset: int, lineno: int, count: int, keep=None) -> list[Document]:
        """``count`` documents read from the line at byte ``offset`` (line number ``lineno``), empty documents
        skipped when :attr:`skip_empty` and, given ``keep`` (a set of ids), the others too: one block of a corpus
        whole passes have validated (a distributed build's worker reads its block this way; ids are not checked
        for duplicates across blocks here)."""
        parse = self._parse_tsv if self.format == "tsv" else self._parse_json
        docs: list[Document] = []
        for _, n, line in read_located_lines(self.path, None, offset, lineno):
            if len(docs) == count:
                break
            if not line.strip():
                continue
            doc = parse(n, line)
            if not doc.title.strip() and not doc.text.strip():
                if not self.skip_empty:
                    raise InputError(f"{self.path}:{n}: document {doc.id!r} is empty (no title, no text)")
                continue
            if keep is None or doc.id in keep:
                docs.append(doc)
        if len(docs) != count:
            raise InputError(f"{self.path}: the block from line {lineno} has {len(docs)} documents, {count} expected "
                             "(the corpus changed since the build was planned)")
        return docs

    def _parse_json(self, lineno: int, line: str) -> Document:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{self.path}:{lineno}: malformed JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise InputError(f"{self.path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        doc_id = obj.get("id", obj.get("_id", obj.get("docid")))
        if doc_id is None:
            raise InputError(f"{self.path}:{lineno}: missing document id (an \"id\" or \"_id\" field)")
        text = obj.get("text", obj.get("contents"))
        if text is None:
            raise InputError(f"{self.path}:{lineno}: document {doc_id!r} has no \"text\" field")
        title = obj.get("title") or ""
        if not isinstance(text, str) or not isinstance(title, str):
            raise InputError(f"{self.path}:{lineno}: \"title\" and \"text\" must be strings")
        return Document(str(doc_id).strip(), title.strip(), text.strip())

    def _parse_tsv(self, lineno: int, line: str) -> Document:
        parts = line.rstrip("\r\n").split("\t")
        if len(parts) == 2:
            return Document(parts[0].strip(), "", parts[1].strip())
        if len(parts) == 3:  # id, title, text
            return Document(parts[0].strip(), parts[1].strip(), parts[2].strip())
        raise InputError(f"{self.path}:{lineno}: expected id<TAB>text (or id<TAB>title<TAB>text), got {len(parts)} fields")


@dataclass(frozen=True)
class Collection:
    """A collection directory (weir normalized or BEIR) or a single corpus file, with its topics and qrels."""

    root: Path
    corpus_path: Path
    layout: str  # "weir" | "beir" | "file"

    @classmethod
    def open(cls, path: str | os.PathLike) -> Collection:
        p = Path(path)
        if p.is_file():
            return cls(p.parent, p, "file")
        if not p.is_dir():
            raise InputError(f"{p}: no such collection (a directory with corpus.jsonl, or a corpus file)")
        corpus = p / "corpus.jsonl"
        if not corpus.is_file():
            raise InputError(f"{p}: not a collection directory (no corpus.jsonl)")
        layout = "beir" if (p / "queries.jsonl").is_file() or (p / "qrels").is_dir() else "weir"
        return cls(p, corpus, layout)

    @property
    def name(self) -> str:
        return self.root.name if self.layout != "file" else self.corpus_path.stem

    def corpus(self, *, skip_empty: bool = False) -> Corpus:
        return Corpus(self.corpus_path, skip_empty=skip_empty)

    def topics_path(self, split: str = "test") -> Path:
        if self.layout == "beir":
            return self.root / "queries.jsonl"
        for name in ([f"queries.{split}.tsv"] if split != "test" else []) + ["queries.tsv"]:
            if (self.root / name).is_file():
                return self.root / name
        raise InputError(f"{self.root}: no topics for split {split!r}")

    def qrels_path(self, split: str = "test") -> Path:
        if self.layout == "beir":
            p = self.root / "qrels" / f"{split}.tsv"
        else:
            p = self.root / (f"qrels.{split}.txt" if split != "test" else "qrels.txt")
        if not p.is_file():
            raise InputError(f"{self.root}: no qrels for split {split!r} ({p.name})")
        return p

    def topics(self, split: str = "test") -> list[Query]:
        topics = read_topics(self.topics_path(split))
        if self.layout == "beir":  # BEIR keeps every split's queries in one file: keep those judged in this split
            judged = {qid for qid, _, _ in iter_qrels(self.qrels_path(split))}
            topics = [q for q in topics if q.id in judged]
        return topics
