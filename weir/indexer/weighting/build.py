"""The ``deepct`` and ``deepimpact`` index components: learned term weights written as Lucene indexes.

- ``deepct``: each document becomes a BM25 pseudo-document where term ``t`` with predicted weight ``w`` is written
  ``tf = round(w * 100)`` times (terms with tf < 1 dropped), indexed ``-pretokenized`` (whitespace analyzer: the
  repeats count as written) with norms, for BM25 (k1=10, b=0.9 at search time).
- ``deepimpact``: impacts are quantized over the whole collection with ``scale = 2**8 / max_impact`` and
  ``q = ceil(impact * scale)`` (terms with q = 0, i.e. impact 0, dropped), and indexed ``-impact -pretokenized``:
  the stored frequency of a term is its quantized impact (what Anserini makes of a ``JsonVectorCollection``
  document, term repeated q times), scored by ``ImpactSimilarity``.

The builders read what the build gives them from :class:`weir.indexer.inputs.BuildInputs`. Both components of one
build share one encoder pass when their heads share a backbone (and read the term vector cache of
:mod:`weir.indexer.weighting.cache` when one exists for these documents). Term vectors come rounded to float16, as the
cache stores them: a build gives the same weights with or without the cache, and in one process or on Ray workers
(:mod:`weir.indexer.distributed`, which runs the same batches of :data:`BATCH` documents). The manifest entry records
the model card and its sha256, the quantization parameters and counts.

A shard of a shard set (:func:`weir.indexer.build.build_shard_set`) takes its documents' weights from
:class:`weir.indexer.inputs.CollectionWeights`, computed once over the whole collection: the same batches, term
statistics and, for ``deepimpact``, largest impact as a single index of the collection, so its postings are that
index's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from tqdm import tqdm

from weir.indexer.inputs import BuildInputs, CollectionWeights, LearnedWeights, SharedDense, largest_impact
from weir.indexer.lucene import index_pretokenized
from weir.indexer.weighting.terms import counts_query_terms
from weir.core.runtime import shipped_model
from weir.core.types import Document

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


def collection_weights(documents: Iterable[Document], learned: dict, components: tuple[str, ...], dense=None
                       ) -> CollectionWeights:
    """The learned weights of every document of ``documents`` (the whole collection, as a single index reads it) for
    each learned component of ``components``, with the collection's term statistics; ``learned``: as
    :attr:`BuildInputs.learned`; with ``dense`` (a :class:`weir.indexer.dense.DenseConfig`), the dense vectors of
    the same pass where the single index takes them from it."""
    docs = list(documents)
    inputs = BuildInputs(components=tuple(components), learned=learned or {}, dense=dense)
    for kind in learned_kinds(inputs.components):
        _weights(kind, docs, inputs)  # one pass for the heads that share a backbone
    whole = CollectionWeights.of(inputs.learned_memo)
    whole.shared_dense = inputs.shared_dense
    return whole


def describe_model(model) -> dict:
    """A term weighting model as the manifest records it: its description, its card and its search parameters."""
    return {**model.describe(), "card": model.card, "search": model.search_parameters()}


def same_backbone(card: dict, other: dict) -> bool:
    """Whether heads with these model cards run on one backbone (the same base model and input length)."""
    return card.get("base_model") == other.get("base_model") and card.get("max_length") == other.get("max_length")


def _weights(kind: str, documents: Iterable[Document], inputs: BuildInputs) -> LearnedWeights:
    """``kind``'s weights for ``documents``; computed once per build for every learned component requested whose head
    shares the backbone (:attr:`BuildInputs.learned_memo`); a shard of a shard set takes its documents' from
    :attr:`BuildInputs.collection_weights`."""
    whole = inputs.collection_weights
    if whole is not None and kind in whole.memo:
        return whole.select(kind, documents)
    memo = inputs.learned_memo
    if kind in memo:
        for _ in documents:  # the stream is consumed (and validated) as for any component
            pass
        return memo[kind]
    models = _models_sharing_a_backbone(kind, inputs)
    docs = list(documents)
    results = _weigh(models, docs, inputs)
    docids = [d.id for d in docs]
    for k, m in models.items():
        memo[k] = LearnedWeights(docids, results[k], describe_model(m))
    return memo[kind]


def _models_sharing_a_backbone(kind: str, inputs: BuildInputs) -> dict:
    """``kind``'s model, and those of the other learned components of the build whose heads share its backbone."""
    from weir.indexer.weighting.model import TermWeighter

    learned = inputs.learned
    kinds = learned_kinds(inputs.components or (kind,)) or [kind]
    if kind not in kinds:
        kinds.append(kind)
    first = TermWeighter(model_path(kind, learned), device=learned.get("device"), backend=learned.get("backend"),
                         batch_size=learned.get("batch_size") or 32)
    models = {kind: first}
    for other in kinds:
        if other == kind:
            continue
        path = model_path(other, learned)
        card = json.loads((path / "card.json").read_text(encoding="utf-8")) if (path / "card.json").is_file() else {}
        if same_backbone(card, first.card):
            models[other] = TermWeighter(path, backbone=first.backbone, batch_size=first.batch_size)
    return models


def shared_dense_encoder(inputs: BuildInputs, backbone):
    """The dense component's encoder when its vectors can come from the term-weighting pass of ``backbone``: the same
    model, backend, device and input length, and no other source of vectors asked for; else None."""
    config = inputs.dense
    if (config is None or not config.shared_pass or config.vectors_from or inputs.dense_vectors is not None
            or inputs.collection_weights is not None):
        return None
    from weir.indexer.encoder import shared_encoder

    encoder = shared_encoder(config.model, **config.encoder_options())
    return encoder if shares_backbone(encoder, backbone) else None


def shares_backbone(encoder, backbone) -> bool:
    """Whether ``encoder`` (:class:`weir.indexer.encoder.Encoder`) runs what ``backbone`` runs: the same model,
    backend, device and input length (so the backbone's first window, pooled, can be its passage vector)."""
    return (encoder.model_path, encoder.backend, encoder.device, encoder.passage_max_length) == \
        (backbone.path, backbone.backend, backbone.device, backbone.max_length)


def _shared_pass_vectors(encoder, docs: list[Document], pooled: list) -> SharedDense:
    """The dense vectors of the pass, and how many passages' windows differ from the dense encoder's own input (the
    words of a window are a text's runs of letters and digits: punctuation is not in it)."""
    had = [i for i, (ids, _) in enumerate(pooled) if ids]
    differ = 0
    for start in range(0, len(had), 1024):
        part = had[start:start + 1024]
        own = encoder.tokenizer([docs[i].contents for i in part], truncation=True,
                                max_length=encoder.passage_max_length)["input_ids"]
        differ += sum(list(ids) != pooled[i][0] for ids, i in zip(own, part))
    return SharedDense.of(docs, pooled, encoder.dim, {
        "passages": len(had), "input_differs_from_a_separate_pass": differ,
        "input": "the first term-weighting window: whole words (runs of letters and digits) up to the backbone's "
                 "max_length word pieces, special tokens included; pooled and normalized as the encoder does"})


def _weigh(models: dict, docs: list[Document], inputs: BuildInputs | None = None) -> dict[str, list]:
    """Each model's (terms, weights) for every document of ``docs``, from one pass of their shared backbone (or the
    term vectors cached for these documents); with a dense component on the same backbone
    (:func:`shared_dense_encoder`), its vectors from that pass too (``inputs.shared_dense``)."""
    from weir.indexer.weighting.cache import TermVectors, cache_key, cache_root
    from weir.indexer.weighting.model import TermStatistics

    first = next(iter(models.values()))
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
        encoder = shared_dense_encoder(inputs, first.backbone) if inputs is not None else None
        pooled: list = []
        what = "+".join(models) + ("+dense" if encoder is not None else "")
        with tqdm(total=len(docs), desc=f"{what} weights (one pass)", unit="doc", dynamic_ncols=True, mininterval=1.0) as bar:
            for start in range(0, len(docs), BATCH):
                batch = docs[start:start + BATCH]
                vecs, pools = first.backbone.term_vectors_and_pooled(
                    [d.contents for d in batch], first.batch_size, pool=encoder.pool if encoder else None)
                pooled.extend(pools)
                for j, (terms, v) in enumerate(vecs):
                    apply(start + j, terms, v)
                bar.update(len(batch))
        if encoder is not None:
            inputs.shared_dense = _shared_pass_vectors(encoder, docs, pooled)
    return results


def build_deepct(documents: Iterable[Document], out: Path, inputs: BuildInputs) -> dict:
    docids, weights, model = _weights("deepct", documents, inputs)
    postings = 0

    def contents():
        nonlocal postings
        for d, (terms, w) in zip(docids, weights):
            tf = deepct_tf(w)
            postings += int((tf >= 1).sum())
            yield d, pseudo_document(terms, tf)

    indexed, empty = index_pretokenized(out, contents(), [], inputs.threads)
    return {"type": "lucene-deepct", "documents": indexed, "documents_without_terms": empty, "postings": postings,
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
    postings = 0

    def contents():
        nonlocal postings
        for d, (terms, w) in zip(docids, impacts):
            q = quantize(w, scale)
            postings += int((q >= 1).sum())
            yield d, pseudo_document(terms, q)

    indexed, empty = index_pretokenized(out, contents(), ["-impact"], inputs.threads)
    return {"type": "lucene-impact", "documents": indexed, "documents_without_terms": empty, "postings": postings,
            "model": model, "parameters": {
                "quantization": {"bits": QUANT_BITS, "max_impact": max_impact, "scale": scale,
                                 "max_impact_of": of, "formula": "ceil(impact * 2**8 / max_impact); 0 dropped"},
                "analyzer": "whitespace (-impact -pretokenized); terms from weir.indexer.weighting.terms",
                "query_weights": ("each query term's count" if counts_query_terms("deepimpact", model.get("shape"))
                                  else "1 per unique query term"), "docid_table": "docids.txt"}}
