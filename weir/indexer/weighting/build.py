"""The ``deepct`` and ``deepimpact`` index components: learned term weights written as Lucene indexes.

- ``deepct``: each document becomes a BM25 pseudo-document where term ``t`` with predicted weight ``w`` is written
  ``tf = round(w * 100)`` times (terms with tf < 1 dropped), indexed ``-pretokenized`` (whitespace analyzer: the
  repeats count as written) with norms, for BM25 (k1=10, b=0.9 at search time).
- ``deepimpact``: impacts are quantized over the whole collection with ``scale = 2**8 / max_impact`` and
  ``q = ceil(impact * scale)`` (terms with q = 0, i.e. impact 0, dropped), and indexed ``-impact -pretokenized``:
  the stored frequency of a term is its quantized impact (what Anserini makes of a ``JsonVectorCollection``
  document, term repeated q times), scored by ``ImpactSimilarity``.

Both components of one build share one encoder pass when their heads share a backbone (and read the term vector
cache of :mod:`weir.indexer.weighting.cache` when one exists for these documents). Term vectors come rounded to float16, as
the cache stores them: a build gives the same weights with or without the cache, and in one process or on Ray
workers (:mod:`weir.indexer.distributed`, which runs the same batches of :data:`BATCH` documents). The manifest entry records the
model card and its sha256, the quantization parameters and counts.

A shard of a shard set (:func:`weir.indexer.build.build_shard_set`) takes its documents' weights from
:class:`CollectionWeights`, computed once over the whole collection: the same batches, term statistics and, for
``deepimpact``, largest impact as a single index of the collection, so its postings are that index's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from weir.indexer.lucene import index_pretokenized
from weir.indexer.weighting.terms import counts_query_terms
from weir.core.runtime import shipped_model
from weir.core.types import Document, InputError

DEFAULT_MODELS = {"deepct": "deepct", "deepimpact": "deepimpact"}  # under models/ (the BM25-shaped, multi-collection heads)
TF_SCALE = 100
QUANT_BITS = 8
BATCH = 256


def deepct_tf(weights: np.ndarray) -> np.ndarray:
    """Pseudo-document term frequencies: ``round(w * 100)``; a value below 1 means the term is dropped."""
    return np.rint(np.asarray(weights, dtype=np.float64) * TF_SCALE).astype(np.int64)


def quantize(impacts: np.ndarray, scale: float) -> np.ndarray:
    """``ceil(impact * scale)`` as integers (0 for an impact of 0)."""
    return np.ceil(np.asarray(impacts, dtype=np.float64) * scale).astype(np.int64)


def impact_scale(max_impact: float, bits: int = QUANT_BITS) -> float:
    return (2 ** bits) / max_impact if max_impact > 0 else 1.0


def pseudo_document(terms: list[str], counts: np.ndarray) -> str:
    """Each term written ``count`` times (counts < 1 left out), space-separated."""
    return " ".join(" ".join([t] * int(c)) for t, c in zip(terms, counts) if c >= 1)


def learned_kinds(components) -> list[str]:
    return [k for k in ("deepct", "deepimpact") if k in components]


def model_path(kind: str, options: dict) -> Path:
    given = (options.get("learned") or {}).get(f"{kind}_model")
    return Path(given) if given else shipped_model(DEFAULT_MODELS[kind])


def weights_depend_on_collection(kind: str, card: dict) -> bool:
    """Whether a ``kind`` head with this card gives a document weights that depend on the other documents indexed
    with it: lexical features (idf) read the collection's statistics, a BM25-shaped DeepImpact prior its document
    frequencies and mean length, and every DeepImpact build quantizes with its collection's largest impact."""
    return kind == "deepimpact" or bool(card.get("features"))


@dataclass
class CollectionWeights:
    """Every learned component's weights for each document of a whole collection (``memo``: kind -> (docids,
    per-document (terms, weights), model description), lists, or the columns of a distributed build's shards) and
    the largest DeepImpact impact among them: computed once for all shards of a shard set, each taking its own
    documents' weights from it."""

    memo: dict
    max_impact: float | None
    _row: dict[str, int] = field(default_factory=dict, init=False, repr=False)  # document id -> position

    @classmethod
    def of(cls, memo: dict) -> CollectionWeights:
        """From a memo of :func:`_weights` (or of a distributed build's shards): the largest impact read once."""
        max_impact = None
        if "deepimpact" in memo:
            max_impact = max((float(w.max()) for _, w in memo["deepimpact"][1] if len(w)), default=0.0)
        return cls(memo, max_impact)

    def select(self, kind: str, documents: Iterable[Document]) -> tuple[list[str], object, dict]:
        """``kind``'s (docids, weights, model) for ``documents``, in their order (the collection's: a shard's
        documents come in corpus order); each must be one the weights were computed for."""
        docids, weights, model = self.memo[kind]
        ids = [d.id for d in documents]
        if not isinstance(weights, list):  # shard columns: read as the builder iterates, never all held
            return ids, _Subset(docids, weights, ids), model
        if not self._row:
            self._row.update((d, i) for i, d in enumerate(docids))
        missing = [d for d in ids if d not in self._row]
        if missing:
            raise InputError(_NO_WEIGHTS.format(missing[0]))
        return ids, [weights[self._row[d]] for d in ids], model


_NO_WEIGHTS = ("document {!r} has no weights in this shard set's pass over the collection (did the corpus change "
               "during the build?); build again")


class _Subset:
    """The weights of ``ids`` (in corpus order) from whole-collection columns, each time it is iterated."""

    def __init__(self, docids, weights, ids: list[str]):
        self.docids, self.weights, self.ids = docids, weights, ids
        self.wanted = set(ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self):
        given = 0
        for d, w in zip(self.docids, self.weights):
            if d in self.wanted:
                if d != self.ids[given]:
                    raise InputError(_NO_WEIGHTS.format(self.ids[given]))
                given += 1
                yield w
        if given != len(self.ids):
            raise InputError(_NO_WEIGHTS.format(self.ids[given]))


def collection_weights(documents: Iterable[Document], options: dict) -> CollectionWeights:
    """The learned weights of every document of ``documents`` (the whole collection, as a single index reads it) for
    each learned component in ``options['components']``, with the collection's term statistics."""
    docs = list(documents)
    run = {"learned": options.get("learned") or {}, "components": tuple(options["components"])}
    for kind in learned_kinds(run["components"]):
        _weights(kind, docs, run)  # one pass for the heads that share a backbone
    return CollectionWeights.of(run["_learned_memo"])


def _weights(kind: str, documents: Iterable[Document], options: dict) -> tuple[list[str], list, dict]:
    """(docids, per-document (terms, weights), model description) for ``kind``; computed once per build for every
    learned component requested whose head shares the backbone; a shard of a shard set takes its documents' from
    ``options['_collection_weights']``."""
    from weir.indexer.weighting.cache import TermVectors, cache_key, cache_root
    from weir.indexer.weighting.model import TermStatistics, TermWeighter

    whole = options.get("_collection_weights")
    if whole is not None and kind in whole.memo:
        return whole.select(kind, documents)
    memo = options.setdefault("_learned_memo", {})
    if kind in memo:
        for _ in documents:  # the stream is consumed (and validated) as for any component
            pass
        return memo[kind]
    learned = options.get("learned") or {}
    kinds = [k for k in ("deepct", "deepimpact") if k in (options.get("components") or (kind,))] or [kind]
    if kind not in kinds:
        kinds.append(kind)
    first = TermWeighter(model_path(kind, options), device=learned.get("device"),
                         batch_size=learned.get("batch_size") or 32)
    models = {kind: first}
    for other in kinds:
        if other == kind:
            continue
        path = model_path(other, options)
        card = json.loads((path / "card.json").read_text(encoding="utf-8")) if (path / "card.json").is_file() else {}
        if card.get("base_model") == first.card["base_model"] and card.get("max_length") == first.card.get("max_length"):
            models[other] = TermWeighter(path, backbone=first.backbone, batch_size=first.batch_size)
    docs = list(documents)
    results: dict[str, list] = {k: [] for k in models}
    # statistics of the collection being indexed, for heads with lexical features or a BM25-shaped prior
    stats = TermStatistics(d.contents for d in docs) if any(m.needs_statistics for m in models.values()) else None

    def apply(i: int, terms: list[str], vecs: np.ndarray) -> None:
        for k, m in models.items():
            results[k].append((terms, m.weigh(vecs, stats, i, terms)))

    cached = cache_root() / cache_key(first.backbone, docs)
    if (cached / "docids.json").is_file():
        tv = TermVectors.load(cached)
        for i in tqdm(range(len(docs)), desc=f"{'+'.join(models)} weights (cached vectors)", unit="doc",
                      mininterval=1.0):
            apply(i, tv.terms[i], np.asarray(tv.vectors(i), dtype=np.float32))
    else:
        with tqdm(total=len(docs), desc=f"{'+'.join(models)} weights", unit="doc", dynamic_ncols=True,
                  mininterval=1.0) as bar:
            for start in range(0, len(docs), BATCH):
                batch = docs[start:start + BATCH]
                vecs = first.backbone.term_vectors([d.contents for d in batch], first.batch_size)
                for j, (terms, v) in enumerate(vecs):
                    apply(start + j, terms, v)
                bar.update(len(batch))
    docids = [d.id for d in docs]
    for k, m in models.items():
        memo[k] = (docids, results[k], {**m.describe(), "card": m.card, "search": m.search_parameters()})
    return memo[kind]


def build_deepct(documents: Iterable[Document], out: Path, options: dict) -> dict:
    docids, weights, model = _weights("deepct", documents, options)
    postings = 0

    def contents():
        nonlocal postings
        for d, (terms, w) in zip(docids, weights):
            tf = deepct_tf(w)
            postings += int((tf >= 1).sum())
            yield d, pseudo_document(terms, tf)

    indexed, empty = index_pretokenized(out, contents(), [], options.get("threads"))
    return {"type": "lucene-deepct", "documents": indexed, "documents_without_terms": empty, "postings": postings,
            "model": model, "parameters": {"tf": f"round(w * {TF_SCALE}), tf < 1 dropped", "tf_scale": TF_SCALE,
                                           "analyzer": "whitespace (-pretokenized); terms from weir.indexer.weighting.terms",
                                           "search": model["search"], "docid_table": "docids.txt"}}


def build_deepimpact(documents: Iterable[Document], out: Path, options: dict) -> dict:
    docids, impacts, model = _weights("deepimpact", documents, options)
    whole = options.get("_collection_weights")
    if whole is not None:  # a shard of a shard set: the whole collection's scale, the same in every shard
        max_impact, of = whole.max_impact, "collection"
    else:
        max_impact, of = max((float(w.max()) for _, w in impacts if len(w)), default=0.0), "index"
    scale = impact_scale(max_impact)
    postings = 0

    def contents():
        nonlocal postings
        for d, (terms, w) in zip(docids, impacts):
            q = quantize(w, scale)
            postings += int((q >= 1).sum())
            yield d, pseudo_document(terms, q)

    indexed, empty = index_pretokenized(out, contents(), ["-impact"], options.get("threads"))
    return {"type": "lucene-impact", "documents": indexed, "documents_without_terms": empty, "postings": postings,
            "model": model, "parameters": {
                "quantization": {"bits": QUANT_BITS, "max_impact": max_impact, "scale": scale,
                                 "max_impact_of": of, "formula": "ceil(impact * 2**8 / max_impact); 0 dropped"},
                "analyzer": "whitespace (-impact -pretokenized); terms from weir.indexer.weighting.terms",
                "query_weights": ("each query term's count" if counts_query_terms("deepimpact", model.get("shape"))
                                  else "1 per unique query term"), "docid_table": "docids.txt"}}
