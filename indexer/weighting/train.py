"""`weir train deepct|deepimpact`: train a head on a frozen backbone's cached term vectors.

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

import datetime as _dt
import random
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from indexer.weighting.model import FEATURES, KINDS, MAX_LENGTH, Backbone, CorpusStats, make_head, save
from indexer.weighting.terms import unique_terms
from weir.checksums import sha256_file
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


def _load(config: TrainConfig, log):
    from indexer.collections import Collection, read_qrels, read_topics
    from indexer.weighting.cache import cached_term_vectors

    coll = Collection.open(config.collection)
    docs = list(coll.corpus())
    backbone = Backbone(config.base_model, device=config.device, max_length=config.max_length)
    tv = cached_term_vectors(backbone, docs, log=log)
    topics = {q.id: q.text for q in read_topics(config.queries)}
    qrels = {qid: {d: r for d, r in rels.items() if r > 0 and d in tv.index}
             for qid, rels in read_qrels(config.qrels).items() if qid in topics}
    qids = sorted(q for q in topics if qrels.get(q))
    rng = random.Random(config.seed)
    rng.shuffle(qids)
    n_val = int(round(len(qids) * config.val_fraction))
    val, train = sorted(qids[:n_val]), sorted(qids[n_val:])
    return coll, docs, backbone, tv, topics, qrels, train, val


def _train_queries(config, docs, topics, qrels, train):
    """(query id, text, positive docids) of the training part, plus titles as pseudo-queries when asked."""
    out = [(q, topics[q], set(qrels[q])) for q in train]
    if config.titles:
        out += [(f"title:{d.id}", d.title, {d.id}) for d in docs if d.title.strip()]
    return out


def _bm25_negatives(config, coll, items, log) -> dict[str, list[str]]:
    from indexer.lucene import build_bm25
    from ranker.lucene_search import LuceneBM25Searcher

    path = config.bm25_index
    tmp = None
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="weir-train-bm25-")
        path = Path(tmp.name) / "bm25"
        log("building a BM25 index of the collection for hard negatives")
        build_bm25(coll.corpus(), path)
    elif (Path(path) / "manifest.json").is_file():
        path = Path(path) / "bm25"
    searcher = LuceneBM25Searcher(path)
    try:
        results = searcher.search_many([text for _, text, _ in items], config.negative_depth + 10)
    finally:
        searcher.close()
        if tmp:
            tmp.cleanup()
    return {qid: [d for d, _ in hits if d not in pos] for (qid, _, pos), hits in zip(items, results)}


class Inputs:
    """Head inputs by row of the cached term vectors: the vector, plus lexical feature columns when asked."""

    def __init__(self, tv, docs, features):
        self.tv = tv
        self.feats = None
        if features:
            stats = CorpusStats(d.contents for d in docs)
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


def _validate_impacts(head, inputs, sm, topics, qrels, val):
    from ranker.evaluate import evaluate

    impacts = inputs.all_outputs(head)
    run = sm.run(sm.matrix(impacts), val, [topics[q] for q in val], name="deepimpact")
    vq = {q: qrels[q] for q in val}
    return evaluate(run, vq, ["nDCG@10", "R@100"]), run


def _validate_deepct(head, inputs, sm, topics, qrels, val):
    from ranker.evaluate import evaluate

    w = inputs.all_outputs(head)
    run = sm.run(deepct_doc_term(sm, w), val, [topics[q] for q in val], name="deepct")
    return evaluate(run, {q: qrels[q] for q in val}, ["nDCG@10", "R@100"])


def _tune_fusion(di_run: Run, bm25_run: Run, qrels, val) -> dict:
    from ranker.evaluate import evaluate
    from ranker.fusion import fuse_runs

    grid = []
    for i in range(21):
        w = round(i / 20, 2)
        fused = fuse_runs([di_run, bm25_run], method="minmax", weights=[w, round(1 - w, 2)], depth=100)
        grid.append((evaluate(fused, {q: qrels[q] for q in val}, ["nDCG@10"])["nDCG@10"], -abs(w - 0.5), w))
    best = max(grid)
    return {"method": "minmax", "weights": [best[2], round(1 - best[2], 2)], "stages": ["deepimpact", "bm25"],
            "validation_nDCG@10": best[0], "grid": {str(w): round(v, 4) for v, _, w in grid},
            "tuned_on": "validation part of the training queries"}


def train(config: TrainConfig, log=print) -> dict:
    import torch

    if config.kind not in KINDS:
        raise InputError(f"unknown model kind {config.kind!r}; known: {', '.join(KINDS)}")
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    coll, docs, backbone, tv, topics, qrels, train_q, val = _load(config, log)
    encoded = time.perf_counter()
    items = _train_queries(config, docs, topics, qrels, train_q)
    sm = ScoreMatrix(tv)
    unknown = [f for f in config.features if f not in FEATURES]
    if unknown:
        raise InputError(f"unknown term feature(s) {', '.join(unknown)}; known: {', '.join(FEATURES)}")
    inputs = Inputs(tv, docs, config.features)
    head = make_head(config.kind, backbone.dim + len(config.features))
    opt = torch.optim.AdamW(head.parameters(), lr=config.lr)
    rng = random.Random(config.seed)
    history, best, best_state = [], -1.0, None
    if config.kind == "deepimpact":
        negatives = _bm25_negatives(config, coll, items, log)
        term_rows = [dict(zip(terms, range(len(terms)))) for terms in tv.terms]
        qterms = {qid: unique_terms(text) for qid, text, _ in items}

        def rows(qid, doc):
            i = tv.index[doc]
            r = term_rows[i]
            return [tv.offsets[i] + r[t] for t in qterms[qid] if t in r]

        for epoch in range(1, config.epochs + 1):
            head.train()
            order = list(range(len(items)))
            rng.shuffle(order)
            total, steps = 0.0, 0
            bar = tqdm(range(0, len(order), config.batch_size), desc=f"deepimpact epoch {epoch}", unit="batch",
                       dynamic_ncols=True, mininterval=1.0)
            for s in bar:
                all_rows, seg = [], []
                groups = 0
                for j in order[s:s + config.batch_size]:
                    qid, _, pos = items[j]
                    negs = negatives.get(qid, [])
                    if not negs:
                        continue
                    group = [rng.choice(sorted(pos))] + rng.sample(negs, min(config.negatives, len(negs)))
                    group += [group[-1]] * (1 + config.negatives - len(group))
                    for g, doc in enumerate(group):
                        r = rows(qid, doc)
                        all_rows += r
                        seg += [groups * (1 + config.negatives) + g] * len(r)
                    groups += 1
                if not groups:
                    continue
                impacts = head(inputs(np.asarray(all_rows, dtype=np.int64))).squeeze(-1)
                scores = torch.zeros(groups * (1 + config.negatives)).index_add(0, torch.tensor(seg), impacts)
                loss = torch.nn.functional.cross_entropy(scores.view(groups, -1),
                                                         torch.zeros(groups, dtype=torch.long))
                opt.zero_grad()
                loss.backward()
                opt.step()
                total, steps = total + loss.item(), steps + 1
                bar.set_postfix(loss=f"{total / steps:.4f}")
            bar.close()
            head.eval()
            metrics, _ = _validate_impacts(head, inputs, sm, topics, qrels, val)
            history.append({"epoch": epoch, "loss": total / max(1, steps), **metrics})
            log(f"epoch {epoch}: loss {total / max(1, steps):.4f}, validation nDCG@10 {metrics['nDCG@10']:.4f} "
                f"R@100 {metrics['R@100']:.4f}")
            if metrics["nDCG@10"] > best:
                best, best_state = metrics["nDCG@10"], {k: v.clone() for k, v in head.state_dict().items()}
    else:
        # query term recall targets per (document, term)
        relevant: dict[str, list[str]] = defaultdict(list)
        for _, text, pos in items:
            for d in pos:
                relevant[d].append(text)
        doc_idx = sorted(tv.index[d] for d in relevant)
        rows_list, targets = [], []
        for i in doc_idx:
            qs = [set(unique_terms(t)) for t in relevant[tv.docids[i]]]
            rows_list.append(np.arange(tv.offsets[i], tv.offsets[i + 1]))
            targets.append(np.array([sum(t in q for q in qs) / len(qs) for t in tv.terms[i]], dtype=np.float32))
        for epoch in range(1, config.epochs + 1):
            head.train()
            order = list(range(len(doc_idx)))
            rng.shuffle(order)
            total, steps = 0.0, 0
            bar = tqdm(range(0, len(order), config.batch_size), desc=f"deepct epoch {epoch}", unit="batch",
                       dynamic_ncols=True, mininterval=1.0)
            for s in bar:
                pick = order[s:s + config.batch_size]
                r = np.concatenate([rows_list[j] for j in pick])
                y = torch.from_numpy(np.concatenate([targets[j] for j in pick]))
                pred = head(inputs(r)).squeeze(-1)
                loss = torch.nn.functional.mse_loss(pred, y)  # masked: only real terms of real documents
                opt.zero_grad()
                loss.backward()
                opt.step()
                total, steps = total + loss.item(), steps + 1
                bar.set_postfix(loss=f"{total / steps:.5f}")
            bar.close()
            head.eval()
            metrics = _validate_deepct(head, inputs, sm, topics, qrels, val)
            history.append({"epoch": epoch, "loss": total / max(1, steps), **metrics})
            log(f"epoch {epoch}: loss {total / max(1, steps):.5f}, validation nDCG@10 {metrics['nDCG@10']:.4f} "
                f"R@100 {metrics['R@100']:.4f}")
            if metrics["nDCG@10"] > best:
                best, best_state = metrics["nDCG@10"], {k: v.clone() for k, v in head.state_dict().items()}
    head.load_state_dict(best_state)
    head.eval()
    best_epoch = max(history, key=lambda h: h["nDCG@10"])
    card = {
        "kind": config.kind, "base_model": config.base_model, **{k: v for k, v in backbone.describe().items()
                                                                 if k in ("base_model_sha256", "max_length")},
        "head": {"deepct": "Linear(dim, 1) on the first word piece of each term's first word",
                 "deepimpact": "Linear(dim, dim) -> ReLU -> Linear(dim, 1) -> ReLU on the first word piece of each "
                               "unique term's first word"}[config.kind],
        "trained": "head only (backbone frozen, its term vectors cached)",
        "features": list(config.features),
        "tokenization": "indexer.weighting.terms (words [^\\W_]+, Anserini English analyzer: lowercase, stopwords, "
                        "Porter), shared by documents and queries",
        "data": {"collection": coll.name, "corpus_sha256": sha256_file(str(coll.corpus_path)), "queries": config.queries,
                 "queries_sha256": sha256_file(config.queries), "qrels": config.qrels, "qrels_sha256": sha256_file(config.qrels),
                 "training_queries": len(train_q), "validation_queries": len(val),
                 "titles_as_pseudo_queries": len([i for i in items if i[0].startswith("title:")]),
                 "documents": len(docs)},
        "command": config.command, "parameters": {k: v for k, v in asdict(config).items() if k != "command"},
        "metrics": {"validation": {k: v for k, v in best_epoch.items()}, "history": history},
        "timing": {"encode_seconds": round(encoded - start, 1),
                   "train_seconds": round(time.perf_counter() - encoded, 1)},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if config.kind == "deepimpact":
        _, di_run = _validate_impacts(head, inputs, sm, topics, qrels, val)
        from ranker.lucene_search import LuceneBM25Searcher  # noqa: F401  (the JVM is up already)

        bm25_run = _bm25_val_run(config, coll, topics, val)
        card["fusion"] = _tune_fusion(di_run, bm25_run, qrels, val)
        log(f"deepimpact+bm25 on validation: weights {card['fusion']['weights']} nDCG@10 "
            f"{card['fusion']['validation_nDCG@10']:.4f}")
    save(config.out, head, card)
    return card


def _bm25_val_run(config, coll, topics, val) -> Run:
    items = [(q, topics[q], set()) for q in val]
    from indexer.lucene import build_bm25
    from ranker.lucene_search import LuceneBM25Searcher

    with tempfile.TemporaryDirectory(prefix="weir-train-bm25-") as tmp:
        path = Path(config.bm25_index) if config.bm25_index else Path(tmp) / "bm25"
        if config.bm25_index and (path / "manifest.json").is_file():
            path = path / "bm25"
        if not config.bm25_index:
            build_bm25(coll.corpus(), path)
        s = LuceneBM25Searcher(path)
        try:
            hits = s.search_many([t for _, t, _ in items], 100)
        finally:
            s.close()
    return Run({q: [Hit(d, sc, r, {"bm25": sc}) for r, (d, sc) in enumerate(h, 1)]
                for (q, _, _), h in zip(items, hits)}).ranked()
