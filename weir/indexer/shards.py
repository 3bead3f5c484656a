"""Shard indexes: which documents a shard holds, a set of shards checked to be one whole collection, and the
collection statistics of the whole set (what makes BM25 scores of different shards comparable).

A shard is an ordinary index directory built by ``weir index build --shard I/N``: it holds the documents whose
ordinal in the corpus stream (0-based, counting the documents the build reads, after ``--skip-empty``, before
pruning) is ``I`` modulo ``N``. The rule needs no first pass over the corpus, spreads any ordering of the corpus
evenly over the shards, and gives every document to exactly one shard. Its manifest records ``shard`` (index,
count, rule, the documents of the whole collection that the set of shards holds) beside the usual counts.

BM25's score of a posting depends on the document only through its term frequency and its length norm (both the
same in any index that holds it) and on the collection through three statistics: the number of documents with the
field (``docCount``), their total length (``sumTotalTermFreq``, giving the average length) and each term's
document frequency. Summed over the shards, these are the whole collection's, so a shard scoring with the summed
statistics (:func:`global_statistics`) gives every document the score, bit for bit, that an index of the whole
collection gives it. Flat dense indexes score a document without collection statistics at all.

Learned weights are fixed at build time. A DeepImpact build quantizes impacts with the largest impact of the
documents it indexes (``ceil(impact * 2^8 / max_impact)``), and a BM25-shaped head (or one with lexical features)
reads the term statistics of the documents indexed with it, so shards built one by one hold weights on scales of
their own. A shard set (``--shard-set N``) weighs the whole collection once and quantizes every shard with the
collection's largest impact: its shards hold the single index's postings. :func:`incomparable_learned` says which
learned components of a set of shards can not be searched as one index, and why.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from weir.indexer.index_dir import read_manifest
from weir.core.types import InputError

RULE = "document ordinal mod count"


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` of ``count`` (0 <= index < count)."""

    index: int
    count: int

    def __post_init__(self):
        if not (self.count >= 1 and 0 <= self.index < self.count):
            raise InputError(f"a shard is I/N with 0 <= I < N (got {self.index}/{self.count})")

    @classmethod
    def parse(cls, text: str) -> ShardSpec:
        """``"I/N"`` (e.g. ``0/2``, the first of two shards)."""
        parts = str(text).strip().split("/")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise InputError(f"--shard takes I/N, e.g. 0/2 for the first of two shards (got {text!r})")
        return cls(int(parts[0]), int(parts[1]))

    def takes(self, ordinal: int) -> bool:
        """Whether the document at ``ordinal`` in the corpus stream belongs to this shard."""
        return ordinal % self.count == self.index

    def describe(self) -> dict:
        return {"index": self.index, "count": self.count, "rule": RULE}


@dataclass(frozen=True, eq=False)
class CollectionStatistics:
    """The statistics a BM25 similarity reads, for the terms of one shard: ``doc_freqs[t]`` is the document frequency
    over the whole shard set of the shard's term ``t`` (its order in the shard's ``terms.txt``)."""

    doc_count: int
    sum_total_term_freq: int
    doc_freqs: np.ndarray

    def describe(self) -> dict:
        return {"doc_count": self.doc_count, "sum_total_term_freq": self.sum_total_term_freq,
                "terms": len(self.doc_freqs)}


def read_shard_set(paths: list[str | os.PathLike]) -> list[dict]:
    """The manifests of ``paths``, checked to be every shard of one build of one collection, each once, in shard
    order; an :class:`InputError` says what does not fit."""
    if not paths:
        raise InputError("no shard index given")
    manifests = [read_manifest(p) for p in paths]
    for path, m in zip(paths, manifests):
        if "shard" not in m:
            raise InputError(f"{path} is not a shard index (built without --shard I/N)")
    first = manifests[0]
    count = first["shard"]["count"]
    seen: dict[int, str] = {}
    for path, m in zip(paths, manifests):
        shard = m["shard"]
        if shard["count"] != count or shard.get("rule") != first["shard"].get("rule"):
            raise InputError(f"{path} is shard {shard['index']}/{shard['count']}, {paths[0]} is one of {count}: "
                             "shards of different builds")
        if m["collection"].get("sha256") != first["collection"].get("sha256"):
            raise InputError(f"{path} was built from another corpus than {paths[0]}")
        if sorted(m["components"]) != sorted(first["components"]):
            raise InputError(f"{path} has components {', '.join(m['components'])}, {paths[0]} has "
                             f"{', '.join(first['components'])}: every shard needs the same components")
        for name, component in m["components"].items():
            if _model_of(component) != _model_of(first["components"][name]):
                raise InputError(f"{path} and {paths[0]} built their {name!r} component with different models")
        if (m.get("pruning") or {}).get("card_sha256") != (first.get("pruning") or {}).get("card_sha256"):
            raise InputError(f"{path} and {paths[0]} were pruned differently")
        if shard["index"] in seen:
            raise InputError(f"{path} and {seen[shard['index']]} are both shard {shard['index']}/{count}")
        seen[shard["index"]] = str(path)
    missing = sorted(set(range(count)) - set(seen))
    if missing:
        raise InputError(f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing: a sharded server needs "
                         f"all {count}")
    total = sum(m["counts"]["documents"] for m in manifests)
    if total != first["shard"]["collection_documents"]:
        raise InputError(f"the shards hold {total} documents, the collection {first['shard']['collection_documents']}")
    order = sorted(range(len(paths)), key=lambda i: manifests[i]["shard"]["index"])
    return [manifests[i] for i in order]


def incomparable_learned(manifests: list[dict]) -> dict[str, str]:
    """Per learned component (``deepct``, ``deepimpact``) of these shards' manifests whose document weights are not
    those of a single index over the whole collection, the reason; components whose weights depend on each document
    alone (a DeepCT head without lexical features) are comparable however the shards were built."""
    from weir.indexer.weighting.build import weights_depend_on_collection

    out: dict[str, str] = {}
    for kind in ("deepct", "deepimpact"):
        entries = [m["components"].get(kind) for m in manifests]
        if not entries or any(e is None for e in entries):
            continue
        card = (entries[0].get("model") or {}).get("card") or {}
        if not weights_depend_on_collection(kind, card):
            continue
        if any((m.get("shard") or {}).get("learned_weights") != "collection" for m in manifests):
            out[kind] = ("the shards were built one by one (--shard I/N), each weighing its documents with its own "
                         "statistics" + (" and quantizing with its own largest impact" if kind == "deepimpact" else "")
                         + "; build them as one set with `weir index build --shard-set N`")
            continue
        if kind == "deepimpact":
            scales = sorted({e["parameters"]["quantization"]["scale"] for e in entries})
            if len(scales) > 1:
                out[kind] = f"the shards quantized impacts on different scales ({', '.join(map(str, scales))})"
    return out


def _model_of(component: dict) -> str:
    """What a component was built with that must be the same in every shard: its model (term weighting heads), its
    encoder (dense; not where it ran)."""
    encoder = {k: v for k, v in (component.get("encoder") or {}).items() if k not in ("device", "fp16", "model_path")}
    return json.dumps([component.get("model"), encoder], sort_keys=True, default=str)


def _postings_statistics(lucene_path: Path) -> tuple[list[str], np.ndarray, int, int]:
    """(terms, document frequencies, docCount, sumTotalTermFreq) of a component's stored postings, read without the
    postings themselves."""
    from weir.indexer.postings import DIRECTORY

    directory = Path(lucene_path) / DIRECTORY
    if not (directory / "meta.json").is_file():
        raise InputError(f"{lucene_path} has no stored postings; `weir index upgrade` the shard first")
    meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
    terms = (directory / "terms.txt").read_text(encoding="utf-8").split("\n")[:-1]
    if meta.get("deleted_documents"):
        dfs = np.load(directory / "lucene_doc_freqs.npy").astype(np.int64)
    else:
        dfs = np.diff(np.load(directory / "offsets.npy", mmap_mode="r")).astype(np.int64)
    if len(dfs) != len(terms):
        raise InputError(f"{directory}: {len(terms)} terms, {len(dfs)} document frequencies (corrupt postings)")
    return terms, dfs, int(meta["doc_count"]), int(meta["sum_total_term_freq"])


def global_statistics(paths: list[str | os.PathLike], component: str = "bm25") -> list[CollectionStatistics]:
    """For each shard of ``paths`` (in the order given), the statistics of the whole shard set for its terms of
    ``component``: docCount and sumTotalTermFreq summed over the shards, each term's document frequency summed over
    the shards that hold it."""
    read_shard_set(paths)
    per_shard = []
    for p in paths:
        m = read_manifest(p)
        if component not in m["components"]:
            raise InputError(f"{p} has no {component!r} component")
        per_shard.append(_postings_statistics(Path(p) / m["components"][component]["path"]))
    totals: dict[str, int] = {}
    for terms, dfs, _, _ in per_shard:
        for term, df in zip(terms, dfs.tolist()):
            totals[term] = totals.get(term, 0) + df
    doc_count = sum(s[2] for s in per_shard)
    sum_ttf = sum(s[3] for s in per_shard)
    return [CollectionStatistics(doc_count, sum_ttf, np.array([totals[t] for t in terms], dtype=np.int64))
            for terms, _, _, _ in per_shard]
