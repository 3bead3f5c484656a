"""Joint-interaction training (`weir train attention --interaction joint`, `weir train crossencoder`): fine-tune the
top ``train_layers`` layers of the backbone on whole ``[CLS] query [SEP] passage [SEP]`` inputs with a listwise loss
(softmax cross-entropy of one relevant passage against sampled less relevant ones); the frozen lower layers run once
(:mod:`.frozen_cache`).

- attention: the score is the learned combination of calibrated query->passage attention masses of the heads in the
  trained layers (:mod:`weir.ranker.rerankers.attention`), optionally with an entropy penalty on the query tokens'
  attention over the passage (ReAttn). After training, heads are selected QRHead-style: every head of every layer is
  scored alone on training queries (nDCG@10), the best ``select`` are kept and their combination weights refit on
  the training queries.
- crossencoder (the honest baseline): the same backbone and training, scored by a linear head on [CLS].
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from weir.evaluation.measures import evaluate
from weir.core.layers import extended_mask, layer_forward
from weir.ranker.rerankers.backbone import (
    NA_QUERY,
    load_backbone,
    mean_over_query,
    passage_mass,
)
from weir.ranker.stage import apply_scores
from weir.training.attention import AttnTrainConfig, TrainingInputs
from weir.training.common import fit_and_write
from weir.training.frozen_cache import FrozenCache
from weir.core.types import Hit, InputError, Query, Run


class Trainable:
    """Backbone with frozen lower layers (their output cached, :class:`FrozenCache`) and a score head (attention
    combination or [CLS] linear) over the trained top layers."""

    def __init__(self, config: AttnTrainConfig, device: str, base=None):
        import copy

        import torch

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

        h, attn, qmask, pmask = cache.batch(rows)
        add_mask = extended_mask(attn, h.dtype)
        feats, probs_all = [], []
        attention = self.config.kind == "attention"
        for i in range(self.first_trained, self.n_layers):
            h, probs = layer_forward(self.model.encoder.layer[i], h, add_mask,
                                     output=not (attention and i == self.n_layers - 1))
            if attention:
                feats.append(mean_over_query(passage_mass(probs, qmask, pmask), qmask))
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

    def save(self, out: Path, heads, weights, bias: float) -> None:
        """trained.pt (the changed parameters) and the settings the reranker reads (heads.json, or crossencoder.json
        and cls_head.pt)."""
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


def groups(queries: list[Query], run: Run, qrels, keep: set[str], depth: int):
    return [(q.text, [(h.doc_id, qrels.get(q.id, {}).get(h.doc_id, 0)) for h in run.get(q.id, [])[:depth]])
            for q in queries if q.id in keep]


def pair_features(trainer: Trainable, cache: FrozenCache, pairs) -> np.ndarray:
    """(P, all heads) calibrated (when configured) head scores of (query, doc id) pairs."""
    feats = trainer.head_features(cache, [cache.index[(q.text, d)] for q, d in pairs])
    if trainer.config.calibrate:
        feats = feats - trainer.head_features(cache, [cache.index[(NA_QUERY, d)] for _, d in pairs])
    return feats


def per_head_selection(trainer: Trainable, cache: FrozenCache, queries, run, qrels, keep, depth, select, log):
    """QRHead-style: every head alone ranks the candidates of training queries; keep the ``select`` best by nDCG@10
    and refit their weights (listwise softmax on the fixed head scores)."""
    import torch

    all_heads = [(l, h) for l in range(trainer.n_layers) for h in range(trainer.n_heads)]
    qs = [q for q in queries if q.id in keep]
    pairs = [(q, h.doc_id) for q in qs for h in run.get(q.id, [])[:depth]]
    feats = pair_features(trainer, cache, pairs)  # (P, K)
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


class JointTraining:
    """One joint-interaction training run: the inputs, the frozen layers' cache, the optional distillation teacher;
    fits a model on a set of queries (:meth:`fit`) and reranks queries with it (:meth:`rerank`)."""

    def __init__(self, config: AttnTrainConfig, log: Callable[[str], None]):
        self.config, self.log = config, log
        self.inputs = inputs = TrainingInputs.load(config)
        self.base = load_backbone(config.base_model, inputs.device)
        self.base[1].eval()
        model = self.base[1]
        self.cache = FrozenCache(self.base[0], model, model.config.num_hidden_layers - config.train_layers,
                                 config.max_length)
        pairs = [(q.text, h.doc_id, inputs.texts[h.doc_id]) for q in inputs.queries for h in inputs.run.get(q.id, [])]
        if config.kind == "attention" and config.calibrate:
            pairs += [(NA_QUERY, d, inputs.texts[d]) for d in dict.fromkeys(d for _, d, _ in pairs)]
        if config.cache and self.cache.load(config.cache):
            log(f"  frozen layers' output of {len(self.cache.index)} inputs loaded from {config.cache}")
        size = len(self.cache.index)
        self.cache.add(pairs, log=log)
        if config.cache and len(self.cache.index) > size:
            self.cache.save(config.cache)
        self.teacher = None
        if config.distill > 0:
            self.teacher = inputs.bi_encoder_scores(config.base_model)
            log(f"  teacher: bi-encoder cosine of {len(self.teacher)} pairs")

    def fit(self, keep: set[str]) -> tuple[Trainable, list | None, list | None, dict]:
        """Train on the ``keep`` queries; for attention, choose the score's form (selected heads, or the trained
        combination) on held-out ones. Returns (trainer, heads, weights, record)."""
        config, inputs, log = self.config, self.inputs, self.log
        fit_q, val_q = set(keep), set()
        if config.kind == "attention" and config.validation > 0:  # held out to choose the attention score's form
            order = sorted(keep)
            random.Random(config.seed).shuffle(order)
            val_q = set(order[:max(1, round(len(order) * config.validation))])
            fit_q = set(keep) - val_q
        trainer = Trainable(config, inputs.device, self.base)
        seconds = trainer.fit(self.cache, groups(inputs.queries, inputs.run, inputs.qrels, fit_q, config.depth),
                              config.steps, log, self.teacher)
        info = {"train_seconds": round(seconds, 1), "train_queries": len(fit_q)}
        heads = weights = None
        if config.kind == "attention":
            heads, weights = self._score_form(trainer, fit_q, val_q, info)
        seen = set(sorted(fit_q)[:10])  # a fit check (not a validation): nDCG@10 on training queries
        info["fit_nDCG@10"] = evaluate(self.rerank(trainer, heads, weights, seen),
                                       {q: inputs.qrels.get(q, {}) for q in seen}, ["nDCG@10"])["nDCG@10"]
        log(f"  nDCG@10 on {len(seen)} of the training queries: {info['fit_nDCG@10']:.4f}")
        return trainer, heads, weights, info

    def _score_form(self, trainer: Trainable, fit_q: set[str], val_q: set[str], info: dict):
        """(heads, weights) of the attention score: the QRHead-style selection and/or the trained combination, the
        better on the held-out queries ``val_q`` when both are candidates."""
        config, inputs = self.config, self.inputs
        t0 = time.perf_counter()
        variants = {}
        if config.select != 0:
            sel_keep = set(sorted(fit_q)[:config.select_queries])  # selection on (a share of) the training queries
            heads, weights, per_head = per_head_selection(trainer, self.cache, inputs.queries, inputs.run,
                                                          inputs.qrels, sel_keep, min(config.depth, 30),
                                                          config.select, self.log)
            variants["selected"] = (heads, weights)
            info["selection"] = {"queries": len(sel_keep), "heads": [list(h) for h in heads],
                                 "weights": [round(w, 4) for w in weights],
                                 "top_heads": [[list(h), round(v, 4)] for v, h, _ in per_head[:12]]}
        if config.select == 0 or val_q:
            # the heads of the trained layers with the weights training learned (score = scale * s @ w / K)
            w = (trainer.scale * trainer.weights / len(trainer.heads)).detach().cpu().numpy()
            variants["trained"] = ([list(h) for h in trainer.heads], w.astype(float).tolist())
        if val_q and len(variants) > 1:
            judged = {q: inputs.qrels.get(q, {}) for q in val_q}
            val = {name: evaluate(self.rerank(trainer, h, w, val_q), judged, ["nDCG@10"])["nDCG@10"]
                   for name, (h, w) in variants.items()}
            chosen = max(val, key=lambda n: (val[n], n == "trained"))
            self.log("  validation nDCG@10 (" + ", ".join(f"{n} {v:.4f}" for n, v in val.items()) + f"): {chosen}")
            info["validation"] = {"queries": len(val_q), "nDCG@10": val, "chosen": chosen}
        else:
            chosen = next(iter(variants))
        info["score"] = {"form": chosen, "seconds": round(time.perf_counter() - t0, 1)}
        return variants[chosen]

    def rerank(self, trainer: Trainable, heads, weights, keep: set[str]) -> Run:
        """The model over the cached inputs of the ``keep`` queries (what AttentionReranker / CrossEncoderReranker
        compute with the saved model directory, without re-running the frozen layers)."""
        config, inputs = self.config, self.inputs
        qs = [q for q in inputs.queries if q.id in keep]
        pairs = [(q, h.doc_id) for q in qs for h in inputs.run.get(q.id, [])[:config.depth]]
        if config.kind == "attention":
            all_heads = [(l, h) for l in range(trainer.n_layers) for h in range(trainer.n_heads)]
            cols = [all_heads.index(tuple(h)) for h in heads]
            values = pair_features(trainer, self.cache, pairs)[:, cols] @ np.asarray(weights)
        else:
            values = trainer.cls_scores(self.cache, [self.cache.index[(q.text, d)] for q, d in pairs])
        by_query: dict[str, list[float]] = {}
        for (q, _), v in zip(pairs, values):
            by_query.setdefault(q.id, []).append(float(v))
        return apply_scores(qs, Run({q.id: inputs.run.get(q.id, []) for q in qs}), config.depth, by_query,
                            config.kind)

    def fit_and_score(self, train_q: set[str], test: set[str]) -> tuple[Run, dict]:
        """One cross-validation fold."""
        trainer, heads, weights, info = self.fit(train_q)
        t0 = time.perf_counter()
        run = self.rerank(trainer, heads, weights, test)
        info["score_seconds"] = round(time.perf_counter() - t0, 1)
        return run, info


def train_joint(config: AttnTrainConfig, log: Callable[[str], None]) -> dict:
    """Train (and cross-validate) a joint-interaction model; write its directory; return the card."""
    training = JointTraining(config, log)
    inputs = training.inputs

    def fit_all(qids: set[str], out: Path) -> dict:
        trainer, heads, weights, info = training.fit(qids)
        trainer.save(out, heads, weights or [], 0.0)
        return info

    return fit_and_write(config.kind, config, inputs.card(config), {q.id for q in inputs.queries},
                         training.fit_and_score, fit_all, first_run=inputs.run, qrels=inputs.qrels,
                         measures=["nDCG@10", "RR@10", "AP"], log=log)
