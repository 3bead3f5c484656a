"""The document pass of a build: each kept passage read once, the backbone run once over it, and what every consumer
of that forward needs handed to the component builders, which then only write:

- the learned term weights of ``deepct`` and ``deepimpact`` (their heads on the term vectors; every window of the
  passage is read, so no term of a long passage goes unweighted);
- the ``dense`` vector: the first window pooled and normalized as the dense encoder does, where the dense encoder is
  the backbone (same model, backend, device and length) and no other source of vectors is asked for;
- the ``attention`` component's passage states: the first window's token states, written as they come
  (:mod:`weir.indexer.passage_states`).

Input (``--pass-input``, chosen by measurement, ``research/pass_input.py`` and ``research/attention_states.py``):
``text`` reads the passage's own word pieces, punctuation included, so that its first window is exactly what a
separate dense encoder and the attention reranker read (a term's vector is its word's first piece in that context);
``words`` reads only its runs of letters and digits (the term weighting heads' training input). The passage states
need ``text``: the reranker computes the same states from a passage's text at query time when an index lacks them.

The in-process build runs :func:`run_pass` as a step of its own before any component; a distributed build's workers
(:mod:`weir.indexer.distributed`) run :meth:`DocumentPass.block` on their blocks, the same batches of :data:`BATCH`
passages, so both give the same files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from weir.core.types import Document, InputError
from weir.indexer.inputs import BuildInputs, CollectionWeights, LearnedWeights, SharedDense
from weir.indexer.passage_states import DIRECTORY

BATCH = 256  # passages per block of the pass (a distributed build's workers run the same blocks)
PASS_INPUTS = ("auto", "text", "words")  # --pass-input
DEFAULT_INPUT = "auto"
STATES = DIRECTORY  # the component of the passage states


@dataclass
class PassBlock:
    """What the pass gives of a block of passages: per learned kind each passage's (terms, weights); per passage its
    first window's word pieces and, where the dense vectors come from the pass, that window pooled
    (``windows``); per passage its states (None when the build has no ``attention`` component)."""

    weights: dict[str, list[tuple[list[str], np.ndarray]]]
    windows: list[tuple[list[int], np.ndarray | None]]
    states: list[np.ndarray] | None


class DocumentPass:
    """The consumers of one build's backbone pass: the learned models (kind -> :class:`TermWeighter`) sharing the
    backbone, the dense encoder reading its first windows (or None), whether passage states are kept."""

    def __init__(self, backbone, models: dict, encoder=None, states: bool = False):
        self.backbone, self.models, self.encoder, self.states = backbone, models, encoder, states
        self.batch_size = next(iter(models.values())).batch_size if models else 32
        self.needs_statistics = any(m.needs_statistics for m in models.values())

    def consumers(self) -> list[str]:
        return [*self.models, *(["dense"] if self.encoder is not None else []), *([STATES] if self.states else [])]

    def describe(self) -> dict:
        """What the manifest records of the pass."""
        return {"consumers": self.consumers(), "backbone": self.backbone.describe()}

    def block(self, docs: Sequence[Document], stats=None, offset: int = 0) -> PassBlock:
        """One forward per window of ``docs`` (a block of at most :data:`BATCH` passages); ``stats``: the collection's
        term statistics for the heads that read them, ``offset``: the block's first document's row in them."""
        passed = self.backbone.run([d.contents for d in docs], self.batch_size,
                                   pool=self.encoder.pool if self.encoder is not None else None,
                                   terms=bool(self.models), states=self.states)
        weights = {k: [(p.terms, m.weigh(p.vectors, stats, offset + i, p.terms)) for i, p in enumerate(passed)]
                   for k, m in self.models.items()}
        return PassBlock(weights, [(p.window, p.pooled) for p in passed],
                         [p.states for p in passed] if self.states else None)


def plan_passes(kinds: Sequence[str], learned: dict, *, encoder=None, states: bool = False,
                device: str | None = None, threads: int | None = None) -> list[DocumentPass]:
    """The document passes of a build (the in-process build's and each distributed worker's): one forward per window
    for the heads of ``kinds`` sharing the first head's backbone; one more pass per other backbone; ``encoder`` (the
    dense encoder, when it is that backbone) and the ``states`` take a pass that reads the passages' text: the heads'
    when they read it, else one of their own over the first windows.

    ``learned``: the build's learned settings (model directories, ``input``: ``auto``, ``text`` or ``words``,
    ``backend``, ``batch_size``). ``auto`` reads what the heads were trained on (their card's ``input``; words for the
    shipped ones: on the text input they lost 0.006 nDCG@10 on SciFact and 0.014 on CACM, significant;
    ``research/pass_input.py``), and the text for the dense vector and the states (what a separate encoder and the
    attention reranker read), in one more pass where the heads read words: the dense vector pooled from the words
    window lost 0.042 nDCG@10 on the DL pool against a separate pass (p 0.001; hybrid 0.028, p 0.02), stop 61.
    ``words`` gives the dense vector the heads' pass too (one pass, those figures)."""
    from weir.core.runtime import resolve_model
    from weir.indexer.weighting.build import model_path, same_backbone
    from weir.indexer.weighting.backbone import MAX_LENGTH, Backbone
    from weir.indexer.weighting.model import TermWeighter

    choice = pass_input(learned, states)
    groups: list[dict] = []
    for kind in kinds:
        path = model_path(kind, learned)
        card = json.loads((path / "card.json").read_text(encoding="utf-8")) if (path / "card.json").is_file() else {}
        heads_read = (card.get("parameters") or {}).get("input", "words") if choice == "auto" else choice
        group = next((g for g in groups if same_backbone(card, next(iter(g.values())).card)
                      and next(iter(g.values())).backbone.input == heads_read), None)
        if group is None:
            groups.append({kind: TermWeighter(path, device=device, backend=learned.get("backend"),
                                              batch_size=learned.get("batch_size") or 32, input=heads_read,
                                              threads=threads)})
        else:
            first = next(iter(group.values()))
            group[kind] = TermWeighter(path, backbone=first.backbone, batch_size=first.batch_size)
    passes = [DocumentPass(next(iter(g.values())).backbone, g) for g in groups]
    text_input = "words" if choice == "words" else "text"
    if (encoder is not None or states) and not passes:  # no heads: a pass for the dense vectors and the states
        passes.append(DocumentPass(Backbone(encoder.model_path if encoder is not None else None, device=device,
                                            threads=threads, backend=learned.get("backend"),
                                            max_length=encoder.passage_max_length if encoder is not None
                                            else MAX_LENGTH, input=text_input), {}))
    if encoder is not None:  # the dense vector reads the text a separate encoder reads (words only when asked)
        at = next((p for p in passes if p.backbone.input == text_input and shares_backbone(encoder, p.backbone)), None)
        if at is None and choice == "auto" and any(shares_backbone(encoder, p.backbone) for p in passes):
            at = DocumentPass(Backbone(encoder.model_path, device=device, threads=threads,
                                       backend=learned.get("backend"), max_length=encoder.passage_max_length,
                                       input="text"), {})
            passes.append(at)
        if at is not None:
            at.encoder = encoder
    if states:
        at = next((p for p in passes if p.backbone.input == "text" and p.backbone.max_length == MAX_LENGTH
                   and p.backbone.path == resolve_model(None)), None)
        if at is None:  # the heads read words: the states' own pass, over the first windows only
            at = DocumentPass(Backbone(None, device=device, threads=threads, backend=learned.get("backend"),
                                       max_length=MAX_LENGTH, input="text"), {})
            passes.append(at)
        at.states = True
    return [p for p in passes if p.models or p.encoder is not None or p.states]


def pass_input(learned: dict, states: bool = False) -> str:
    """The pass input a build asks for (``learned["input"]``, default :data:`DEFAULT_INPUT`), checked: one of
    :data:`PASS_INPUTS`, and not ``words`` when the build has passage states (they read the text)."""
    choice = learned.get("input") or DEFAULT_INPUT
    if choice not in PASS_INPUTS:
        raise InputError(f"unknown pass input {choice!r}; known: {', '.join(PASS_INPUTS)}")
    if states and choice == "words":
        raise InputError("the attention component's passage states are read from the passages' text: build it "
                         "with --pass-input auto or text")
    return choice


def passes_for_build(inputs: BuildInputs) -> list[DocumentPass]:
    """:func:`plan_passes` for an in-process build: its learned components (none for a shard of a shard set, which
    takes the set's weights), its dense encoder where the pass can give its vectors, its attention component."""
    from weir.indexer.weighting.build import learned_kinds

    kinds = [] if inputs.collection_weights is not None else learned_kinds(inputs.components)
    learned = inputs.learned
    return plan_passes(kinds, learned, encoder=dense_encoder(inputs), states=STATES in inputs.components,
                       device=learned.get("device"))


def dense_encoder(inputs: BuildInputs):
    """The dense component's encoder when its vectors may come from a document pass (no other source of vectors
    asked for, and not refused by ``--dense-own-pass``); else None."""
    config = inputs.dense
    if (config is None or not config.shared_pass or config.vectors_from or inputs.dense_vectors is not None
            or inputs.collection_weights is not None):
        return None
    from weir.indexer.encoder import shared_encoder

    return shared_encoder(config.model, **config.encoder_options())


def shares_backbone(encoder, backbone) -> bool:
    """Whether ``encoder`` (:class:`weir.indexer.encoder.Encoder`) runs what ``backbone`` runs: the same model,
    backend, device and input length (so the backbone's first window, pooled, can be its passage vector)."""
    return (encoder.model_path, encoder.backend, encoder.device, encoder.passage_max_length) == \
        (backbone.path, backbone.backend, backbone.device, backbone.max_length)


def shared_vectors(encoder, backbone, docs: Sequence[Document], windows: list) -> SharedDense:
    """The dense vectors of the pass, and how many passages' first windows differ from the dense encoder's own input
    (none with the ``text`` input; with ``words``, those with punctuation)."""
    had = [i for i, (ids, _) in enumerate(windows) if ids]
    differ = 0
    if backbone.input != "text":
        for start in range(0, len(had), 1024):
            part = had[start:start + 1024]
            own = encoder.tokenizer([docs[i].contents for i in part], truncation=True,
                                    max_length=encoder.passage_max_length)["input_ids"]
            differ += sum(list(ids) != windows[i][0] for ids, i in zip(own, part))
    what = ("the passage's first window: its own word pieces, up to the backbone's max_length, special tokens "
            "included (what the dense encoder reads)" if backbone.input == "text" else
            "the first term-weighting window: whole words (runs of letters and digits) up to the backbone's "
            "max_length word pieces, special tokens included")
    return SharedDense.of(docs, windows, encoder.dim, {
        "passages": len(had), "input_differs_from_a_separate_pass": differ,
        "input": what + "; pooled and normalized as the encoder does"})


def run_pass(documents: Iterable[Document], inputs: BuildInputs, out: Path | None,
             passes: list[DocumentPass] | None = None) -> dict | None:
    """The in-process build's document pass over ``documents`` (the kept passages of the index or shard): the learned
    weights into :attr:`BuildInputs.learned_memo`, the dense vectors into :attr:`BuildInputs.shared_dense`, the states
    into the ``attention`` component under ``out`` (its manifest entry in :attr:`BuildInputs.passage_states`).
    Returns the manifest's ``document_pass`` entry (None when no component reads the backbone). ``passes``: as
    :func:`passes_for_build` plans them (planned here when not given)."""
    passes = passes_for_build(inputs) if passes is None else passes
    if not passes:
        return None
    docs = list(documents)
    for document_pass in passes:
        _pass_over(document_pass, docs, inputs, out)
    return {"passes": [p.describe() for p in passes], "passages": len(docs)}


def collection_weights(documents: Iterable[Document], learned: dict, components: tuple[str, ...], dense=None
                       ) -> CollectionWeights:
    """The learned weights of every document of ``documents`` (the whole collection, as a single index reads it) for
    each learned component of ``components``, with the collection's term statistics (a shard set's pass: each shard
    takes its documents' weights); ``learned``: as :attr:`BuildInputs.learned`; with ``dense`` (a
    :class:`weir.indexer.dense.DenseConfig`), the dense vectors of the same pass where the single index takes them
    from it. Passage states are each shard's own pass's (they depend on the passage alone)."""
    from weir.indexer.weighting.build import learned_kinds

    inputs = BuildInputs(components=tuple(learned_kinds(components)), learned=learned or {}, dense=dense)
    run_pass(documents, inputs, None)  # (without heads, dense encodes in each shard)
    whole = CollectionWeights.of(inputs.learned_memo)
    whole.shared_dense = inputs.shared_dense
    return whole


def _pass_over(document_pass: DocumentPass, docs: list[Document], inputs: BuildInputs, out: Path | None) -> None:
    from weir.indexer.weighting.build import describe_model
    from weir.indexer.weighting.cache import TermVectors, cache_key, cache_root
    from weir.indexer.weighting.model import TermStatistics

    models = document_pass.models
    results: dict[str, list] = {k: [] for k in models}
    stats = TermStatistics(d.contents for d in docs) if document_pass.needs_statistics else None
    cached = cache_root() / cache_key(document_pass.backbone, docs) if models else None
    if cached is not None and not document_pass.states and (cached / "docids.json").is_file():
        # term vectors cached for these passages (research sweeps): no forward; a dense encoder reads on its own
        tv = TermVectors.load(cached)
        for i in tqdm(range(len(docs)), desc=f"{'+'.join(models)} weights (cached vectors)", unit="doc",
                      mininterval=1.0):
            vecs = np.asarray(tv.vectors(i), dtype=np.float32)
            for k, m in models.items():
                results[k].append((tv.terms[i], m.weigh(vecs, stats, i, tv.terms[i])))
        document_pass.encoder = None
    else:
        from weir.indexer.passage_states import StatesWriter

        writer = StatesWriter(out / STATES, document_pass.backbone.dim, states_source(document_pass.backbone)) \
            if document_pass.states else None
        windows: list = []
        with tqdm(total=len(docs), desc=f"document pass ({'+'.join(document_pass.consumers())})", unit="doc",
                  dynamic_ncols=True, mininterval=1.0) as bar:
            for start in range(0, len(docs), BATCH):
                batch = docs[start:start + BATCH]
                block = document_pass.block(batch, stats, start)
                for k in models:
                    results[k].extend(block.weights[k])
                if document_pass.encoder is not None:
                    windows.extend(block.windows)
                if writer is not None:
                    for d, s in zip(batch, block.states):
                        writer.add(d.id, s)
                bar.update(len(batch))
        if document_pass.encoder is not None:
            inputs.shared_dense = shared_vectors(document_pass.encoder, document_pass.backbone, docs, windows)
        if writer is not None:
            inputs.passage_states = writer.close()
    docids = [d.id for d in docs]
    for k, m in models.items():
        inputs.learned_memo[k] = LearnedWeights(docids, results[k], describe_model(m))


def add_states(directory: Path, learned: dict | None = None) -> dict:
    """The ``attention`` component written into an existing index (``weir index upgrade --with attention``): the
    states pass over the documents its BM25 component stores, in its row order, into a staging directory renamed into
    place; returns the manifest entry. The index's manifest is the caller's to update."""
    import shutil

    from weir.indexer.docstore import DocumentStore
    from weir.indexer.lucene import read_docid_table

    bm25 = Path(directory) / "bm25"
    if not DocumentStore.exists(bm25):
        raise InputError(f"{directory}: no stored documents to read the passages from (run `weir index upgrade` "
                         "first, or build the index again with --with ...,attention)")
    docids = read_docid_table(bm25)
    store = DocumentStore(bm25, docids)
    passes = plan_passes([], learned or {}, states=True)
    staging = Path(directory) / f".{STATES}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    inputs = BuildInputs(components=(STATES,), learned=learned or {})
    ids = list(docids)

    def documents():
        for start in range(0, len(ids), BATCH):
            found = store.get(ids[start:start + BATCH])
            yield from (found[d] for d in ids[start:start + BATCH])

    _pass_over(passes[0], list(documents()), inputs, staging)
    target = Path(directory) / STATES
    shutil.rmtree(target, ignore_errors=True)
    (staging / STATES).rename(target)
    shutil.rmtree(staging, ignore_errors=True)
    return {"path": STATES, **inputs.passage_states}


def states_source(backbone) -> dict:
    """What a passage states component records of the forward that made its states (the reranker reads stored states
    only from a backbone of its own model, at the length and input it would compute them)."""
    d = backbone.describe()
    return {"backbone": {k: d.get(k) for k in ("base_model", "base_model_sha256", "max_length", "input", "backend")},
            "states": "the first window's last hidden states, each L2-normalized, [CLS] and [SEP] included"}
