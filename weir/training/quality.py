"""`weir train quality`: fit a passage-quality estimator (:mod:`weir.indexer.quality`) on training judgments, the query
never shown to the model (the QualT5 recipe of Chang et al., SIGIR 2024).

Training data are one or more sources (``--train COLLECTION:TOPICS:QRELS[:WEIGHT]``). Per source, the judged
queries are split (seeded) into a training part and a validation part. Labels are per document: a document relevant
to a training query is positive; negatives are drawn (seeded) from BM25's top ``negative_depth`` for the training
queries, leaving out every document the qrels judge relevant to any query, ``negatives`` per positive of the query.
A source's examples are weighted so that the source weighs ``WEIGHT`` in the loss, whatever its size. The inputs are
standardized by the mean and spread of all the sources together (``standardize = "sources"``), or each corpus by its
own (``"collection"``: the model then reads a passage against the collection it is in, at training and at scoring).

The model is chosen on what pruning needs: for every source, the whole corpus is scored, the ``prune_at`` fraction
with the lowest scores is cut, and the share of the *validation* queries' relevant documents that survive is measured
(random pruning keeps ``1 - prune_at`` of them in expectation). The epoch (learned) or number of boosting rounds
(surface) with the best mean survival over sources is kept, and the card records survival at 10-50% per source.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from weir.indexer.collections import Collection
from weir.indexer.quality.base import STANDARDIZE, standardized_within
from weir.indexer.quality.learned import HIDDEN, LAYERS, MAX_LENGTH, PassageReader, head_inputs, make_head
from weir.indexer.quality.learned import save as save_learned
from weir.indexer.quality.prune import pruned_count
from weir.indexer.quality.surface import FEATURES, feature_matrix
from weir.training.common import TrainingSet
from weir.core.provenance import model_card, sha256_file, write_card
from weir.core.trec import read_qrels, read_topics
from weir.core.types import Document, InputError

ESTIMATORS = ("learned", "surface")
SET_FIELDS = ("collection", "topics", "qrels", "weight", "min_rel")  # of a training set: read, and on the card
FRACTIONS = (0.1, 0.25, 0.4, 0.5)


@dataclass(kw_only=True)
class QualityTrainConfig:
    train: list[TrainingSet | str]  # sets, or their COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]]
    out: str
    estimator: str = "learned"  # learned | surface
    base_model: str = "all-MiniLM-L6-v2"
    layers: int = LAYERS
    max_length: int = MAX_LENGTH
    hidden: int = HIDDEN
    negatives: int = 1
    negative_depth: int = 20
    judged_negatives: bool = False  # also draw negatives from the query's judged non-relevant documents
    balance: bool = False  # within each source, its positives and its negatives weigh half of its share each
    standardize: str = "sources"  # the inputs standardized by: sources (all of them together) | collection (each its own)
    min_rel: int = 1
    val_fraction: float = 0.2
    prune_at: float = 0.25
    epochs: int = 40
    lr: float = 1e-3
    weight_decay: float = 1e-4
    rounds: int = 500
    seed: int = 13
    device: str | None = None
    command: list[str] = field(default_factory=list)


@dataclass
class QualityExamples:
    """One training set, read for a quality estimator: its documents, their inputs, the labelled rows (relevant
    documents of the training queries, BM25 negatives) and the validation queries' relevant documents."""

    spec: TrainingSet
    docs: list[Document]
    train_queries: list[str]
    val_relevant: list[set[str]]  # per validation query, its relevant documents (those in the corpus)
    rows: np.ndarray  # document indexes of the labelled examples
    labels: np.ndarray
    surface: np.ndarray = field(repr=False, default=None)
    pooled: np.ndarray | None = field(repr=False, default=None)

    @property
    def record(self) -> dict:
        s = self.spec
        return {**s.record(SET_FIELDS), "topics_sha256": sha256_file(s.topics), "qrels_sha256": sha256_file(s.qrels),
                "documents": len(self.docs), "training_queries": len(self.train_queries),
                "validation_queries": len(self.val_relevant), "positives": int(self.labels.sum()),
                "negatives": int((1 - self.labels).sum())}

    def survival(self, scores: np.ndarray, fraction: float) -> float:
        """Share of the validation queries' relevant documents kept when ``fraction`` of the corpus is pruned."""
        n = pruned_count(fraction, len(scores))
        order = np.lexsort((np.arange(len(scores)), scores))
        pruned = {self.docs[i].id for i in order[:n]}
        kept = [len(rel - pruned) / len(rel) for rel in self.val_relevant if rel]
        return float(np.mean(kept)) if kept else float("nan")


def _bm25_negatives(spec: TrainingSet, queries: dict[str, str], depth: int, log) -> dict[str, list[str]]:
    """BM25's top ``depth`` of each query, over a BM25 index of the source's collection built for the purpose."""
    from weir.indexer.build import build_index
    from weir.indexer.index_dir import Index
    from weir.ranker.retrievers.bm25 import BM25
    from weir.core.types import Query

    with tempfile.TemporaryDirectory(prefix="weir-quality-") as tmp:
        log(f"{spec.collection}: a BM25 index for negatives")
        build_index(spec.collection, Path(tmp) / "bm25", components=("bm25",), skip_empty=True)
        run = BM25(Index(Path(tmp) / "bm25")).retrieve([Query(q, t) for q, t in queries.items()], depth)
        return {q: [h.doc_id for h in hits] for q, hits in run.items()}


def read_examples(spec: TrainingSet, config: QualityTrainConfig, log) -> QualityExamples:
    min_rel = spec.min_rel if spec.min_rel is not None else config.min_rel
    docs = list(Collection.open(spec.collection).corpus(skip_empty=True))  # an empty document is never relevant
    known = {d.id for d in docs}
    topics = {q.id: q.text for q in read_topics(spec.topics)}
    qrels = read_qrels(spec.qrels)
    relevant = {q: {d for d, r in rels.items() if r >= min_rel and d in known}
                for q, rels in qrels.items() if q in topics}
    judged_relevant = {d for rels in qrels.values() for d, r in rels.items() if r >= min_rel}
    qids = sorted(q for q, rel in relevant.items() if rel)
    if len(qids) < 2:
        raise InputError(f"{spec.qrels}: fewer than 2 queries of {spec.topics} have a relevant document in "
                         f"{spec.collection}; a quality model needs judged training queries")
    rng = random.Random(config.seed)
    rng.shuffle(qids)
    n_val = max(1, int(round(len(qids) * config.val_fraction))) if config.val_fraction > 0 else 0
    val, train = sorted(qids[:n_val]), sorted(qids[n_val:])
    ranked = _bm25_negatives(spec, {q: topics[q] for q in train}, config.negative_depth, log)
    index_of = {d.id: i for i, d in enumerate(docs)}
    positives = sorted({d for q in train for d in relevant[q]})
    negatives: set[str] = set()
    for q in train:
        judged = sorted(d for d, r in qrels[q].items() if r < min_rel and d in known) \
            if config.judged_negatives else []
        pool = [d for d in dict.fromkeys(ranked.get(q, []) + judged) if d not in judged_relevant]
        rng.shuffle(pool)
        negatives.update(pool[:config.negatives * len(relevant[q])])
    rows = np.array([index_of[d] for d in positives] + [index_of[d] for d in sorted(negatives)], dtype=np.int64)
    labels = np.array([1.0] * len(positives) + [0.0] * len(negatives))
    log(f"{spec.collection}: {len(train)} training queries ({len(positives)} positive, {len(negatives)} negative "
        f"documents), {len(val)} validation queries")
    return QualityExamples(spec, docs, train, [relevant[q] for q in val], rows, labels)


def _survival_table(sources: list[QualityExamples], scores: list[np.ndarray]) -> dict:
    return {s.spec.collection: {f"{f:.2f}": round(s.survival(sc, f), 4) for f in FRACTIONS}
            for s, sc in zip(sources, scores)}


def _mean_survival(sources: list[QualityExamples], scores: list[np.ndarray], fraction: float) -> float:
    return float(np.mean([s.survival(sc, fraction) for s, sc in zip(sources, scores)]))


def _example_weights(sources: list[QualityExamples], balance: bool) -> np.ndarray:
    """Each source weighs its ``weight`` in the loss, spread evenly over its examples; with ``balance``, half of it
    over its positives and half over its negatives, so that no source's share of positives (a property of how it
    was judged, not of its passages) can be learnt from what tells the sources apart (their length, their words)."""
    if not balance:
        return np.concatenate([np.full(len(s.rows), s.spec.weight / len(s.rows)) for s in sources]) * len(sources)
    parts = []
    for s in sources:
        positives = s.labels.sum()
        negatives = len(s.labels) - positives
        parts.append(np.where(s.labels > 0, 0.5 / positives, 0.5 / negatives) * s.spec.weight)
    return np.concatenate(parts) * len(sources)


def _train_learned(config: QualityTrainConfig, sources: list[QualityExamples], log) -> tuple[dict, dict]:
    import torch

    reader = PassageReader(config.base_model, layers=config.layers, max_length=config.max_length,
                           device=config.device)
    start = time.perf_counter()
    for s in sources:
        s.pooled = reader.read([d.contents for d in s.docs], progress=True)
    read_seconds = time.perf_counter() - start
    all_surface = np.concatenate([s.surface for s in sources])
    mean, std = all_surface.mean(axis=0), all_surface.std(axis=0) + 1e-6
    within = config.standardize == "collection"
    inputs = [head_inputs(s.pooled, s.surface, mean, std, within=within) for s in sources]
    X = torch.from_numpy(np.concatenate([x[s.rows] for x, s in zip(inputs, sources)]))
    y = torch.from_numpy(np.concatenate([s.labels for s in sources]).astype(np.float32))
    w = torch.from_numpy(_example_weights(sources, config.balance).astype(np.float32))
    torch.manual_seed(config.seed)
    head = make_head(X.shape[1], config.hidden)
    opt = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)
    best, best_state, curve = -1.0, None, []
    for epoch in range(1, config.epochs + 1):
        head.train()
        for batch in torch.randperm(len(X), generator=generator).split(256):
            loss = (torch.nn.functional.binary_cross_entropy_with_logits(head(X[batch]).squeeze(-1), y[batch],
                                                                         reduction="none") * w[batch]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        head.eval()
        with torch.inference_mode():
            scores = [head(torch.from_numpy(x)).squeeze(-1).double().numpy() for x in inputs]
        value = _mean_survival(sources, scores, config.prune_at)
        curve.append(round(value, 4))
        if value > best:
            best, best_epoch = value, epoch
            best_state = {k: v.clone() for k, v in head.state_dict().items()}
    head.load_state_dict(best_state)
    head.eval()
    with torch.inference_mode():
        scores = [head(torch.from_numpy(x)).squeeze(-1).double().numpy() for x in inputs]
    fit = {"epoch": best_epoch, "survival_curve": curve, "reader_seconds": round(read_seconds, 1),
           "reader_passages_per_second": round(sum(len(s.docs) for s in sources) / read_seconds, 1),
           "validation_survival": _survival_table(sources, scores)}
    return fit, {"head": head, "mean": mean, "std": std, "reader": reader.describe()}


def _train_surface(config: QualityTrainConfig, sources: list[QualityExamples], log) -> tuple[dict, dict]:
    import lightgbm as lgb

    if config.standardize == "collection":  # what the model reads at scoring time (gbdt.SurfaceModelQuality.margins)
        for s in sources:
            s.surface = standardized_within(s.surface)
    X = np.concatenate([s.surface[s.rows] for s in sources])
    y = np.concatenate([s.labels for s in sources])
    params = {"objective": "binary", "learning_rate": 0.05, "num_leaves": 15, "min_data_in_leaf": 20,
              "feature_fraction": 0.9, "lambda_l2": 1.0, "verbose": -1, "num_threads": 1, "seed": config.seed,
              "deterministic": True}
    weights = _example_weights(sources, config.balance)
    booster = lgb.train(params, lgb.Dataset(X, y, weight=weights, feature_name=list(FEATURES)),
                        num_boost_round=config.rounds)
    curve, best, best_rounds = [], -1.0, 1
    for rounds in range(10, config.rounds + 1, 10):
        scores = [booster.predict(s.surface, raw_score=True, num_iteration=rounds) for s in sources]
        value = _mean_survival(sources, scores, config.prune_at)
        curve.append(round(value, 4))
        if value > best:
            best, best_rounds = value, rounds
    booster = lgb.train(params, lgb.Dataset(X, y, weight=weights, feature_name=list(FEATURES)),
                        num_boost_round=best_rounds)
    scores = [booster.predict(s.surface, raw_score=True) for s in sources]
    gain = booster.feature_importance("gain")
    importance = dict(zip(FEATURES, (gain / max(gain.sum(), 1e-12)).round(3).tolist()))  # share of the total gain
    fit = {"rounds": best_rounds, "survival_curve_every_10_rounds": curve, "feature_gain": importance,
           "validation_survival": _survival_table(sources, scores)}
    return fit, {"booster": booster}


def train(config: QualityTrainConfig, log: Callable[[str], None] = print) -> dict:
    if config.estimator not in ESTIMATORS:
        raise InputError(f"unknown trainable quality estimator {config.estimator!r}; known: {', '.join(ESTIMATORS)}")
    if not config.train:
        raise InputError("no training data: give --train COLLECTION:TOPICS:QRELS[:WEIGHT] (repeatable)")
    if config.standardize not in STANDARDIZE:
        raise InputError(f"standardize={config.standardize!r}: expected one of {', '.join(STANDARDIZE)}")
    if not 0 < config.prune_at < 1:
        raise InputError(f"--prune-at must be between 0 and 1 (got {config.prune_at})")
    start = time.perf_counter()
    sources = [read_examples(TrainingSet.of(text).checked("weir train quality", needs=("collection",),
                                                            takes=SET_FIELDS), config, log)
               for text in config.train]
    for s in sources:
        if config.balance and len(set(s.labels.tolist())) < 2:
            missing = "negative" if s.labels.min() > 0 else "positive"
            raise InputError(f"{s.spec.collection} ({s.spec.qrels}): no {missing} training documents, so --set "
                             "balance=true cannot weigh both halves (synthetic queries judge every passage relevant: "
                             "leave the set out, or train without balance)")
        s.surface = feature_matrix(s.docs, progress=True)
    fit, model = (_train_learned if config.estimator == "learned" else _train_surface)(config, sources, log)
    parameters = {k: v for k, v in asdict(config).items() if k not in ("train", "out", "command", "device")}
    card = model_card("quality", training_data=[s.record for s in sources], parameters=parameters,
                      command=config.command, dists=("torch", "transformers", "lightgbm"),
                      estimator=config.estimator, features=list(FEATURES))
    card["metrics"] = {**fit, "random_expectation": {f"{f:.2f}": round(1 - f, 4) for f in FRACTIONS},
                       "train_seconds": round(time.perf_counter() - start, 1)}
    out = Path(config.out)
    if config.estimator == "learned":
        card["reader"] = model["reader"]
        save_learned(out, model["head"], model["mean"], model["std"], card)
    else:
        from weir.indexer.quality.gbdt import CARD, MODEL

        out.mkdir(parents=True, exist_ok=True)
        model["booster"].save_model(str(out / MODEL))
        write_card(out, {**card, "model_sha256": sha256_file(out / MODEL)}, CARD)
    for collection, table in fit["validation_survival"].items():
        log(f"{collection}: validation queries' relevant documents kept at pruned fraction "
            + ", ".join(f"{f}: {v:.3f} (random {1 - float(f):.2f})" for f, v in table.items()))
    return card


def fit(estimator: str, *, collection: str, topics: str, qrels: str, out: str, options: dict | None = None,
        device: str | None = None, command: Sequence[str] = (), log: Callable[[str], None] = print) -> dict:
    """Train ``estimator`` on the judgments ``topics`` / ``qrels`` over ``collection`` alone, with ``options`` (fields
    of :class:`QualityTrainConfig`), into the model directory ``out``; its card. What the pruning sweep's
    cross-fitting trains for each fold (:class:`weir.evaluation.pruning.TrainEstimator`)."""
    return train(QualityTrainConfig(estimator=estimator, train=[f"{collection}:{topics}:{qrels}"], out=out,
                                    device=device, command=list(command), **(options or {})), log=log)
