"""`weir train deepct|deepimpact`: train a head (:mod:`indexer.weighting.model`) on a frozen backbone's cached term
vectors.

The backbone runs once over the collection (:mod:`indexer.weighting.cache`); training then only touches the head,
which takes minutes on a CPU. Training queries are split (fixed seed) into a training part and a validation part;
the epoch with the best validation nDCG@10 is kept, and for DeepImpact the weight of ``deepimpact+bm25`` is chosen on
the validation part (never on a test split).

- DeepCT: target of a document term = query term recall, the share of the document's relevant training queries
  that contain the term (titles as pseudo-queries add one query per document); masked MSE over the document's terms.
- DeepImpact: softmax cross-entropy over (query, positive, hard negatives), negatives sampled from BM25's top
  ``negative_depth`` (weir's BM25 over an index of the same collection) minus the judged documents; a document's
  score is the sum of the impacts of its unique terms the query has.

Validation scores every document exactly as the index will (sum of impacts of matching terms; BM25 k1=10, b=0.9
over tf = round(100 w) for DeepCT), with numpy/scipy, before quantization.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from indexer.collections import Collection
from indexer.weighting.cache import cached_term_vectors
from indexer.weighting.model import FEATURES, KINDS, MAX_LENGTH, Backbone, TermStatistics, make_head, save
from indexer.weighting.terms import unique_terms
from ranker.evaluation.measures import evaluate
from ranker.training.fusion import interpolation_weight
from weir.provenance import model_card, sha256_file
from weir.trec import read_qrels, read_topics
from weir.types import Hit, InputError, Run


@dataclass
class TrainConfig:
    kind: str
    collection: str
    queries: str
    qrels: str
    out: str
    base_model: str = "all-MiniLM-L6-v2"
    max_length: int = MAX_LENGTH
    titles: bool = False  # titles as pseudo-queries (each document's title -> the document)
    epochs: int = 10
    lr: float = 1e-3
    batch_size: int = 32
    negatives: int = 15
    negative_depth: int = 100
    val_fraction: float = 0.2
    seed: int = 13
    bm25_index: str | None = None
    device: str | None = None
    features: list[str] = field(default_factory=list)  # lexical inputs beside the term vector: idf, tf, length
    command: list[str] = field(default_factory=list)


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

    def query_matrix(self, texts: list[str]):
        qr, qc = [], []
        for i, text in enumerate(texts):
            for t in unique_terms(text):
                if t in self.vocab:
                    qr.append(i)
                    qc.append(self.vocab[t])
        return self._sp.csr_matrix((np.ones(len(qr)), (qr, qc)), shape=(len(texts), self.shape[1]))

    def run(self, doc_term, qids: list[str], texts: list[str], k: int = 1000, name: str = "score") -> Run:
        scores = (doc_term @ self.query_matrix(texts).T).T.toarray()
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


class TrainingData:
    """The collection, its cached term vectors, the training queries split (seeded) into a training part and a
    validation part, and the scoring structure validation uses."""

    def __init__(self, config: TrainConfig, log):
        self.coll = Collection.open(config.collection)
        self.docs = list(self.coll.corpus())
        self.backbone = Backbone(config.base_model, device=config.device, max_length=config.max_length)
        self.tv = tv = cached_term_vectors(self.backbone, self.docs, log=log)
        self.topics = {q.id: q.text for q in read_topics(config.queries)}
        self.qrels = {qid: {d: r for d, r in rels.items() if r > 0 and d in tv.index}
                      for qid, rels in read_qrels(config.qrels).items() if qid in self.topics}
        qids = sorted(q for q in self.topics if self.qrels.get(q))
        rng = random.Random(config.seed)
        rng.shuffle(qids)
        n_val = int(round(len(qids) * config.val_fraction))
        self.val, self.train = sorted(qids[:n_val]), sorted(qids[n_val:])
        # (query id, text, positive docids) of the training part, plus titles as pseudo-queries when asked
        self.items = [(q, self.topics[q], set(self.qrels[q])) for q in self.train]
        if config.titles:
            self.items += [(f"title:{d.id}", d.title, {d.id}) for d in self.docs if d.title.strip()]
        self.sm = ScoreMatrix(tv)

    def validate(self, kind: str, outputs: np.ndarray) -> tuple[dict, Run]:
        """nDCG@10 and R@100 of the validation queries when every document is scored with the head's ``outputs``
        exactly as the index will score it (before quantization); and that run."""
        sm = self.sm
        doc_term = sm.matrix(outputs) if kind == "deepimpact" else deepct_doc_term(sm, outputs)
        run = sm.run(doc_term, self.val, [self.topics[q] for q in self.val], name=kind)
        return evaluate(run, {q: self.qrels[q] for q in self.val}, ["nDCG@10", "R@100"]), run


@contextlib.contextmanager
def bm25_searcher(config: TrainConfig, coll: Collection, log):
    """weir's BM25 over the collection (hard negatives, the BM25 half of ``deepimpact+bm25``): the index
    ``config.bm25_index`` (an index directory or its bm25 component), else one built aside and removed after."""
    from indexer.lucene import build_bm25
    from ranker.retrievers.lucene import LuceneBM25Searcher

    with tempfile.TemporaryDirectory(prefix="weir-train-bm25-") as tmp:
        path = Path(config.bm25_index) if config.bm25_index else Path(tmp) / "bm25"
        if not config.bm25_index:
            log("building a BM25 index of the collection")
            build_bm25(coll.corpus(), path)
        elif (path / "manifest.json").is_file():
            path = path / "bm25"
        searcher = LuceneBM25Searcher(path)
        try:
            yield searcher
        finally:
            searcher.close()


class Inputs:
    """Head inputs by row of the cached term vectors: the vector, plus lexical feature columns when asked."""

    def __init__(self, tv, docs, features):
        self.tv = tv
        self.feats = None
        if features:
            stats = TermStatistics(d.contents for d in docs)
            self.feats = np.concatenate([stats.features(features, i, t) for i, t in enumerate(tv.terms)])

    def __call__(self, rows):
        import torch

        x = np.asarray(self.tv.data[rows], dtype=np.float32)
        if self.feats is not None:
            x = np.concatenate([x, self.feats[rows]], axis=1)
        return torch.from_numpy(x)

    def all_outputs(self, head) -> np.ndarray:
        import torch

        with torch.inference_mode():
            return np.concatenate([head(self(np.arange(i, min(i + 65536, len(self.tv.data))))).squeeze(-1).numpy()
                                   for i in range(0, len(self.tv.data), 65536)])


class HeadTraining:
    """The head, its optimizer and the best epoch so far (by validation nDCG@10)."""

    def __init__(self, config: TrainConfig, data: TrainingData, inputs: Inputs, log):
        import torch

        self.config, self.data, self.inputs, self.log = config, data, inputs, log
        self.head = make_head(config.kind, data.backbone.dim + len(config.features))
        self.opt = torch.optim.AdamW(self.head.parameters(), lr=config.lr)
        self.rng = random.Random(config.seed)
        self.history: list[dict] = []
        self.best, self.best_state = -1.0, None

    def step(self, loss) -> float:
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()

    def end_epoch(self, epoch: int, total: float, steps: int, digits: int) -> None:
        """Validate, log, and keep the head's state when it is the best so far."""
        self.head.eval()
        metrics, _ = self.data.validate(self.config.kind, self.inputs.all_outputs(self.head))
        loss = total / max(1, steps)
        self.history.append({"epoch": epoch, "loss": loss, **metrics})
        self.log(f"epoch {epoch}: loss {loss:.{digits}f}, validation nDCG@10 {metrics['nDCG@10']:.4f} "
                 f"R@100 {metrics['R@100']:.4f}")
        if metrics["nDCG@10"] > self.best:
            self.best, self.best_state = metrics["nDCG@10"], {k: v.clone() for k, v in self.head.state_dict().items()}

    def batches(self, n: int, desc: str):
        """A shuffled order of ``n`` examples and a progress bar over its batches."""
        self.head.train()
        order = list(range(n))
        self.rng.shuffle(order)
        bar = tqdm(range(0, len(order), self.config.batch_size), desc=desc, unit="batch", dynamic_ncols=True,
                   mininterval=1.0)
        return order, bar


def _train_deepimpact(t: HeadTraining, bm25) -> None:
    """Softmax cross-entropy over (query, positive, BM25 hard negatives); a document's score is the sum of the
    impacts of its unique terms the query has."""
    import torch

    config, data, tv = t.config, t.data, t.data.tv
    items = data.items
    results = bm25.search_many([text for _, text, _ in items], config.negative_depth + 10)
    negatives = {qid: [d for d, _ in hits if d not in pos] for (qid, _, pos), hits in zip(items, results)}
    term_rows = [dict(zip(terms, range(len(terms)))) for terms in tv.terms]
    qterms = {qid: unique_terms(text) for qid, text, _ in items}
    group_size = 1 + config.negatives

    def rows(qid, doc):
        i = tv.index[doc]
        r = term_rows[i]
        return [tv.offsets[i] + r[term] for term in qterms[qid] if term in r]

    for epoch in range(1, config.epochs + 1):
        order, bar = t.batches(len(items), f"deepimpact epoch {epoch}")
        total, steps = 0.0, 0
        for s in bar:
            all_rows, seg, groups = [], [], 0
            for j in order[s:s + config.batch_size]:
                qid, _, pos = items[j]
                negs = negatives.get(qid, [])
                if not negs:
                    continue
                group = [t.rng.choice(sorted(pos))] + t.rng.sample(negs, min(config.negatives, len(negs)))
                group += [group[-1]] * (group_size - len(group))
                for g, doc in enumerate(group):
                    r = rows(qid, doc)
                    all_rows += r
                    seg += [groups * group_size + g] * len(r)
                groups += 1
            if not groups:
                continue
            impacts = t.head(t.inputs(np.asarray(all_rows, dtype=np.int64))).squeeze(-1)
            scores = torch.zeros(groups * group_size).index_add(0, torch.tensor(seg), impacts)
            loss = torch.nn.functional.cross_entropy(scores.view(groups, -1), torch.zeros(groups, dtype=torch.long))
            total, steps = total + t.step(loss), steps + 1
            bar.set_postfix(loss=f"{total / steps:.4f}")
        bar.close()
        t.end_epoch(epoch, total, steps, 4)


def _train_deepct(t: HeadTraining) -> None:
    """Masked MSE of each document term's weight against its query term recall: the share of the document's
    relevant training queries that contain the term."""
    import torch

    config, tv = t.config, t.data.tv
    relevant: dict[str, list[str]] = defaultdict(list)
    for _, text, pos in t.data.items:
        for d in pos:
            relevant[d].append(text)
    doc_idx = sorted(tv.index[d] for d in relevant)
    rows_list, targets = [], []
    for i in doc_idx:
        qs = [set(unique_terms(text)) for text in relevant[tv.docids[i]]]
        rows_list.append(np.arange(tv.offsets[i], tv.offsets[i + 1]))
        targets.append(np.array([sum(term in q for q in qs) / len(qs) for term in tv.terms[i]], dtype=np.float32))
    for epoch in range(1, config.epochs + 1):
        order, bar = t.batches(len(doc_idx), f"deepct epoch {epoch}")
        total, steps = 0.0, 0
        for s in bar:
            pick = order[s:s + config.batch_size]
            r = np.concatenate([rows_list[j] for j in pick])
            y = torch.from_numpy(np.concatenate([targets[j] for j in pick]))
            pred = t.head(t.inputs(r)).squeeze(-1)
            total, steps = total + t.step(torch.nn.functional.mse_loss(pred, y)), steps + 1  # masked: real terms only
            bar.set_postfix(loss=f"{total / steps:.5f}")
        bar.close()
        t.end_epoch(epoch, total, steps, 5)


HEADS = {"deepct": "Linear(dim, 1) on the first word piece of each term's first word",
         "deepimpact": "Linear(dim, dim) -> ReLU -> Linear(dim, 1) -> ReLU on the first word piece of each unique "
                       "term's first word"}


def train(config: TrainConfig, log=print) -> dict:
    """Train the head; write its directory (head.pt, card.json); return the model card."""
    import torch

    if config.kind not in KINDS:
        raise InputError(f"unknown model kind {config.kind!r}; known: {', '.join(KINDS)}")
    unknown = [f for f in config.features if f not in FEATURES]
    if unknown:
        raise InputError(f"unknown term feature(s) {', '.join(unknown)}; known: {', '.join(FEATURES)}")
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    data = TrainingData(config, log)
    encoded = time.perf_counter()
    t = HeadTraining(config, data, Inputs(data.tv, data.docs, config.features), log)
    if config.kind == "deepct":
        _train_deepct(t)
        card = _card(config, data, t, encoded - start, time.perf_counter() - encoded)
    else:
        with bm25_searcher(config, data.coll, log) as bm25:
            _train_deepimpact(t, bm25)
            card = _card(config, data, t, encoded - start, time.perf_counter() - encoded)
            _, di_run = data.validate("deepimpact", t.inputs.all_outputs(t.head))
            hits = bm25.search_many([data.topics[q] for q in data.val], 100)
        bm25_run = Run({q: [Hit(d, sc, r, {"bm25": sc}) for r, (d, sc) in enumerate(h, 1)]
                        for q, h in zip(data.val, hits)}).ranked()
        card["fusion"] = interpolation_weight(di_run, bm25_run, data.qrels, data.val, ["deepimpact", "bm25"])
        log(f"deepimpact+bm25 on validation: weights {card['fusion']['weights']} nDCG@10 "
            f"{card['fusion']['validation_nDCG@10']:.4f}")
    save(config.out, t.head, card)
    return card


def _card(config: TrainConfig, data: TrainingData, t: HeadTraining, encode_seconds: float,
          train_seconds: float) -> dict:
    """The model card of the head ``t`` trained, set to its best epoch."""
    t.head.load_state_dict(t.best_state)
    t.head.eval()
    coll = data.coll
    card = model_card(
        config.kind, base_model=config.base_model, command=config.command, dists=("torch", "transformers"),
        training_data={"collection": coll.name, "corpus_sha256": sha256_file(str(coll.corpus_path)),
                       "queries": config.queries, "queries_sha256": sha256_file(config.queries),
                       "qrels": config.qrels, "qrels_sha256": sha256_file(config.qrels),
                       "training_queries": len(data.train), "validation_queries": len(data.val),
                       "titles_as_pseudo_queries": len([i for i in data.items if i[0].startswith("title:")]),
                       "documents": len(data.docs)},
        parameters={k: v for k, v in asdict(config).items() if k != "command"},
        **{k: v for k, v in data.backbone.describe().items() if k in ("base_model_sha256", "max_length")},
        head=HEADS[config.kind], trained="head only (backbone frozen, its term vectors cached)",
        features=list(config.features),
        tokenization="indexer.weighting.terms (words [^\\W_]+, Anserini English analyzer: lowercase, stopwords, "
                     "Porter), shared by documents and queries")
    best_epoch = max(t.history, key=lambda h: h["nDCG@10"])
    card["metrics"] = {"validation": dict(best_epoch), "history": t.history}
    card["timing"] = {"encode_seconds": round(encode_seconds, 1), "train_seconds": round(train_seconds, 1)}
    return card
