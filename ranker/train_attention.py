"""`weir train attention` and `weir train crossencoder`: fine-tune the top layers of the backbone on (query, passage)
pairs with a listwise loss (softmax cross-entropy of one relevant passage against sampled less relevant ones).

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
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from weir.types import InputError, Query, Run


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
    device: str | None = None
    command: list[str] = field(default_factory=list)


class Trainable:
    """Backbone with frozen lower layers and a score head (attention combination or [CLS] linear)."""

    def __init__(self, config: AttnTrainConfig, device: str):
        import torch

        from ranker.rerankers.attention import load_backbone

        self.config, self.device = config, device
        self.tokenizer, self.model = load_backbone(config.base_model, device)
        n_layers = self.model.config.num_hidden_layers
        self.n_heads = self.model.config.num_attention_heads
        first_trained = n_layers - config.train_layers
        for name, p in self.model.named_parameters():
            p.requires_grad = any(name.startswith(f"{pre}.{i}.") for i in range(first_trained, n_layers)
                                  for pre in ("encoder.layer", "layer"))
        self.heads = [(l, h) for l in range(first_trained, n_layers) for h in range(self.n_heads)]
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

    def scores(self, query: str, passages: list[str]):
        """Differentiable scores of one query's passages; also the entropy term (0 for the cross-encoder)."""
        import torch

        from ranker.rerankers.attention import NA_QUERY, encode_pairs, head_masses, head_scores, segment_masks

        cfg = self.config
        enc = encode_pairs(self.tokenizer, [query] * len(passages), passages, cfg.max_length)
        if cfg.kind == "crossencoder":
            out = self.model(**{k: v.to(self.device) for k, v in enc.items()})
            return self.linear(out.last_hidden_state[:, 0]).squeeze(-1), torch.zeros((), device=self.device)
        qmask, pmask = segment_masks(enc)
        qmask, pmask = qmask.to(self.device), pmask.to(self.device)
        attn = self.model(**{k: v.to(self.device) for k, v in enc.items()}, output_attentions=True).attentions
        mass = head_masses(attn, self.heads, qmask, pmask)
        s = head_scores(mass, qmask)
        if cfg.calibrate:
            na = encode_pairs(self.tokenizer, [NA_QUERY] * len(passages), passages, cfg.max_length)
            nq, np_ = segment_masks(na)
            nq, np_ = nq.to(self.device), np_.to(self.device)
            na_attn = self.model(**{k: v.to(self.device) for k, v in na.items()}, output_attentions=True).attentions
            s = s - head_scores(head_masses(na_attn, self.heads, nq, np_), nq)
        entropy = torch.zeros((), device=self.device)
        if cfg.entropy > 0:
            # entropy of each query position's attention restricted to (renormalized over) the passage
            A = torch.stack([attn[l][:, h] for l, h in self.heads], 1).float()
            P = A * pmask[:, None, None, :]
            P = P / P.sum(-1, keepdim=True).clamp(min=1e-9)
            H = -(P * torch.log(P.clamp(min=1e-9))).sum(-1)
            entropy = (H * qmask[:, None, :]).sum() / (qmask.sum() * len(self.heads)).clamp(min=1)
        return self.scale * (s @ self.weights) / len(self.heads), entropy

    def fit(self, groups: list[tuple[str, list[tuple[str, int]]]], steps: int, log: Callable[[str], None]):
        import torch

        rng = random.Random(self.config.seed)
        usable = [(q, c) for q, c in groups if any(l > 0 for _, l in c)]
        if not usable:
            raise InputError("no training query has a relevant candidate")
        self.model.train()
        start, losses = time.perf_counter(), []
        for step in range(steps):
            query, cands = rng.choice(usable)
            best = max(l for _, l in cands)
            pos = rng.choice([t for t, l in cands if l == best])
            negs = [t for t, l in cands if l < best]
            negs = rng.sample(negs, min(len(negs), self.config.group - 1))
            if not negs:
                continue
            s, ent = self.scores(query, [pos] + negs)
            loss = torch.nn.functional.cross_entropy(s.float().unsqueeze(0), torch.zeros(1, dtype=torch.long, device=self.device))
            loss = loss + self.config.entropy * ent
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(float(loss.detach()))
            if (step + 1) % 20 == 0:
                log(f"  step {step + 1}/{steps}: loss {np.mean(losses[-20:]):.4f} ({time.perf_counter() - start:.0f}s)")
        self.model.eval()
        return time.perf_counter() - start

    def save(self, out: Path, heads, weights, bias: float, card: dict) -> None:
        import torch

        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out / "backbone")
        self.tokenizer.save_pretrained(out / "backbone")
        settings = {"kind": self.config.kind, "base_model": self.config.base_model, "max_length": self.config.max_length}
        if self.config.kind == "attention":
            settings.update({"heads": [list(h) for h in heads], "weights": [float(w) for w in weights], "bias": bias,
                             "calibrate": self.config.calibrate, "idf": self.config.idf})
            (out / "heads.json").write_text(json.dumps(settings, indent=1) + "\n")
        else:
            torch.save(self.linear.state_dict(), out / "cls_head.pt")
            (out / "crossencoder.json").write_text(json.dumps(settings, indent=1) + "\n")
        (out / "card.json").write_text(json.dumps(card, indent=1) + "\n")


def _groups(queries: list[Query], run: Run, qrels, texts: dict[str, str], keep: set[str], depth: int):
    return [(q.text, [(texts[h.doc_id], qrels.get(q.id, {}).get(h.doc_id, 0)) for h in run.get(q.id, [])[:depth]])
            for q in queries if q.id in keep]


def _per_head_selection(trainer: Trainable, queries, run, qrels, texts, keep, depth, select, log):
    """QRHead-style: every head alone ranks the candidates of training queries; keep the ``select`` best by nDCG@10
    and refit their weights (listwise softmax on the fixed head scores)."""
    import torch

    from ranker.evaluate import evaluate
    from ranker.rerankers.attention import AttentionModel, combine

    all_heads = [(l, h) for l in range(trainer.model.config.num_hidden_layers) for h in range(trainer.n_heads)]
    proxy = AttentionModel.__new__(AttentionModel)
    proxy.tokenizer, proxy.model, proxy.device = trainer.tokenizer, trainer.model, trainer.device
    proxy.heads, proxy.max_length, proxy._lock = all_heads, trainer.config.max_length, __import__("threading").Lock()
    qs = [q for q in queries if q.id in keep]
    pairs = [(q, h.doc_id) for q in qs for h in run.get(q.id, [])[:depth]]
    masses = proxy.masses([q.text for q, _ in pairs], [texts[d] for _, d in pairs], 32)
    na = proxy.masses(["N/A"] * len(pairs), [texts[d] for _, d in pairs], 32) if trainer.config.calibrate else None
    feats = np.stack([m.mean(-1) for m in masses]) - (np.stack([m.mean(-1) for m in na]) if na else 0)  # (P, K)
    per_head = []
    for k, head in enumerate(all_heads):
        r = Run()
        for (q, d), v in zip(pairs, feats[:, k]):
            r.setdefault(q.id, []).append(__import__("weir.types", fromlist=["Hit"]).Hit(d, float(v)))
        judged = {q.id: qrels.get(q.id, {}) for q in qs}
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


def train(config: AttnTrainConfig, log: Callable[[str], None] = print) -> dict:
    import torch

    from indexer.collections import read_qrels, read_topics
    from ranker.encoder import configure_cpu_threads, select_device
    from ranker.evaluate import evaluate
    from ranker.index import Index
    from ranker.rerankers import apply_scores
    from ranker.train_ltr import folds_of
    from weir.checksums import sha256_file

    if config.kind not in ("attention", "crossencoder"):
        raise InputError(f"unknown model kind {config.kind!r}")
    torch.manual_seed(config.seed)
    device = select_device(config.device)
    if device == "cpu":
        configure_cpu_threads()
    index = Index(config.index)
    qrels = read_qrels(config.qrels)
    queries = [q for q in read_topics(config.topics) if q.id in qrels]
    run = Run.read_trec(config.candidates).truncated(config.depth)
    docs = index.documents([h.doc_id for q in queries for h in run.get(q.id, [])])
    texts = {d: doc.contents for d, doc in docs.items()}
    for q in queries:
        for h in run.get(q.id, []):
            texts.setdefault(h.doc_id, "")
    all_q = {q.id for q in queries}
    card: dict = {"kind": config.kind, "base_model": config.base_model,
                  "training_data": {"index": config.index, "topics": config.topics, "qrels": config.qrels,
                                    "candidates": config.candidates, "topics_sha256": sha256_file(config.topics),
                                    "qrels_sha256": sha256_file(config.qrels), "queries": len(queries)},
                  "parameters": {k: v for k, v in config.__dict__.items() if k not in ("command",)},
                  "command": config.command, "metrics": {}, "device": device}

    def fit_and_save(keep: set[str], out: Path) -> dict:
        trainer = Trainable(config, device)
        seconds = trainer.fit(_groups(queries, run, qrels, texts, keep, config.depth), config.steps, log)
        info = {"train_seconds": round(seconds, 1), "train_queries": len(keep)}
        heads = weights = None
        if config.kind == "attention":
            sel_keep = set(sorted(keep)[:config.select_queries])  # head selection on (a share of) the training queries
            heads, weights, per_head = _per_head_selection(trainer, queries, run, qrels, texts, sel_keep,
                                                           min(config.depth, 20), config.select, log)
            info["selection"] = {"queries": len(sel_keep), "heads": [list(h) for h in heads],
                                 "top_heads": [[list(h), round(v, 4)] for v, h, _ in per_head[:12]]}
        trainer.save(out, heads, weights or [], 0.0, {**card, "fold": info})
        return info

    def rerank_with(model_dir: Path, keep: set[str]) -> Run:
        from ranker.rerankers.attention import AttentionReranker
        from ranker.rerankers.crossencoder import CrossEncoderReranker

        cls = AttentionReranker if config.kind == "attention" else CrossEncoderReranker
        reranker = cls(index, model_dir, depth=config.depth, device=device)
        qs = [q for q in queries if q.id in keep]
        return reranker(qs, Run({q.id: run.get(q.id, []) for q in qs}), k=config.depth)

    if config.folds:
        scored = Run()
        tmp = Path(tempfile.mkdtemp(prefix="weir-cv-"))
        folds_info = []
        try:
            for f, test in enumerate(folds_of(sorted(all_q), config.folds, config.seed)):
                log(f"fold {f + 1}/{config.folds}: training on {len(all_q - test)} queries, scoring {len(test)}")
                info = fit_and_save(all_q - test, tmp / f"fold{f}")
                t0 = time.perf_counter()
                scored.update(rerank_with(tmp / f"fold{f}", test))
                info["score_seconds"] = round(time.perf_counter() - t0, 1)
                folds_info.append(info)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
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
    info = fit_and_save(all_q, Path(config.out))
    card["metrics"]["final"] = info
    card["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (Path(config.out) / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    return card


def add_parsers(tr) -> None:
    for kind, what in (("attention", "attention reranker: fine-tune top layers on the calibrated query->passage "
                        "attention score, then select heads QRHead-style"),
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
        t.add_argument("--steps", type=int, default=120, help="training steps (one query group each)")
        t.add_argument("--group", type=int, default=8, help="passages per group: 1 relevant + negatives")
        t.add_argument("--lr", type=float, default=5e-5)
        t.add_argument("--entropy", type=float, default=0.0, help="attention: entropy penalty weight (ReAttn)")
        t.add_argument("--select", type=int, default=8, help="attention: heads kept (QRHead-style selection)")
        t.add_argument("--idf", action="store_true", help="attention: ReAttn cross-candidate IDF re-weighting")
        t.add_argument("--no-calibration", action="store_true", help="attention: no content-free (N/A) calibration")
        t.add_argument("--folds", type=int, default=0)
        t.add_argument("--cv-run", default=None)
        t.add_argument("--cv-only", action="store_true", help="with --folds: write the CV run and card, no final model")
        t.add_argument("--select-queries", type=int, default=10, help="attention: training queries heads are ranked on")
        t.add_argument("--binary-min-rel", type=int, default=1)
        t.add_argument("--seed", type=int, default=13)
        t.add_argument("--device", default=None)
        t.set_defaults(func=_cmd, kind=kind)


def _cmd(args) -> int:
    config = AttnTrainConfig(kind=args.kind, index=args.index, topics=args.topics, qrels=args.qrels,
                             candidates=args.candidates, out=args.out, base_model=args.base_model,
                             depth=args.train_depth, max_length=args.max_length, train_layers=args.train_layers,
                             steps=args.steps, group=args.group, lr=args.lr, entropy=args.entropy, select=args.select,
                             idf=args.idf, calibrate=not args.no_calibration, folds=args.folds, cv_run=args.cv_run,
                             binary_min_rel=args.binary_min_rel, seed=args.seed, device=args.device,
                             cv_only=args.cv_only, select_queries=args.select_queries,
                             command=["weir"] + args.argv)
    card = train(config, log=lambda m: print(m, file=sys.stderr))
    print(f"{args.kind} -> {args.out}: trained in {card['metrics']['final']['train_seconds']}s", file=sys.stderr)
    return 0
