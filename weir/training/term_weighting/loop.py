"""The training loop: the head, its optimizer and the best epoch so far by validation (:class:`Training`), the
``deepimpact+bm25`` weight chosen on the validation parts, a step's scores of (query, positive, negatives) groups,
and the epochs of both losses: softmax cross-entropy over BM25 hard negatives (DeepImpact, BM25-shaped DeepCT) and
the published DeepCT's masked MSE against query term recall."""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np
from tqdm import tqdm

from weir.core import bm25
from weir.indexer.weighting.model import BM25_B, BM25_K1, DEEPCT_RESOLUTION, factor, make_head
from weir.indexer.weighting.terms import counts_query_terms, query_weights, unique_terms
from weir.training.fusion import interpolation_weight
from weir.training.term_weighting.config import TrainConfig
from weir.training.term_weighting.data import WeightingData


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
        its share (:meth:`WeightingData.share`). With ``queries`` draws, a self-supervised source's counts only when
        no source is judged: its pseudo-queries are too easy to choose by (they validate at about 0.98 from the
        untrained head on), and they would outweigh the judged queries. ``sources`` draws keep the earlier recipe (each source by its
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

    def step(self, loss) -> float:
        """One optimizer step down ``loss``; its value."""
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()

    def end_epoch(self, epoch: int, loss: float | None, digits: int) -> None:
        per_source, mean = self.validate()
        self.history.append({"epoch": epoch, "loss": loss, "nDCG@10": mean, "sources": per_source})
        shown = "- (untrained)" if loss is None else f"{loss:.{digits}f}"
        self.log(f"epoch {epoch}: loss {shown}, validation nDCG@10 {mean:.4f} ("
                 + ", ".join(f"{n} {m['nDCG@10']:.4f}" for n, m in per_source.items()) + ")")
        if mean > self.best:
            self.best, self.best_state = mean, {k: v.clone() for k, v in self.head.state_dict().items()}


def fusion_weight(t: Training) -> dict:
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
        idf = bm25.idf(len(s.docs), df, log=torch.log)
        term = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl[seg] / avgdl))
        scores = torch.zeros(len(sizes)).index_add(0, seg, term * mask)  # each query term as often as it occurs
    return scores.view(len(groups), -1)


def train_ranking(t: Training) -> None:
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
            total, steps = total + t.step(loss), steps + 1
            bar.set_postfix(loss=f"{total / steps:.4f}")
        bar.close()
        t.end_epoch(epoch, total / max(1, steps), 4)


def train_deepct_recall(t: Training) -> None:
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
            total, steps = total + t.step(loss), steps + 1
            bar.set_postfix(loss=f"{total / steps:.5f}")
        bar.close()
        t.end_epoch(epoch, total / max(1, steps), 5)
