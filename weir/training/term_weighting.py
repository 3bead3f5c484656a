"""`weir train deepct|deepimpact`: train a head (:mod:`weir.indexer.weighting.model`) on a frozen backbone's cached term
vectors, from one or several training sources, or from pseudo-queries made from a collection itself.

The backbone runs once over each collection (:mod:`weir.indexer.weighting.cache`); training then only touches the head,
which takes minutes on a CPU.

Sources. ``--train COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]]`` (repeatable; the old ``--collection --queries
--qrels`` is one such source) and ``--self-supervised COLLECTION`` (repeatable): pseudo-queries made from the
collection, deterministically (seeded): a passage's title asks for the passage without its title, and a held-out
sentence asks for the rest of the passage; a positive is then scored on the terms the rest has, with the rest's
frequencies and length, so the head learns what a query is *not* already saying. Each source's queries are split
(seeded) into a training part and a validation part. ``--draws`` says how a step draws its queries:

- ``queries`` (default): every training query equally likely, times its source's weight, so an epoch sees each query
  about once; the validation mean is over queries too (a source counts its validation queries times its weight);
  self-supervised sources are left out of it when a source is judged (their pseudo-queries validate at about 0.98
  from the untrained head on: nothing to choose an epoch by);
- ``sources``: every source equally likely, times its weight, whatever its size (the recipe of the heads shipped
  before it). An epoch then repeats a small source's queries many times (43 DL 2019 queries beside 3,000 of
  ArguAna: each about 20 times an epoch), and the head learns them by heart: its validation nDCG@10 on the
  sources' held-out queries fell from the first epoch where ``queries`` draws raised it (models/RESULTS.md).

The epoch kept is the one with the best validation nDCG@10 averaged over the sources, weighed as just said, or
with ``--validate-by sets`` each judged source by its weight alone, whatever its number of validation queries: a
head meant to carry over to collections it never saw is then kept for helping every collection, not for helping the
largest one (leaving ArguAna out, SciFact's 162 validation queries otherwise outweigh the other four sets' 71).

``--members N`` trains N heads that differ only in their seed (``--seed``, +1000, ...: the initialization and the
draws; one split, so the same validation queries), each keeping its own best epoch, and writes them as one head
(:mod:`weir.indexer.weighting.members`: a BM25-shaped head's factor is the geometric mean of theirs); the first member is
exactly the one-member head. The ``deepimpact+bm25`` weight is then chosen for the members together, and the card
records each member's seed, epoch, validation and own weight.

Heads (``--shape``, see :mod:`weir.indexer.weighting.model`): ``bm25`` (default) multiplies a BM25-shaped prior from the
collection being indexed by a learned factor in [1/2, 2]; ``free`` is the published recipe.

- DeepImpact: softmax cross-entropy over (query, positive, BM25 hard negatives); a document's score is the sum of
  its unique terms' weights that the query has.
- DeepCT, ``bm25`` shape: the same ranking loss over BM25 (k1 9, b 0.4) of the pseudo-document ``tf' = 10 tf factor``
  (its length the sum of ``tf'``), differentiable in the factor; ``free`` shape: masked MSE against query term recall
  (the share of the document's relevant training queries that contain the term; titles as pseudo-queries with
  ``--titles``).

Validation scores every document exactly as the index will (sum of impacts of matching terms; BM25 over
``round(100 w)`` for DeepCT), before quantization. For DeepImpact, the weight of ``deepimpact+bm25`` is chosen on the
validation parts (the mean nDCG@10 over sources of each grid point), never on a test split.
"""

from __future__ import annotations

import contextlib
import random
import re
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from weir.indexer.collections import Collection
from weir.indexer.weighting.cache import cached_term_vectors
from weir.indexer.weighting.model import (
    BM25_B,
    BM25_K1,
    DEEPCT_RESOLUTION,
    FEATURES,
    KINDS,
    MAX_LENGTH,
    SHAPES,
    Backbone,
    TermStatistics,
    factor,
    make_head,
    save,
)
from weir.indexer.weighting.terms import counts_query_terms, query_weights, unique_terms
from weir.indexer.weighting.terms import terms as text_terms
from weir.evaluation.measures import evaluate
from weir.training.common import TrainingSet, seeds_of_members
from weir.training.fusion import interpolation_weight
from weir.core.provenance import model_card, sha256_file
from weir.core.trec import read_qrels, read_topics
from weir.core.types import Hit, InputError, Run


DRAWS = ("queries", "sources")  # how a step draws its queries from several sources (the module docstring)
VALIDATE_BY = ("queries", "sets")  # how the validation mean weighs the sources (the module docstring)


@dataclass
class TrainConfig:
    kind: str
    out: str
    collection: str | None = None  # one source given as --collection --queries --qrels
    queries: str | None = None
    qrels: str | None = None
    train: list[str] = field(default_factory=list)  # COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]]
    self_supervised: list[str] = field(default_factory=list)  # COLLECTION[:WEIGHT]
    shape: str = "bm25"
    pseudo_queries: int = 2000  # per self-supervised collection, at most
    max_queries: int = 3000  # judged queries per source at most (a seeded sample; ArguAna's synthetic set has 25,844)
    base_model: str = "all-MiniLM-L6-v2"
    max_length: int = MAX_LENGTH
    titles: bool = False  # DeepCT free shape: titles as pseudo-queries of their documents
    epochs: int = 10
    lr: float = 1e-3
    batch_size: int = 32
    negatives: int = 15
    negative_depth: int = 100
    val_fraction: float = 0.2
    min_rel: int = 1
    seed: int = 13
    bm25_index: str | None = None
    device: str | None = None
    features: list[str] = field(default_factory=list)  # lexical inputs beside the term vector: idf, tf, length
    draws: str = "queries"  # DRAWS: every training query equally likely, or every source (both times their weight)
    validate_by: str = "queries"  # VALIDATE_BY: as drawn, or every judged source by its weight alone
    members: int = 1  # heads that differ only in their seed (init and draws), on one split; one head of their mean
    shrink: bool = False  # the members' mean correction shrunk towards the prior by their disagreement
    command: list[str] = field(default_factory=list)

    def sources(self) -> list[tuple[TrainingSet | None, str, float]]:
        """(training set, or None for a self-supervised source; collection; weight) of every source, judged first."""
        out: list[tuple[TrainingSet | None, str, float]] = []
        if self.collection or self.queries or self.qrels:
            if not (self.collection and self.queries and self.qrels):
                raise InputError("--collection, --queries and --qrels go together (or use --train C:T:Q)")
            out.append((TrainingSet(collection=self.collection, topics=self.queries, qrels=self.qrels),
                        self.collection, 1.0))
        for text in self.train:
            judged = TrainingSet.parse(text).checked(f"weir train {self.kind}", needs=("collection",),
                                                     takes=("weight", "min_rel"))
            out.append((judged, judged.collection, judged.weight))
        for text in self.self_supervised:
            path, _, weight = text.partition(":") if not Path(text).exists() else (text, "", "")
            try:
                out.append((None, path, float(weight) if weight else 1.0))
            except ValueError:
                raise InputError(f"--self-supervised {text!r}: expected COLLECTION[:WEIGHT]") from None
        if not out:
            raise InputError("no training data: give --train COLLECTION:TOPICS:QRELS (repeatable), --collection "
                             "--queries --qrels, or --self-supervised COLLECTION")
        return out


class ScoreMatrix:
    """Doc x term sparse structure of the cached vectors, for scoring every document for a set of queries."""

    def __init__(self, tv):
        import scipy.sparse as sp

        self.vocab: dict[str, int] = {}
        cols = [self.vocab.setdefault(t, len(self.vocab)) for terms in tv.terms for t in terms]
        rows = np.repeat(np.arange(len(tv.terms)), np.diff(tv.offsets))
        self.rows, self.cols = rows, np.asarray(cols, dtype=np.int64)
        self.shape = (len(tv.terms), len(self.vocab))
        self.docids = tv.docids
        self._sp = sp

    def matrix(self, values: np.ndarray):
        return self._sp.csr_matrix((values, (self.rows, self.cols)), shape=self.shape)

    def query_matrix(self, texts: list[str], counts: bool = False):
        """Queries x terms: each term's count in the query, or 1 per unique term (as the index searches them)."""
        qr, qc, qv = [], [], []
        for i, text in enumerate(texts):
            for t, w in query_weights(text, counts).items():
                if t in self.vocab:
                    qr.append(i)
                    qc.append(self.vocab[t])
                    qv.append(w)
        return self._sp.csr_matrix((np.asarray(qv, dtype=np.float64), (qr, qc)), shape=(len(texts), self.shape[1]))

    def run(self, doc_term, qids: list[str], texts: list[str], k: int = 1000, name: str = "score",
            counts: bool = False) -> Run:
        scores = (doc_term @ self.query_matrix(texts, counts).T).T.toarray()
        out = Run()
        for i, qid in enumerate(qids):
            s = scores[i]
            top = np.argpartition(-s, min(k, len(s) - 1))[:k]
            top = top[s[top] > 0]
            out[qid] = [Hit(self.docids[j], float(s[j]), 0, {name: float(s[j])}) for j in top]
        return out.ranked()


def deepct_doc_term(sm: ScoreMatrix, weights: np.ndarray, k1: float = 10.0, b: float = 0.9):
    """BM25 (Lucene's formula) of every (document, term) of DeepCT pseudo-documents with tf = round(100 w)."""
    tf = np.maximum(np.rint(weights * 100), 0)
    dl = np.bincount(sm.rows, weights=tf, minlength=sm.shape[0])
    avgdl = dl.mean() if dl.mean() > 0 else 1.0
    df = np.bincount(sm.cols, weights=(tf >= 1).astype(float), minlength=sm.shape[1])
    idf = np.log(1 + (sm.shape[0] - df + 0.5) / (df + 0.5))
    norm = k1 * (1 - b + b * dl[sm.rows] / avgdl)
    values = np.where(tf >= 1, idf[sm.cols] * tf / (tf + norm), 0.0)
    return sm.matrix(values)


@dataclass
class Item:
    """A training query: its text, its positive documents, and for a pseudo-query the positive's terms, frequencies
    and length once the query's own words are taken out of it."""

    qid: str
    text: str
    positives: set[str]
    rest: tuple[list[str], np.ndarray, int] | None = None


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def pseudo_items(docs, n: int, seed: int) -> list[Item]:
    """Pseudo-queries of a collection: title -> the passage without it; a held-out sentence (of four words or more,
    in a passage of two sentences or more) -> the rest of the passage. At most ``n``, seeded."""
    rng = random.Random(seed)
    out = []
    for d in docs:
        if d.title.strip() and d.text.strip():
            out.append((d.title, d, d.text))
        sentences = [s for s in _SENTENCE.split(d.text) if s.strip()]
        long = [i for i, s in enumerate(sentences) if len(s.split()) >= 4]
        if len(sentences) >= 2 and long:
            j = rng.choice(long)
            rest = " ".join(s for i, s in enumerate(sentences) if i != j)
            out.append((sentences[j], d, f"{d.title} {rest}" if d.title else rest))
    rng.shuffle(out)
    items = []
    for k, (query, d, rest) in enumerate(out[:n]):
        counts = Counter(text_terms(rest))
        if not counts or not unique_terms(query):
            continue
        kept = list(counts)
        items.append(Item(f"pseudo:{k}", query, {d.id}, (kept, np.array([counts[t] for t in kept], float),
                                                         sum(counts.values()))))
    return items


@contextlib.contextmanager
def bm25_searcher(collection: Collection, index: str | None, log):
    """weir's BM25 over the collection (hard negatives, the BM25 half of ``deepimpact+bm25``): ``index`` (an index
    directory or its bm25 component), else one built aside and removed after."""
    from weir.indexer.lucene import build_bm25
    from weir.ranker.retrievers.lucene import LuceneBM25Searcher

    with tempfile.TemporaryDirectory(prefix="weir-train-bm25-") as tmp:
        path = Path(index) if index else Path(tmp) / "bm25"
        if not index:
            log(f"{collection.name}: building a BM25 index of the collection")
            build_bm25(collection.corpus(skip_empty=True), path)
        elif (path / "manifest.json").is_file():
            path = path / "bm25"
        searcher = LuceneBM25Searcher(path)
        try:
            yield searcher
        finally:
            searcher.close()


class WeightingData:
    """One source of a head's training, read: a training set (``judged``) or a self-supervised collection; its
    documents, cached term vectors, statistics, the head's inputs and priors by row, training items with their BM25
    negatives, and the validation queries with the BM25 run ``deepimpact+bm25`` fuses."""

    def __init__(self, judged: TrainingSet | None, collection: str, weight: float, config: TrainConfig,
                 backbone: Backbone, log, bm25_index: str | None = None):
        self.judged, self.weight = judged, weight
        self.coll = Collection.open(collection)
        self.name = self.coll.name + ("" if judged else " (self-supervised)")
        self.docs = list(self.coll.corpus(skip_empty=True))  # an empty document has no term to weigh
        self.tv = tv = cached_term_vectors(backbone, self.docs, log=log)
        self.stats = TermStatistics(d.contents for d in self.docs)
        self.sm = ScoreMatrix(tv)
        rng = random.Random(config.seed)
        if judged is not None:
            min_rel = judged.min_rel if judged.min_rel is not None else config.min_rel
            topics = {q.id: q.text for q in read_topics(judged.topics)}
            self.qrels = {q: {d: r for d, r in rels.items() if r >= min_rel and d in tv.index}
                          for q, rels in read_qrels(judged.qrels).items() if q in topics}
            qids = sorted(q for q in topics if self.qrels.get(q))
            rng.shuffle(qids)
            items = [Item(q, topics[q], set(self.qrels[q])) for q in qids[:config.max_queries]]
        else:
            items = pseudo_items(self.docs, config.pseudo_queries, config.seed)
            self.qrels = {i.qid: {d: 1 for d in i.positives} for i in items}
        if len(items) < 2:
            raise InputError(f"{self.name}: fewer than 2 training queries with a relevant document")
        n_val = max(1, int(round(len(items) * config.val_fraction))) if config.val_fraction > 0 else 0
        self.val, self.items = items[:n_val], items[n_val:]
        if config.titles and judged is not None:
            self.items += [Item(f"title:{d.id}", d.title, {d.id}) for d in self.docs if d.title.strip()]
        self.term_rows = [dict(zip(terms, range(len(terms)))) for terms in tv.terms]
        self.inputs = self._inputs(config)
        self.prior = self._prior(config) if config.shape == "bm25" else None
        with bm25_searcher(self.coll, bm25_index, log) as bm25:
            found = bm25.search_many([i.text for i in self.items], config.negative_depth + 10)
            self.negatives = [[d for d, _ in hits if d not in item.positives] for item, hits in zip(self.items, found)]
            hits = bm25.search_many([i.text for i in self.val], 100)
        self.bm25_val = Run({i.qid: [Hit(d, s, r, {"bm25": s}) for r, (d, s) in enumerate(h, 1)]
                             for i, h in zip(self.val, hits)}).ranked()
        log(f"{self.name}: {len(self.items)} training and {len(self.val)} validation queries, weight {weight}")

    def share(self, draws: str, validation: bool = False) -> float:
        """How much this source counts among the sources, in drawing training queries or (``validation``) in the mean
        of validation figures: its weight, times its number of those queries with ``draws`` ``queries``."""
        return self.weight * (len(self.val if validation else self.items) if draws == "queries" else 1)

    def prepare_deepct(self) -> None:
        """What the DeepCT ranking loss needs: each row's document frequency, and the mean pseudo-document length at
        factor 1 (10 x the mean length in terms)."""
        self._df_rows = np.array([self.stats.df.get(t, 0) for terms in self.tv.terms for t in terms], dtype=np.float32)
        self.avgdl_pseudo = DEEPCT_RESOLUTION * self.stats.avgdl

    def df_of_rows(self, rows: np.ndarray) -> np.ndarray:
        return self._df_rows[rows]

    def _inputs(self, config: TrainConfig) -> np.ndarray | None:
        if not config.features:
            return None
        return np.concatenate([self.stats.features(config.features, i, t) for i, t in enumerate(self.tv.terms)])

    def _prior(self, config: TrainConfig) -> np.ndarray:
        return np.concatenate([self.stats.prior(config.kind, i, t) for i, t in enumerate(self.tv.terms)]) \
            .astype(np.float32)

    def x(self, rows: np.ndarray):
        """The head's inputs of cached rows (the vector, and lexical features when asked)."""
        import torch

        x = np.asarray(self.tv.data[rows], dtype=np.float32)
        if self.inputs is not None:
            x = np.concatenate([x, self.inputs[rows]], axis=1)
        return torch.from_numpy(x)

    def weights(self, head, shape: str) -> np.ndarray:
        """Every row's weight under ``head``, as the index will have it (before quantization)."""
        import torch

        with torch.inference_mode():
            out = np.concatenate([head(self.x(np.arange(i, min(i + 65536, len(self.tv.data))))).squeeze(-1).numpy()
                                  for i in range(0, len(self.tv.data), 65536)]).astype(np.float64)
        return self.prior * factor(out) if shape == "bm25" else out

    def validate(self, kind: str, weights: np.ndarray, search: dict, shape: str) -> tuple[dict, Run]:
        """nDCG@10 and R@100 of the validation queries, every document scored as the index will score it (the query
        weighted as its retriever weighs it)."""
        doc_term = self.sm.matrix(weights) if kind == "deepimpact" else deepct_doc_term(self.sm, weights, **search)
        run = self.sm.run(doc_term, [i.qid for i in self.val], [i.text for i in self.val], name=kind,
                          counts=counts_query_terms(kind, shape))
        return evaluate(run, {i.qid: self.qrels[i.qid] for i in self.val}, ["nDCG@10", "R@100"]), run

    def group(self, item: Item, negatives: list[str], kind: str, query_terms: dict[str, int], rng) -> list[tuple]:
        """(rows, prior or None) of the positive and the negatives of a step: the rows of the query's terms
        (DeepImpact) or of all the document's terms with a mask of the query's (DeepCT, for its length)."""
        positive = rng.choice(sorted(item.positives))
        out = [self._rows(positive, kind, query_terms, item.rest)]
        for d in negatives:
            out.append(self._rows(d, kind, query_terms, None))
        return out

    def _rows(self, doc: str, kind: str, query_terms: dict[str, int], rest) -> tuple:
        i = self.tv.index[doc]
        rows_of = self.term_rows[i]
        base = self.tv.offsets[i]
        if rest is None:
            terms = self.tv.terms[i] if kind == "deepct" else [t for t in query_terms if t in rows_of]
            rows = np.array([base + rows_of[t] for t in terms], dtype=np.int64)
            prior = self.prior[rows] if self.prior is not None else None
        else:  # the positive of a pseudo-query: the rest of the passage, its own frequencies and length
            kept, tf, length = rest
            tf_of = dict(zip(kept, tf))
            terms = [t for t in (kept if kind == "deepct" else query_terms) if t in rows_of and t in tf_of]
            rows = np.array([base + rows_of[t] for t in terms], dtype=np.int64)
            counts = np.array([tf_of[t] for t in terms], dtype=np.float64)
            if self.prior is None:
                prior = None
            elif kind == "deepimpact":
                prior = self.stats.bm25(i, terms, tf=counts, length=length).astype(np.float32)
            else:
                prior = (counts * DEEPCT_RESOLUTION / 100.0).astype(np.float32)
        if prior is not None and kind == "deepimpact":  # the query's count of each term weighs it, as searched
            prior = prior * np.array([query_terms[t] for t in terms], dtype=np.float32)
        mask = np.array([query_terms.get(t, 0) for t in terms], dtype=np.float32)  # DeepCT: the count, 0 off query
        return rows, prior, mask


class Training:
    """The head, its optimizer, the sources, and the best epoch so far (by mean validation nDCG@10)."""

    def __init__(self, config: TrainConfig, sources: list[WeightingData], dim: int, log, seed: int | None = None,
                 head=None):
        """A new head to train, or ``head`` (already trained: to validate, no optimizer)."""
        import torch

        self.config, self.sources, self.log = config, sources, log
        self.head = head if head is not None else make_head(config.kind, dim + len(config.features), config.shape)
        self.opt = None if head is not None else torch.optim.AdamW(self.head.parameters(), lr=config.lr)
        self.rng_seed = config.seed if seed is None else seed
        self.rng = random.Random(self.rng_seed)
        self.history: list[dict] = []
        self.best, self.best_state = -1.0, None
        self.shrinkage: dict | None = None  # a head of members shrunk towards its prior (--shrink): how, for the card
        self.search = ({"k1": DEEPCT_RESOLUTION * BM25_K1, "b": BM25_B} if config.shape == "bm25" else
                       {"k1": 10.0, "b": 0.9}) if config.kind == "deepct" else {}

    def epoch_order(self) -> list[tuple[int, int]]:
        """(source, item) pairs of an epoch: as many draws as items over all sources, each draw's source chosen with
        probability proportional to its share (seeded), each source's items taken in a shuffled cycle."""
        total = sum(len(s.items) for s in self.sources)
        drawn = self.rng.choices(range(len(self.sources)), weights=[s.share(self.config.draws)
                                                                    for s in self.sources], k=total)
        cycles = []
        for s in self.sources:
            cycle = list(range(len(s.items)))
            self.rng.shuffle(cycle)
            cycles.append(cycle)
        taken = [0] * len(self.sources)
        order = []
        for si in drawn:
            order.append((si, cycles[si][taken[si] % len(cycles[si])]))
            taken[si] += 1
        return order

    def validation_weights(self) -> list[float]:
        """How much each source's validation nDCG@10 counts in the mean that chooses the epoch and the fusion weight:
        its share (:meth:`WeightingData.share`). With ``queries`` draws, a self-supervised source's counts only when no source
        is judged: its pseudo-queries are too easy to choose by (they validate at about 0.98 from the untrained head
        on), and they would outweigh the judged queries. ``sources`` draws keep the earlier recipe (each source by its
        weight). ``validate_by="sets"``: every judged source by its weight alone (self-supervised ones as above)."""
        judged = any(s.judged is not None for s in self.sources)
        if self.config.validate_by == "sets":
            return [0.0 if judged and s.judged is None else s.weight for s in self.sources]
        judged = judged and self.config.draws == "queries"
        return [0.0 if judged and s.judged is None else s.share(self.config.draws, validation=True)
                for s in self.sources]

    def kept(self) -> dict:
        """The history entry of the epoch kept: the best validation mean, the earliest of equals."""
        return max(self.history, key=lambda h: h["nDCG@10"])

    def validate(self) -> tuple[dict, float]:
        """The head's validation measures per source, and their mean as :meth:`validation_weights` weighs them."""
        self.head.eval()
        per_source = {s.name: s.validate(self.config.kind, s.weights(self.head, self.config.shape), self.search,
                                         self.config.shape)[0]
                      for s in self.sources}
        return per_source, float(np.average([m["nDCG@10"] for m in per_source.values()],
                                            weights=self.validation_weights()))

    def end_epoch(self, epoch: int, loss: float | None, digits: int) -> None:
        per_source, mean = self.validate()
        self.history.append({"epoch": epoch, "loss": loss, "nDCG@10": mean, "sources": per_source})
        shown = "- (untrained)" if loss is None else f"{loss:.{digits}f}"
        self.log(f"epoch {epoch}: loss {shown}, validation nDCG@10 {mean:.4f} ("
                 + ", ".join(f"{n} {m['nDCG@10']:.4f}" for n, m in per_source.items()) + ")")
        if mean > self.best:
            self.best, self.best_state = mean, {k: v.clone() for k, v in self.head.state_dict().items()}


def _scores(t: Training, s: WeightingData, groups: list[list[tuple]]):
    """The score of every document of every group (rows x weights summed per document; DeepCT: BM25 of the
    pseudo-document), shape (groups, group size)."""
    import torch

    config = t.config
    rows = np.concatenate([r for g in groups for r, _, _ in g])
    outputs = t.head(s.x(rows)).squeeze(-1) if len(rows) else torch.zeros(0)
    if config.shape == "bm25":
        prior = torch.from_numpy(np.concatenate([p for g in groups for _, p, _ in g]).astype(np.float32))
        weights = prior * factor(outputs)
    else:
        weights = outputs
    sizes = [len(r) for g in groups for r, _, _ in g]
    seg = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes, dtype=torch.long))
    if config.kind == "deepimpact":
        scores = torch.zeros(len(sizes)).index_add(0, seg, weights)
    else:  # BM25 of the pseudo-document tf' = 100 w (DeepCT writes round(100 w)): its length is its tf' summed
        tf = weights * 100
        k1, b = t.search["k1"], t.search["b"]
        dl = torch.zeros(len(sizes)).index_add(0, seg, tf)
        avgdl = float(s.avgdl_pseudo)
        mask = torch.from_numpy(np.concatenate([m for g in groups for _, _, m in g]))
        df = torch.from_numpy(np.concatenate([s.df_of_rows(r) for g in groups for r, _, _ in g]))
        idf = torch.log(1 + (len(s.docs) - df + 0.5) / (df + 0.5))
        term = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl[seg] / avgdl))
        scores = torch.zeros(len(sizes)).index_add(0, seg, term * mask)  # each query term as often as it occurs
    return scores.view(len(groups), -1)


def _train_ranking(t: Training) -> None:
    """Softmax cross-entropy over (query, positive, BM25 hard negatives), for DeepImpact and BM25-shaped DeepCT.

    The epoch kept is the best by validation nDCG@10 (mean over sources); with the BM25 shape, epoch 0, the untrained
    head (factor 1: exactly its BM25 baseline), is a candidate too, so a head that never beats its baseline on the
    validation queries ships as that baseline."""
    import torch

    config = t.config
    size = 1 + config.negatives
    counts = counts_query_terms(config.kind, config.shape)  # else weight 1 per unique term
    query_terms = [[query_weights(i.text, counts) for i in s.items] for s in t.sources]
    if config.kind == "deepct":
        for s in t.sources:
            s.prepare_deepct()
    if config.shape == "bm25":  # epoch 0, the untrained head, is its BM25 baseline: a candidate that wins ties
        t.head.eval()
        t.end_epoch(0, None, 4)
    for epoch in range(1, config.epochs + 1):
        t.head.train()
        order = t.epoch_order()
        bar = tqdm(range(0, len(order), config.batch_size), desc=f"{config.kind} epoch {epoch}", unit="batch",
                   dynamic_ncols=True, mininterval=1.0)
        total, steps = 0.0, 0
        for start in bar:
            by_source: dict[int, list] = defaultdict(list)
            for si, j in order[start:start + config.batch_size]:
                s, item = t.sources[si], t.sources[si].items[j]
                negs = s.negatives[j]
                if not negs:
                    continue
                pick = t.rng.sample(negs, min(config.negatives, len(negs)))
                pick += [pick[-1]] * (size - 1 - len(pick))
                by_source[si].append(s.group(item, pick, config.kind, query_terms[si][j], t.rng))
            if not by_source:
                continue
            losses = []
            for si, groups in by_source.items():
                scores = _scores(t, t.sources[si], groups)
                losses.append(torch.nn.functional.cross_entropy(scores, torch.zeros(len(groups), dtype=torch.long),
                                                                reduction="sum"))
            loss = torch.stack(losses).sum() / sum(len(g) for g in by_source.values())
            t.opt.zero_grad()
            loss.backward()
            t.opt.step()
            total, steps = total + loss.item(), steps + 1
            bar.set_postfix(loss=f"{total / steps:.4f}")
        bar.close()
        t.end_epoch(epoch, total / max(1, steps), 4)


def _train_deepct_recall(t: Training) -> None:
    """The published DeepCT: masked MSE of each document term's weight against its query term recall, the share of
    the document's relevant training queries that contain the term."""
    import torch

    config = t.config
    examples = []  # (source, rows, targets)
    for s in t.sources:
        relevant: dict[str, list[str]] = defaultdict(list)
        for item in s.items:
            for d in item.positives:
                relevant[d].append(item.text)
        for d in sorted(relevant, key=lambda x: s.tv.index[x]):
            i = s.tv.index[d]
            qs = [set(unique_terms(text)) for text in relevant[d]]
            targets = np.array([sum(term in q for q in qs) / len(qs) for term in s.tv.terms[i]], dtype=np.float32)
            examples.append((s, np.arange(s.tv.offsets[i], s.tv.offsets[i + 1]), targets))
    for epoch in range(1, config.epochs + 1):
        t.head.train()
        order = list(range(len(examples)))
        t.rng.shuffle(order)
        bar = tqdm(range(0, len(order), config.batch_size), desc=f"deepct epoch {epoch}", unit="batch",
                   dynamic_ncols=True, mininterval=1.0)
        total, steps = 0.0, 0
        for start in bar:
            pick = [examples[j] for j in order[start:start + config.batch_size]]
            pred = torch.cat([t.head(s.x(rows)).squeeze(-1) for s, rows, _ in pick])
            y = torch.from_numpy(np.concatenate([y for _, _, y in pick]))
            loss = torch.nn.functional.mse_loss(pred, y)
            t.opt.zero_grad()
            loss.backward()
            t.opt.step()
            total, steps = total + loss.item(), steps + 1
            bar.set_postfix(loss=f"{total / steps:.5f}")
        bar.close()
        t.end_epoch(epoch, total / max(1, steps), 5)


HEADS = {("deepct", "free"): "Linear(dim, 1) on the first word piece of each term's first word",
         ("deepimpact", "free"): "Linear(dim, dim) -> ReLU -> Linear(dim, 1) -> ReLU on the first word piece of each "
                                 "unique term's first word",
         ("deepct", "bm25"): "tf' = round(10 tf exp(ln 2 tanh(o))), o = Linear(dim, dim) -> ReLU -> Linear(dim, 1) "
                             "(last layer starts at 0); searched with BM25 k1 9, b 0.4",
         ("deepimpact", "bm25"): "impact = BM25(tf, idf, length of the collection indexed; k1 0.9, b 0.4) x "
                                 "exp(ln 2 tanh(o)), o = Linear(dim, dim) -> ReLU -> Linear(dim, 1) (last layer "
                                 "starts at 0)"}


def _fusion(t: Training) -> dict:
    """The ``deepimpact+bm25`` interpolation weight best on the validation parts, each source weighed by its share."""
    grids = []
    for s in t.sources:
        _, run = s.validate("deepimpact", s.weights(t.head, t.config.shape), t.search, t.config.shape)
        qids = [i.qid for i in s.val]
        grids.append(interpolation_weight(run, s.bm25_val, s.qrels, qids, ["deepimpact", "bm25"])["grid"])
    weights = np.array(t.validation_weights(), dtype=float)
    grid = {w: float(np.average([g[w] for g in grids], weights=weights)) for w in grids[0]}
    value, w = max(((v, float(g)) for g, v in grid.items()), key=lambda x: (x[0], -abs(x[1] - 0.5), x[1]))
    return {"method": "minmax", "weights": [w, round(1 - w, 2)], "stages": ["deepimpact", "bm25"],
            "validation_nDCG@10": value, "grid": {g: round(v, 4) for g, v in grid.items()},
            "tuned_on": "validation parts of the training sources (mean nDCG@10, sources weighed by "
                        f"{t.config.draws if t.config.validate_by == 'queries' else 'their weight alone'})"}


def train(config: TrainConfig, log=print) -> dict:
    """Train the head; write its directory (head.pt, card.json); return the model card."""
    import torch

    if config.kind not in KINDS:
        raise InputError(f"unknown model kind {config.kind!r}; known: {', '.join(KINDS)}")
    if config.shape not in SHAPES:
        raise InputError(f"unknown head shape {config.shape!r}; known: {', '.join(SHAPES)}")
    if config.draws not in DRAWS:
        raise InputError(f"unknown draws {config.draws!r}; known: {', '.join(DRAWS)}")
    if config.validate_by not in VALIDATE_BY:
        raise InputError(f"unknown --validate-by {config.validate_by!r}; known: {', '.join(VALIDATE_BY)}")
    unknown = [f for f in config.features if f not in FEATURES]
    if unknown:
        raise InputError(f"unknown term feature(s) {', '.join(unknown)}; known: {', '.join(FEATURES)}")
    specs = config.sources()
    seeds = seeds_of_members(config.seed, config.members)  # refuses --members below 1 before anything is read
    if config.shrink and (config.members < 2 or config.shape != "bm25"):
        raise InputError("--shrink needs --members 2 or more and --shape bm25 (it shrinks the members' mean "
                         "correction towards the BM25 prior)")
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    backbone = Backbone(config.base_model, device=config.device, max_length=config.max_length)
    sources = [WeightingData(judged, coll, weight, config, backbone, log,
                      config.bm25_index if len(specs) == 1 else None) for judged, coll, weight in specs]
    read = time.perf_counter()
    members = []
    for m, seed in enumerate(seeds):
        if m:  # the first member is exactly the one-member head; the others differ in their init and draws
            log(f"member {m + 1} of {config.members} (seed {seed})")
            torch.manual_seed(seed)
        t = Training(config, sources, backbone.dim, log, seed)
        if config.kind == "deepct" and config.shape == "free":
            _train_deepct_recall(t)
        else:
            _train_ranking(t)
        t.head.load_state_dict(t.best_state)
        t.head.eval()
        members.append(t)
    t = members[0] if len(members) == 1 else _members(config, members, backbone.dim, log)
    card = _card(config, sources, t, backbone, read - start, time.perf_counter() - read)
    if config.kind == "deepimpact":
        card["fusion"] = _fusion(t)
        log(f"deepimpact+bm25 on validation: weights {card['fusion']['weights']} nDCG@10 "
            f"{card['fusion']['validation_nDCG@10']:.4f}")
    if len(members) > 1:
        card["members"] = len(members)
        card["member_heads"] = [_member_card(config, mt) for mt in members]
        if t.shrinkage is not None:
            card["shrink"] = t.shrinkage
    save(config.out, t.head, card)
    return card


def _members(config: TrainConfig, members: list[Training], dim: int, log) -> Training:
    """The members as one head (:mod:`weir.indexer.weighting.members`), validated as one: its history is that single
    validation, at the members' own epochs."""
    head = make_head(config.kind, dim + len(config.features), config.shape, len(members))
    for slot, member in zip(head.members, members, strict=True):
        slot.load_state_dict(member.head.state_dict())
    shrinkage = None
    if config.shrink:
        from weir.indexer.weighting.members import shrinkage_prior

        rng = np.random.default_rng(config.seed)
        shrinkage = shrinkage_prior(np.concatenate([_member_logs(head, s, rng) for s in members[0].sources], axis=1))
        shrinkage["estimated_on"] = (f"the members' log-factors of at most {SHRINK_ROWS:,} term rows (a seeded "
                                     "sample) of each training collection")
        head.shrink = shrinkage["tau2"]
        log(f"shrinkage towards the prior: tau2 {shrinkage['tau2']:.5f} over {shrinkage['rows']:,} term rows, "
            f"mean coefficient {shrinkage['mean_coefficient']:.3f}")
    t = Training(config, members[0].sources, dim, log, head=head)
    t.shrinkage = shrinkage
    per_source, mean = t.validate()
    epochs = [mt.kept()["epoch"] for mt in members]
    t.history = [{"epoch": epochs, "loss": None, "nDCG@10": mean, "sources": per_source}]
    log(f"{len(members)} members (epochs {epochs}): validation nDCG@10 {mean:.4f} ("
        + ", ".join(f"{n} {v['nDCG@10']:.4f}" for n, v in per_source.items()) + ")")
    return t


SHRINK_ROWS = 100_000  # term rows per training collection that estimate the shrinkage prior (tau2)


def _member_logs(head, s: WeightingData, rng) -> np.ndarray:
    """(members, rows) the members' log-factors of a seeded sample of ``s``'s term rows."""
    import torch

    n = len(s.tv.data)
    rows = np.sort(rng.choice(n, SHRINK_ROWS, replace=False)) if n > SHRINK_ROWS else np.arange(n)
    with torch.inference_mode():
        return np.concatenate([head.log_factors(s.x(rows[i:i + 65536])).numpy()
                               for i in range(0, len(rows), 65536)], axis=1)


def _member_card(config: TrainConfig, t: Training) -> dict:
    """One member's record in its head's card: its seed, epoch and validation, and for DeepImpact the
    ``deepimpact+bm25`` weight it alone would have (as a one-member head's card has it)."""
    out = {"seed": t.rng_seed, "validation": dict(t.kept()), "history": t.history}
    if config.kind == "deepimpact":
        out["fusion"] = _fusion(t)
    return out


def _card(config: TrainConfig, sources: list[WeightingData], t: Training, backbone: Backbone, read_seconds: float,
          train_seconds: float) -> dict:
    data = []
    for s in sources:
        entry = {"collection": s.coll.name, "path": str(s.coll.root), "corpus_sha256": sha256_file(s.coll.corpus_path),
                 "weight": s.weight, "training_queries": len(s.items), "validation_queries": len(s.val),
                 "documents": len(s.docs)}
        if s.judged is not None:
            entry.update({"queries": s.judged.topics, "queries_sha256": sha256_file(s.judged.topics),
                          "qrels": s.judged.qrels, "qrels_sha256": sha256_file(s.judged.qrels),
                          "min_rel": s.judged.min_rel or config.min_rel})
        else:
            entry["self_supervised"] = "pseudo-queries from the collection: titles, held-out sentences"
        data.append(entry)
    card = model_card(
        config.kind, base_model=config.base_model, command=config.command, dists=("torch", "transformers"),
        training_data=data, parameters={k: v for k, v in asdict(config).items() if k != "command"},
        **{k: v for k, v in backbone.describe().items() if k in ("base_model_sha256", "max_length")},
        shape=config.shape, head=HEADS[(config.kind, config.shape)],
        trained="head only (backbone frozen, its term vectors cached)", features=list(config.features),
        collections=[s.coll.name for s in sources],
        tokenization="weir.indexer.weighting.terms (words [^\\W_]+, Anserini English analyzer: lowercase, stopwords, "
                     "Porter), shared by documents and queries")
    card["metrics"] = {"validation": dict(t.kept()), "history": t.history}
    card["timing"] = {"encode_seconds": round(read_seconds, 1), "train_seconds": round(train_seconds, 1)}
    return card
