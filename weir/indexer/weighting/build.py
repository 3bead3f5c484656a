"""The ``deepct`` and ``deepimpact`` index components: learned term weights written as Lucene indexes.

- ``deepct``: each document becomes a BM25 pseudo-document where term ``t`` with predicted weight ``w`` is written
  ``tf = round(w * 100)`` times (terms with tf < 1 dropped), indexed ``-pretokenized`` (whitespace analyzer: the
  repeats count as written) with norms, for BM25 (k1=10, b=0.9 at search time).
- ``deepimpact``: impacts are quantized over the whole collection with ``scale = 2**8 / max_impact`` and
  ``q = ceil(impact * scale)`` (terms with q = 0, i.e. impact 0, dropped), and indexed ``-impact -pretokenized``:
  the stored frequency of a term is its quantized impact (what Anserini makes of a ``JsonVectorCollection``
  document, term repeated q times), scored by ``ImpactSimilarity``.

The builders only write: the weights come from the build's document pass (:mod:`weir.indexer.document_pass`), one
backbone forward per passage for every head sharing the backbone (or the term vector cache of
:mod:`weir.indexer.weighting.cache` when one exists for these documents). Term vectors come rounded to float16, as the
cache stores them: a build gives the same weights with or without the cache, and in one process or on Ray workers
(:mod:`weir.indexer.distributed`, which run the pass's blocks). The manifest entry records
the model card and its sha256, the quantization parameters and counts.

A shard of a shard set (:func:`weir.indexer.shard_set.build_shard_set`) takes its documents' weights from
:class:`weir.indexer.inputs.CollectionWeights`, computed once over the whole collection: the same batches, term
statistics and, for ``deepimpact``, largest impact as a single index of the collection, so its postings are that
index's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from weir.indexer.inputs import BuildInputs, LearnedWeights, largest_impact
from weir.indexer.lucene import index_pretokenized
from weir.indexer.weighting.postings import StreamedPostings
from weir.indexer.weighting.terms import counts_query_terms
from weir.core.runtime import shipped_model
from weir.core.types import Document, InputError

DEFAULT_MODELS = {"deepct": "deepct", "deepimpact": "deepimpact"}  # under models/ (the BM25-shaped, multi-collection heads)
TF_SCALE = 100
QUANT_BITS = 8


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


def model_path(kind: str, learned: dict) -> Path:
    """The model directory of learned component ``kind``: the one ``learned`` (:attr:`BuildInputs.learned`) names,
    else the shipped one."""
    given = (learned or {}).get(f"{kind}_model")
    return Path(given) if given else shipped_model(DEFAULT_MODELS[kind])


def weights_depend_on_collection(kind: str, card: dict) -> bool:
    """Whether a ``kind`` head with this card gives a document weights that depend on the other documents indexed
    with it: lexical features (idf) read the collection's statistics, a BM25-shaped DeepImpact prior its document
    frequencies and mean length, and every DeepImpact build quantizes with its collection's largest impact."""
    return kind == "deepimpact" or bool(card.get("features"))


def describe_model(model) -> dict:
    """A term weighting model as the manifest records it: its description, its card and its search parameters."""
    return {**model.describe(), "card": model.card, "search": model.search_parameters()}


def same_backbone(card: dict, other: dict) -> bool:
    """Whether heads with these model cards run on one backbone (the same base model and input length)."""
    return card.get("base_model") == other.get("base_model") and card.get("max_length") == other.get("max_length")


def _weights(kind: str, documents: Iterable[Document], inputs: BuildInputs) -> LearnedWeights:
    """``kind``'s weights for ``documents``: the build's document pass computed them
    (:attr:`BuildInputs.learned_memo`); a shard of a shard set takes its documents' from
    :attr:`BuildInputs.collection_weights`."""
    whole = inputs.collection_weights
    if whole is not None and kind in whole.memo:
        return whole.select(kind, documents)
    memo = inputs.learned_memo
    if kind not in memo:
        raise InputError(f"the {kind} component is written from the build's document pass, which did not weigh it")
    for _ in documents:  # the stream is consumed (and validated) as for any component
        pass
    return memo[kind]


def build_deepct(documents: Iterable[Document], out: Path, inputs: BuildInputs) -> dict:
    docids, weights, model = _weights("deepct", documents, inputs)
    stream = StreamedPostings()

    def contents():
        for d, (terms, w) in zip(docids, weights):
            tf = deepct_tf(w)
            stream.add(d, terms, tf)
            yield d, pseudo_document(terms, tf)

    indexed, empty = index_pretokenized(out, contents(), [], inputs.threads)
    return {"type": "lucene-deepct", "documents": indexed, "documents_without_terms": empty, "postings": len(stream),
            "postings_arrays": stream.write(out),
            "model": model, "parameters": {"tf": f"round(w * {TF_SCALE}), tf < 1 dropped", "tf_scale": TF_SCALE,
                                           "analyzer": "whitespace (-pretokenized); terms from weir.indexer.weighting.terms",
                                           "search": model["search"], "docid_table": "docids.txt"}}


def build_deepimpact(documents: Iterable[Document], out: Path, inputs: BuildInputs) -> dict:
    docids, impacts, model = _weights("deepimpact", documents, inputs)
    whole = inputs.collection_weights
    if whole is not None:  # a shard of a shard set: the whole collection's scale, the same in every shard
        max_impact, of = whole.max_impact, "collection"
    else:
        max_impact, of = largest_impact(impacts), "index"
    scale = impact_scale(max_impact)
    stream = StreamedPostings()

    def contents():
        for d, (terms, w) in zip(docids, impacts):
            q = quantize(w, scale)
            stream.add(d, terms, q)
            yield d, pseudo_document(terms, q)

    indexed, empty = index_pretokenized(out, contents(), ["-impact"], inputs.threads)
    return {"type": "lucene-impact", "documents": indexed, "documents_without_terms": empty, "postings": len(stream),
            "postings_arrays": stream.write(out),
            "model": model, "parameters": {
                "quantization": {"bits": QUANT_BITS, "max_impact": max_impact, "scale": scale,
                                 "max_impact_of": of, "formula": "ceil(impact * 2**8 / max_impact); 0 dropped"},
                "analyzer": "whitespace (-impact -pretokenized); terms from weir.indexer.weighting.terms",
                "query_weights": ("each query term's count" if counts_query_terms("deepimpact", model.get("shape"))
                                  else "1 per unique query term"), "docid_table": "docids.txt"}}
