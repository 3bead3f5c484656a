"""`weir train attention` and `weir train crossencoder`: fine-tune the top layers of the backbone on (query, passage)
pairs with a listwise loss (softmax cross-entropy of one relevant passage against sampled less relevant ones).
This module holds the joint form; `--interaction late` (the default of `weir train attention`) is
:mod:`ranker.train_late_attention`.

- attention: the score is the learned combination of calibrated query->passage attention masses of the heads in the
  trained layers (:mod:`ranker.rerankers.attention`), optionally with an entropy penalty on the query tokens'
  attention over the passage (ReAttn). After training, heads are selected QRHead-style: every head of every layer is
  scored alone on training queries (nDCG@10), the best ``select`` are kept and their combination weights refit on
  the training queries.
- crossencoder (the honest baseline): the same backbone and training, scored by a linear head on [CLS].

Candidates come from a TREC run (top ``depth``) with labels from the qrels; ``folds`` writes a cross-validated run
(each fold scored by a model trained on the other folds only), then the saved model trains on every query.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from weir.types import InputError, Query, Run

NA_QUERY = "N/A"  # the content-free calibration query (ranker.rerankers.attention.NA_QUERY)


@dataclass
class AttnTrainConfig:
    kind: str  # attention | crossencoder
    index: str
    topics: str
    qrels: str
    candidates: str
    out: str
    base_model: str = "all-MiniLM-L6-v2"
    depth: int = 100
    max_length: int = 128
    train_layers: int = 2
    steps: int = 120
    group: int = 8
    lr: float = 5e-5
    head_lr: float = 1e-2
    entropy: float = 0.0
    select: int = 8
    idf: bool = False
    calibrate: bool = True
    folds: int = 0
    cv_run: str | None = None
    binary_min_rel: int = 1
    seed: int = 13
    select_queries: int = 10
    cv_only: bool = False
    cache: str | None = None
    validation: float = 0.0
    distill: float = 0.0
    distill_temperature: float = 0.05
    device: str | None = None
    interaction: str = "joint"  # joint: one input through every layer; late: ranker.relevance_attention
    heads: int = 1  # late: heads of the relevance attention layer
    temperature: float = 0.05  # late: the similarity initialization's softmax temperature
    eval_every: int = 25  # late: steps between validation checkpoints
    also: list[str] = field(default_factory=list)  # late: further training sets (always fitted on)
    command: list[str] = field(default_factory=list)


class FrozenCache:
    """What the frozen lower layers make of each input, computed once per training run (shared by all folds and
    steps): per (query, passage) input, the hidden states after the last frozen layer (float32, unpadded), the
    query/passage position masks, and every frozen head's query->passage attention mass (mean over query word
    pieces). A training step and the scoring of a fold then run the trained top layers only."""

    def __init__(self, tokenizer, model, first_trained: int, max_length: int):
        self.tokenizer, self.model, self.first, self.max_length = tokenizer, model, first_trained, max_length
        self.device = next(model.parameters()).device
        self.index: dict[tuple[str, str], int] = {}
        self.hidden: list = []
        self.qmask: list = []
        self.pmask: list = []
        self.frozen: list[np.ndarray] = []

    def add(self, inputs: list[tuple[str, str, str]], batch_size: int = 32, log: Callable[[str], None] | None = None):
        """Encode (query text, doc id, passage text) inputs not cached yet."""
        import torch

        from ranker.rerankers.attention import encode_pairs, extended_mask, layer_forward, segment_masks

        todo = list({(q, d): (q, d, t) for q, d, t in inputs if (q, d) not in self.index}.values())
        todo.sort(key=lambda x: len(x[0]) + len(x[2]))
        start = time.perf_counter()
        with torch.inference_mode():
            for b in range(0, len(todo), batch_size):
                chunk = todo[b:b + batch_size]
                enc = encode_pairs(self.tokenizer, [q for q, _, _ in chunk], [t for _, _, t in chunk], self.max_length)
                qmask, pmask = segment_masks(enc)
                enc = {k: v.to(self.device) for k, v in enc.items()}
                h = self.model.embeddings(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"])
                add_mask = extended_mask(enc["attention_mask"], h.dtype)
                feats = []
                qm, pm = qmask.to(self.device), pmask.to(self.device)
                for layer in self.model.encoder.layer[:self.first]:
                    h, probs = layer_forward(layer, h, add_mask)
                    feats.append(_mean_mass(probs, qm, pm))
                feats = torch.cat(feats, 1).cpu().numpy() if feats else np.zeros((len(chunk), 0), np.float32)
                lengths = enc["attention_mask"].sum(1).tolist()
                for j, (q, d, _) in enumerate(chunk):
                    self.index[(q, d)] = len(self.hidden)
                    self.hidden.append(h[j, :lengths[j]].clone())
                    self.qmask.append(qmask[j, :lengths[j]].clone())
                    self.pmask.append(pmask[j, :lengths[j]].clone())
                    self.frozen.append(feats[j])
        if log and todo:
            log(f"  cached the frozen layers' output of {len(todo)} inputs ({time.perf_counter() - start:.0f}s)")

    def key(self) -> dict:
        return {"model": str(getattr(self.model.config, "_name_or_path", "")), "first_trained": self.first,
                "max_length": self.max_length}

    def save(self, path: str | Path) -> None:
        """Keep the cache for another run over the same inputs (the other model kind, other settings of the top)."""
        import torch

        lengths = [len(m) for m in self.qmask]
        torch.save({"key": self.key(), "index": self.index, "lengths": lengths, "hidden": torch.cat(self.hidden),
                    "qmask": torch.cat(self.qmask).bool(), "pmask": torch.cat(self.pmask).bool(),
                    "frozen": np.stack(self.frozen)}, path)

    def load(self, path: str | Path) -> bool:
        """Load a cache :meth:`save` wrote for the same backbone, frozen layers and ``max_length``; False if not."""
        import torch

        if not Path(path).is_file():
            return False
        data = torch.load(path, map_location=self.device, weights_only=False)
        if data["key"] != self.key():
            return False
        self.index = data["index"]
        self.hidden = list(torch.split(data["hidden"], data["lengths"]))
        self.qmask = [m.float() for m in torch.split(data["qmask"], data["lengths"])]
        self.pmask = [m.float() for m in torch.split(data["pmask"], data["lengths"])]
        self.frozen = list(data["frozen"])
        return True

    def batch(self, rows: list[int]):
        """Padded (hidden (B, L, H), attention mask, query mask, passage mask) of cached inputs."""
        import torch

        L = max(len(self.qmask[i]) for i in rows)
        H = self.hidden[rows[0]].shape[-1]
        hidden = torch.zeros(len(rows), L, H, device=self.device)
        masks = torch.zeros(3, len(rows), L, device=self.device)
        for j, i in enumerate(rows):
            n = len(self.qmask[i])
            hidden[j, :n] = self.hidden[i]
            masks[0, j, :n] = 1
            masks[1, j, :n] = self.qmask[i].to(self.device)
            masks[2, j, :n] = self.pmask[i].to(self.device)
        return hidden, masks[0], masks[1], masks[2]


def _mean_mass(probs, qmask, pmask):
    """(B, heads): per head, the attention mass query word pieces send to passage word pieces, averaged over them."""
    mass = (probs * pmask[:, None, None, :]).sum(-1)  # (B, heads, L)
    return (mass * qmask[:, None, :]).sum(-1) / qmask.sum(-1, keepdim=True).clamp(min=1)


class Trainable:
    """Backbone with frozen lower layers (their output cached, :class:`FrozenCache`) and a score head (attention
    combination or [CLS] linear) over the trained top layers."""

    def __init__(self, config: AttnTrainConfig, device: str, base=None):
        import copy

        import torch

        from ranker.rerankers.attention import load_backbone

        self.config, self.device = config, device
        if base is None:
            self.tokenizer, self.model = load_backbone(config.base_model, device)
        else:  # a fresh copy of an already loaded base backbone (one per fold)
            self.tokenizer, self.model = base[0], copy.deepcopy(base[1])
        self.n_layers = self.model.config.num_hidden_layers
        self.n_heads = self.model.config.num_attention_heads
        self.first_trained = self.n_layers - config.train_layers
        for name, p in self.model.named_parameters():
            p.requires_grad = any(name.startswith(f"{pre}.{i}.") for i in range(self.first_trained, self.n_layers)
                                  for pre in ("encoder.layer", "layer"))
        self.heads = [(l, h) for l in range(self.first_trained, self.n_layers) for h in range(self.n_heads)]
        if config.kind == "attention":
            self.weights = torch.nn.Parameter(torch.full((len(self.heads),), 1.0, device=device))
            self.scale = torch.nn.Parameter(torch.tensor(10.0, device=device))
            head_params = [self.weights, self.scale]
        else:
            self.linear = torch.nn.Linear(self.model.config.hidden_size, 1).to(device)
            head_params = list(self.linear.parameters())
        self.optimizer = torch.optim.AdamW([
            {"params": [p for p in self.model.parameters() if p.requires_grad], "lr": config.lr},
            {"params": head_params, "lr": config.head_lr}])

    def top(self, cache: FrozenCache, rows: list[int], *, entropy: bool = False):
        """The trained layers over cached inputs: attention -> (per trained head mean masses (B, K), entropy term);
        crossencoder -> ([CLS] hidden state (B, H), None)."""
        import torch

        from ranker.rerankers.attention import extended_mask, layer_forward

        h, attn, qmask, pmask = cache.batch(rows)
        add_mask = extended_mask(attn, h.dtype)
        feats, probs_all = [], []
        attention = self.config.kind == "attention"
        for i in range(self.first_trained, self.n_layers):
            h, probs = layer_forward(self.model.encoder.layer[i], h, add_mask,
                                     output=not (attention and i == self.n_layers - 1))
            if attention:
                feats.append(_mean_mass(probs, qmask, pmask))
                if entropy:
                    probs_all.append(probs)
        if not attention:
            return h[:, 0], None
        ent = None
        if entropy:  # entropy of each query position's attention renormalized over the passage (ReAttn)
            P = torch.cat(probs_all, 1) * pmask[:, None, None, :]
            P = P / P.sum(-1, keepdim=True).clamp(min=1e-9)
            H = -(P * torch.log(P.clamp(min=1e-9))).sum(-1)
            ent = (H * qmask[:, None, :]).sum() / (qmask.sum() * P.shape[1]).clamp(min=1)
        return torch.cat(feats, 1), ent

    def scores(self, cache: FrozenCache, rows: list[int], na_rows: list[int] | None):
        """Differentiable scores of one query's cached inputs; also the entropy term (0 for the cross-encoder)."""
        import torch

        if self.config.kind == "crossencoder":
            cls, _ = self.top(cache, rows)
            return self.linear(cls).squeeze(-1), torch.zeros((), device=self.device)
        want_entropy = self.config.entropy > 0
        s, ent = self.top(cache, rows + (na_rows or []), entropy=want_entropy)
        if na_rows:
            s = s[:len(rows)] - s[len(rows):]
        if ent is None:
            ent = torch.zeros((), device=self.device)
        return self.scale * (s @ self.weights) / len(self.heads), ent

    def head_features(self, cache: FrozenCache, rows: list[int], batch_size: int = 64) -> np.ndarray:
        """(P, layers * heads) mean masses of every head (frozen ones from the cache, trained ones recomputed)."""
        import torch

        order = sorted(range(len(rows)), key=lambda j: len(cache.qmask[rows[j]]))
        out = np.zeros((len(rows), self.n_layers * self.n_heads), np.float32)
        with torch.inference_mode():
            for b in range(0, len(order), batch_size):
                idx = order[b:b + batch_size]
                top, _ = self.top(cache, [rows[j] for j in idx])
                out[idx] = np.concatenate([np.stack([cache.frozen[rows[j]] for j in idx]), top.cpu().numpy()], 1)
        return out

    def cls_scores(self, cache: FrozenCache, rows: list[int], batch_size: int = 64) -> np.ndarray:
        import torch

        order = sorted(range(len(rows)), key=lambda j: len(cache.qmask[rows[j]]))
        out = np.zeros(len(rows), np.float32)
        with torch.inference_mode():
            for b in range(0, len(order), batch_size):
                idx = order[b:b + batch_size]
                cls, _ = self.top(cache, [rows[j] for j in idx])
                out[idx] = self.linear(cls).squeeze(-1).cpu().numpy()
        return out

    def fit(self, cache: FrozenCache, groups: list[tuple[str, list[tuple[str, int]]]], steps: int,
            log: Callable[[str], None], teacher: dict[tuple[str, str], float] | None = None):
        """``groups``: (query text, [(doc id, label)]) whose inputs are in ``cache``. With ``teacher`` ((query text,
        doc id) -> score, e.g. the backbone's own bi-encoder cosine) and ``config.distill`` > 0, the loss adds
        ``distill`` times the KL divergence of the group's scores from the teacher's softmax (temperature
        ``distill_temperature``): a denser signal than one relevant passage per group."""
        import torch

        rng = random.Random(self.config.seed)
        usable = [(q, c) for q, c in groups if any(l > 0 for _, l in c)]
        if not usable:
            raise InputError("no training query has a relevant candidate")
        calibrate = self.config.kind == "attention" and self.config.calibrate
        self.model.train()
        start, losses = time.perf_counter(), []
        for step in range(steps):
            query, cands = rng.choice(usable)
            best = max(l for _, l in cands)
            pos = rng.choice([d for d, l in cands if l == best])
            negs = [d for d, l in cands if l < best]
            negs = rng.sample(negs, min(len(negs), self.config.group - 1))
            if not negs:
                continue
            docs = [pos] + negs
            s, ent = self.scores(cache, [cache.index[(query, d)] for d in docs],
                                 [cache.index[(NA_QUERY, d)] for d in docs] if calibrate else None)
            loss = torch.nn.functional.cross_entropy(s.float().unsqueeze(0), torch.zeros(1, dtype=torch.long, device=self.device))
            loss = loss + self.config.entropy * ent
            if teacher is not None and self.config.distill > 0:
                t = torch.tensor([teacher[(query, d)] for d in docs], device=self.device) / self.config.distill_temperature
                loss = loss + self.config.distill * torch.nn.functional.kl_div(
                    torch.log_softmax(s.float(), 0), torch.log_softmax(t, 0), log_target=True, reduction="sum")
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(float(loss.detach()))
            if (step + 1) % 20 == 0:
                log(f"  step {step + 1}/{steps}: loss {np.mean(losses[-20:]):.4f} ({time.perf_counter() - start:.0f}s)")
        self.model.eval()
        return time.perf_counter() - start

    def changed(self) -> dict:
        """The backbone parameters training changed (those that got gradients): all a model directory keeps."""
        return {k: p.detach().cpu().clone() for k, p in self.model.named_parameters() if p.grad is not None}

    def save(self, out: Path, heads, weights, bias: float, card: dict) -> None:
        import torch

        out.mkdir(parents=True, exist_ok=True)
        torch.save(self.changed(), out / "trained.pt")
        settings = {"kind": self.config.kind, "base_model": self.config.base_model, "max_length": self.config.max_length}
        if self.config.kind == "attention":
            settings.update({"heads": [list(h) for h in heads], "weights": [float(w) for w in weights], "bias": bias,
                             "calibrate": self.config.calibrate, "idf": self.config.idf})
            (out / "heads.json").write_text(json.dumps(settings, indent=1) + "\n")
        else:
            torch.save(self.linear.state_dict(), out / "cls_head.pt")
            (out / "crossencoder.json").write_text(json.dumps(settings, indent=1) + "\n")
        (out / "card.json").write_text(json.dumps(card, indent=1) + "\n")


def _groups(queries: list[Query], run: Run, qrels, keep: set[str], depth: int):
    return [(q.text, [(h.doc_id, qrels.get(q.id, {}).get(h.doc_id, 0)) for h in run.get(q.id, [])[:depth]])
            for q in queries if q.id in keep]


def _bi_encoder_scores(index, queries: list[Query], run: Run, model: str, device: str) -> dict[tuple[str, str], float]:
    """(query text, doc id) -> cosine of the backbone's own bi-encoder embeddings (the index's stored vectors)."""
    from ranker.dense import open_dense
    from ranker.encoder import shared_encoder

    dense = open_dense(index)
    settings = dense.encoder_settings
    encoder = shared_encoder(model, device=device, pooling=settings.get("pooling"),
                             normalize=settings.get("normalize", True))
    qv = encoder.encode_queries([q.text for q in queries])
    out = {}
    for q, v in zip(queries, qv):
        for h in run.get(q.id, []):
            row = dense.row_of.get(h.doc_id)
            if row is None:
                raise InputError(f"{h.doc_id}: no stored vector in {dense.path} (distillation needs every candidate)")
            out[(q.text, h.doc_id)] = float(np.asarray(dense.vectors[row], dtype=np.float32) @ v)
    return out


def _pair_features(trainer: Trainable, cache: FrozenCache, pairs) -> np.ndarray:
    """(P, all heads) calibrated (when configured) head scores of (query, doc id) pairs."""
    feats = trainer.head_features(cache, [cache.index[(q.text, d)] for q, d in pairs])
    if trainer.config.calibrate:
        feats = feats - trainer.head_features(cache, [cache.index[(NA_QUERY, d)] for _, d in pairs])
    return feats


def _per_head_selection(trainer: Trainable, cache: FrozenCache, queries, run, qrels, keep, depth, select, log):
    """QRHead-style: every head alone ranks the candidates of training queries; keep the ``select`` best by nDCG@10
    and refit their weights (listwise softmax on the fixed head scores)."""
    import torch

    from ranker.evaluate import evaluate
    from weir.types import Hit

    all_heads = [(l, h) for l in range(trainer.n_layers) for h in range(trainer.n_heads)]
    qs = [q for q in queries if q.id in keep]
    pairs = [(q, h.doc_id) for q in qs for h in run.get(q.id, [])[:depth]]
    feats = _pair_features(trainer, cache, pairs)  # (P, K)
    judged = {q.id: qrels.get(q.id, {}) for q in qs}
    per_head = []
    for k, head in enumerate(all_heads):
        r = Run()
        for (q, d), v in zip(pairs, feats[:, k]):
            r.setdefault(q.id, []).append(Hit(d, float(v)))
        per_head.append((evaluate(r.ranked(), judged, ["nDCG@10"])["nDCG@10"], head, k))
    per_head.sort(key=lambda x: -x[0])
    chosen = per_head[:select]
    log("  heads (nDCG@10 alone on training queries): " + ", ".join(f"L{h[0]}H{h[1]} {v:.3f}" for v, h, _ in chosen))
    cols = [k for _, _, k in chosen]
    X = torch.tensor(feats[:, cols], dtype=torch.float32)
    y = torch.tensor([qrels.get(q.id, {}).get(d, 0) for q, d in pairs], dtype=torch.float32)
    qid_rows: dict[str, list[int]] = {}
    for i, (q, _) in enumerate(pairs):
        qid_rows.setdefault(q.id, []).append(i)
    w = torch.nn.Parameter(torch.full((len(cols),), 1.0 / len(cols), dtype=torch.float32))
    opt = torch.optim.Adam([w], lr=0.05)
    for _ in range(300):
        loss = 0.0
        for rows in qid_rows.values():
            target = torch.softmax(y[rows] * 2.0, 0)
            loss = loss - (target * torch.log_softmax(X[rows] @ w * 10, 0)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [all_heads[k] for k in cols], (w.detach().numpy() * 10).astype(float).tolist(), per_head


def training_inputs(config: AttnTrainConfig):
    """What both trainers start from: torch seeded, the device (CPU threads set), the index, the qrels, the judged
    training queries, the candidate run (top ``depth``) and the candidates' texts (empty for a missing document)."""
    import torch

    from indexer.collections import read_qrels, read_topics
    from ranker.encoder import configure_cpu_threads, select_device
    from ranker.index import Index

    torch.manual_seed(config.seed)
    device = select_device(config.device)
    if device == "cpu":
        configure_cpu_threads()
    index = Index(config.index)
    qrels = read_qrels(config.qrels)
    queries = [q for q in read_topics(config.topics) if q.id in qrels]
    if not queries:
        raise InputError(f"{config.topics}: no topic has qrels in {config.qrels}")
    run = Run.read_trec(config.candidates).truncated(config.depth)
    doc_ids = [h.doc_id for q in queries for h in run.get(q.id, [])]
    docs = index.documents(doc_ids)
    texts = {d: (docs[d].contents if d in docs else "") for d in doc_ids}
    return device, index, qrels, queries, run, texts


def train(config: AttnTrainConfig, log: Callable[[str], None] = print) -> dict:

    from ranker.evaluate import evaluate
    from ranker.rerankers import apply_scores
    from ranker.train_ltr import folds_of
    from weir.checksums import sha256_file

    if config.kind not in ("attention", "crossencoder"):
        raise InputError(f"unknown model kind {config.kind!r}")
    if config.interaction not in ("joint", "late"):
        raise InputError(f"unknown interaction {config.interaction!r} (joint or late)")
    if config.interaction == "late":
        if config.kind != "attention":
            raise InputError("--interaction late is for the attention reranker only")
        from ranker.train_late_attention import train_late

        return train_late(config, log)
    device, index, qrels, queries, run, texts = training_inputs(config)
    all_q = {q.id for q in queries}
    card: dict = {"kind": config.kind, "base_model": config.base_model,
                  "training_data": {"index": config.index, "topics": config.topics, "qrels": config.qrels,
                                    "candidates": config.candidates, "topics_sha256": sha256_file(config.topics),
                                    "qrels_sha256": sha256_file(config.qrels), "queries": len(queries)},
                  "parameters": {k: v for k, v in config.__dict__.items() if k not in ("command",)},
                  "command": config.command, "metrics": {}, "device": device}

    from ranker.rerankers.attention import load_backbone

    base = load_backbone(config.base_model, device)
    base[1].eval()
    cache = FrozenCache(base[0], base[1], base[1].config.num_hidden_layers - config.train_layers, config.max_length)
    inputs = [(q.text, h.doc_id, texts[h.doc_id]) for q in queries for h in run.get(q.id, [])]
    if config.kind == "attention" and config.calibrate:
        inputs += [(NA_QUERY, d, texts[d]) for d in dict.fromkeys(d for _, d, _ in inputs)]
    if config.cache and cache.load(config.cache):
        log(f"  frozen layers' output of {len(cache.index)} inputs loaded from {config.cache}")
    size = len(cache.index)
    cache.add(inputs, log=log)
    if config.cache and len(cache.index) > size:
        cache.save(config.cache)

    teacher = None
    if config.distill > 0:
        teacher = _bi_encoder_scores(index, queries, run, config.base_model, device)
        log(f"  teacher: bi-encoder cosine of {len(teacher)} pairs")

    def trained_combination(trainer: Trainable):
        """The heads of the trained layers with the weights training learned (score = scale * s @ w / K)."""
        w = (trainer.scale * trainer.weights / len(trainer.heads)).detach().cpu().numpy()
        return [list(h) for h in trainer.heads], w.astype(float).tolist()

    def fit_and_save(keep: set[str], out: Path | None):
        fit_q, val_q = set(keep), set()
        if config.kind == "attention" and config.validation > 0:  # held out to choose the attention score's form
            order = sorted(keep)
            random.Random(config.seed).shuffle(order)
            val_q = set(order[:max(1, round(len(order) * config.validation))])
            fit_q = set(keep) - val_q
        trainer = Trainable(config, device, base)
        seconds = trainer.fit(cache, _groups(queries, run, qrels, fit_q, config.depth), config.steps, log, teacher)
        info = {"train_seconds": round(seconds, 1), "train_queries": len(fit_q)}
        heads = weights = None
        if config.kind == "attention":
            t0 = time.perf_counter()
            variants = {}
            if config.select != 0:
                sel_keep = set(sorted(fit_q)[:config.select_queries])  # selection on (a share of) the training queries
                heads, weights, per_head = _per_head_selection(trainer, cache, queries, run, qrels, sel_keep,
                                                               min(config.depth, 30), config.select, log)
                variants["selected"] = (heads, weights)
                info["selection"] = {"queries": len(sel_keep), "heads": [list(h) for h in heads],
                                     "weights": [round(w, 4) for w in weights],
                                     "top_heads": [[list(h), round(v, 4)] for v, h, _ in per_head[:12]]}
            if config.select == 0 or val_q:
                variants["trained"] = trained_combination(trainer)
            if val_q and len(variants) > 1:
                judged = {q: qrels.get(q, {}) for q in val_q}
                val = {name: evaluate(rerank_with(trainer, h, w, val_q), judged, ["nDCG@10"])["nDCG@10"]
                       for name, (h, w) in variants.items()}
                chosen = max(val, key=lambda n: (val[n], n == "trained"))
                log("  validation nDCG@10 (" + ", ".join(f"{n} {v:.4f}" for n, v in val.items()) + f"): {chosen}")
                info["validation"] = {"queries": len(val_q), "nDCG@10": val, "chosen": chosen}
            else:
                chosen = next(iter(variants))
            heads, weights = variants[chosen]
            info["score"] = {"form": chosen, "seconds": round(time.perf_counter() - t0, 1)}
        seen = set(sorted(fit_q)[:10])  # a fit check (not a validation): nDCG@10 on training queries
        info["fit_nDCG@10"] = evaluate(rerank_with(trainer, heads, weights, seen),
                                       {q: qrels.get(q, {}) for q in seen}, ["nDCG@10"])["nDCG@10"]
        log(f"  nDCG@10 on {len(seen)} of the training queries: {info['fit_nDCG@10']:.4f}")
        if out is not None:
            trainer.save(out, heads, weights or [], 0.0, {**card, "fold": info})
        return trainer, heads, weights, info

    def rerank_with(trainer: Trainable, heads, weights, keep: set[str]) -> Run:
        """The fold's model over the cached inputs of the held-out queries (what AttentionReranker /
        CrossEncoderReranker compute with the saved model directory, without re-running the frozen layers)."""
        qs = [q for q in queries if q.id in keep]
        pairs = [(q, h.doc_id) for q in qs for h in run.get(q.id, [])[:config.depth]]
        if config.kind == "attention":
            all_heads = [(l, h) for l in range(trainer.n_layers) for h in range(trainer.n_heads)]
            cols = [all_heads.index(tuple(h)) for h in heads]
            values = _pair_features(trainer, cache, pairs)[:, cols] @ np.asarray(weights)
        else:
            values = trainer.cls_scores(cache, [cache.index[(q.text, d)] for q, d in pairs])
        by_query: dict[str, list[float]] = {}
        for (q, _), v in zip(pairs, values):
            by_query.setdefault(q.id, []).append(float(v))
        return apply_scores(qs, Run({q.id: run.get(q.id, []) for q in qs}), config.depth, by_query, config.kind)

    if config.folds:
        scored = Run()
        folds_info = []
        for f, test in enumerate(folds_of(sorted(all_q), config.folds, config.seed)):
            log(f"fold {f + 1}/{config.folds}: training on {len(all_q - test)} queries, scoring {len(test)}")
            trainer, heads, weights, info = fit_and_save(all_q - test, None)
            t0 = time.perf_counter()
            scored.update(rerank_with(trainer, heads, weights, test))
            info["score_seconds"] = round(time.perf_counter() - t0, 1)
            folds_info.append(info)
            del trainer
        names = ["nDCG@10", "RR@10", "AP"]
        first = evaluate(run, qrels, names, binary_min_rel=config.binary_min_rel)
        cv = evaluate(scored, qrels, names, binary_min_rel=config.binary_min_rel)
        card["metrics"]["cross_validation"] = {"folds": config.folds, "first_stage": first, config.kind: cv,
                                               "per_fold": folds_info}
        if config.cv_run:
            scored.write_trec(config.cv_run, tag=f"{config.kind}_cv")
        log(f"{config.folds}-fold cross-validation: nDCG@10 {cv['nDCG@10']:.4f} (first stage {first['nDCG@10']:.4f})")
    if config.cv_only:
        Path(config.out).mkdir(parents=True, exist_ok=True)
        (Path(config.out) / "cv-card.json").write_text(json.dumps(card, indent=1) + "\n")
        card["metrics"]["final"] = {"train_seconds": None}
        return card
    _, _, _, info = fit_and_save(all_q, Path(config.out))
    card["metrics"]["final"] = info
    card["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (Path(config.out) / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    return card


def add_parsers(tr) -> None:
    for kind, what in (("attention", "attention reranker: by default (--interaction late) train the relevance "
                        "attention layer over the backbone's per-segment token states, the checkpoint chosen on "
                        "held-out training queries; --interaction joint fine-tunes top layers on the calibrated "
                        "query->passage attention score, then selects heads QRHead-style"),
                       ("crossencoder", "cross-encoder baseline: the same backbone with a linear head on [CLS]")):
        t = tr.add_parser(kind, help=what, description=what + ". Writes backbone/, the head file and card.json.")
        t.add_argument("--index", required=True, help="index directory (documents' text)")
        t.add_argument("--topics", required=True, help="TRAINING topics (never a test split you report)")
        t.add_argument("--qrels", required=True, help="qrels of the training topics")
        t.add_argument("--candidates", required=True, help="TREC run whose top --train-depth are the candidates")
        t.add_argument("--out", required=True, help="model directory to write")
        t.add_argument("--base-model", default="all-MiniLM-L6-v2", help="backbone: Hugging Face name or local path")
        t.add_argument("--train-depth", type=int, default=100)
        t.add_argument("--max-length", type=int, default=128, help="word pieces per pair (default 128)")
        t.add_argument("--train-layers", type=int, default=2, help="top layers fine-tuned (default 2)")
        t.add_argument("--steps", type=int, default=None, help="training steps, one query each (default: 200 late, "
                       "120 joint and crossencoder)")
        t.add_argument("--group", type=int, default=8, help="passages per group: 1 relevant + negatives")
        t.add_argument("--lr", type=float, default=None, help="learning rate of the trained layers (default: 3e-3 "
                       "late, 5e-5 joint and crossencoder)")
        t.add_argument("--entropy", type=float, default=0.0, help="attention: entropy penalty weight (ReAttn)")
        t.add_argument("--select", type=int, default=8, help="attention: heads kept (QRHead-style selection); 0: "
                       "keep the trained combination of the trained layers' heads")
        t.add_argument("--validation", type=float, default=None, help="attention: share of the training queries held "
                       "out to choose the score form (joint; default 0) or the checkpoint (late; default 0.2) by "
                       "nDCG@10")
        if kind == "attention":
            t.add_argument("--interaction", choices=("joint", "late"), default="late",
                           help="late (default): query and passage segments attend within themselves through the "
                           "frozen backbone and a trained relevance attention layer reads query->passage attention "
                           "on top (PreTTR-style; passages encoded once); joint: the whole input through every "
                           "layer, the top --train-layers fine-tuned, heads selected QRHead-style")
            t.add_argument("--heads", type=int, default=1, help="late: heads of the relevance attention layer "
                           "(default 1, full width)")
            t.add_argument("--temperature", type=float, default=0.05, help="late: the layer starts as token cosine "
                           "similarity over this temperature (default 0.05)")
            t.add_argument("--eval-every", type=int, default=25, help="late: steps between validation checkpoints")
            t.add_argument("--also", action="append", help="late: another training set, fitted on in every fold: "
                           "index=DIR,topics=FILE,qrels=FILE,candidates=RUN[,depth=N] (repeatable)")
        t.add_argument("--idf", action="store_true", help="attention: ReAttn cross-candidate IDF re-weighting")
        t.add_argument("--no-calibration", action="store_true", help="attention: no content-free (N/A) calibration")
        t.add_argument("--folds", type=int, default=0)
        t.add_argument("--cv-run", default=None)
        t.add_argument("--cv-only", action="store_true", help="with --folds: write the CV run and card, no final model")
        t.add_argument("--select-queries", type=int, default=10, help="attention: training queries heads are ranked on "
                       "(their top 30 candidates)")
        t.add_argument("--binary-min-rel", type=int, default=1)
        t.add_argument("--seed", type=int, default=13)
        t.add_argument("--device", default=None)
        t.add_argument("--distill", type=float, default=0.0, help="weight of a KL term towards the backbone's own "
                       "bi-encoder cosine over each group (needs the index's dense component over the candidates)")
        t.add_argument("--distill-temperature", type=float, default=0.05)
        t.add_argument("--cache", default=None, help="file keeping the frozen layers' output of every input, reused "
                       "by later runs with the same backbone, --train-layers and --max-length")
        t.set_defaults(func=_cmd, kind=kind)


def _cmd(args) -> int:
    late = getattr(args, "interaction", "joint") == "late"
    config = AttnTrainConfig(kind=args.kind, index=args.index, topics=args.topics, qrels=args.qrels,
                             candidates=args.candidates, out=args.out, base_model=args.base_model,
                             depth=args.train_depth, max_length=args.max_length, train_layers=args.train_layers,
                             steps=args.steps if args.steps is not None else (200 if late else 120),
                             group=args.group, lr=args.lr if args.lr is not None else (3e-3 if late else 5e-5),
                             entropy=args.entropy, select=args.select,
                             idf=args.idf, calibrate=not args.no_calibration, folds=args.folds, cv_run=args.cv_run,
                             binary_min_rel=args.binary_min_rel, seed=args.seed, device=args.device,
                             cv_only=args.cv_only, select_queries=args.select_queries, cache=args.cache,
                             validation=(args.validation if args.validation is not None
                                         else 0.2 if getattr(args, "interaction", "joint") == "late" else 0.0),
                             interaction=getattr(args, "interaction", "joint"), heads=getattr(args, "heads", 1),
                             temperature=getattr(args, "temperature", 0.05),
                             eval_every=getattr(args, "eval_every", 25), also=getattr(args, "also", None) or [],
                             distill=args.distill,
                             distill_temperature=args.distill_temperature,
                             command=["weir"] + args.argv)
    card = train(config, log=lambda m: print(m, file=sys.stderr))
    seconds = card["metrics"]["final"]["train_seconds"]
    print(f"{args.kind} -> {args.out}: " + (f"trained in {seconds}s" if seconds is not None else "cross-validation only"),
          file=sys.stderr)
    return 0
