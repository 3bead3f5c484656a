"""`weir train attention --interaction late`: train the relevance attention layer
(:mod:`weir.ranker.rerankers.relevance_attention`) over the frozen backbone's per-segment token states.

Every query text, the content-free query and every candidate passage is encoded once; a training step scores all
the candidates of one training query (top ``depth`` of the run) and takes a listwise loss (ListNet: cross-entropy of
the scores' softmax against the candidates' gains ``2^rel - 1``, normalized), optionally plus ``distill`` times the KL
divergence from the backbone's bi-encoder cosine (softmax at ``distill_temperature``). The score of a pair is
``sum_h w_h * s_h - sum_h v_h * n_h``: ``s_h`` the head's log attention mass on the passage averaged over the
query's word pieces, ``n_h`` the same for the content-free query over the same passage (the calibration pass; its
weights ``v`` start at 0 and are learned, so training decides how much calibration helps).

With so few training queries, the model is chosen on held-out training queries: ``validation`` of them are kept
out of the fit, scored every ``eval_every`` steps (and before the first step: the similarity initialization), and
the best checkpoint by nDCG@10 is kept. ``folds`` writes a cross-validated run (each fold's model trained and
validated on the other folds only).
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from weir.evaluation.measures import evaluate
from weir.ranker.rerankers.backbone import NA_QUERY, QUERY_MAX_TOKENS, load_backbone, mean_over_query
from weir.ranker.rerankers.relevance_attention import RelevanceAttention, pad_states, token_states
from weir.ranker.stage import apply_scores
from weir.training.attention import AttnTrainConfig, TrainingInputs
from weir.training.common import TrainingSet, fit_and_write
from weir.core.trec import read_qrels, read_topics
from weir.core.types import InputError, Query, Run


class _States:
    """Token states of every query text and candidate passage, and padded tensors per query's candidates."""

    def __init__(self, model, tokenizer, query_texts, doc_texts: dict[str, str], max_length: int, device: str, log):
        self.device = device
        start = time.perf_counter()
        q_texts = list(dict.fromkeys([*query_texts, NA_QUERY]))
        self.query = dict(zip(q_texts, token_states(model, tokenizer, q_texts, QUERY_MAX_TOKENS + 2, device=device)))
        doc_ids = list(doc_texts)
        states = token_states(model, tokenizer, [doc_texts[d] for d in doc_ids], max_length, device=device)
        self.doc = dict(zip(doc_ids, states))
        self.seconds = time.perf_counter() - start
        log(f"  token states of {len(q_texts)} queries and {len(doc_ids)} passages ({self.seconds:.0f}s)")

    def passages(self, doc_ids: list[str]):
        """Padded states of the passages (built per call: caching them per query would hold
        queries x depth x max_length x hidden floats, 16 GB for SciFact train)."""
        return pad_states([self.doc[d] for d in doc_ids], self.device)

    def query_batch(self, text: str, n: int):
        qx, qv, qw = pad_states([self.query[text]], self.device)
        return qx.expand(n, -1, -1), qv.expand(n, -1), qw.expand(n, -1)


class _Scorer:
    """The trainable part: the relevance layer, the head weights ``w`` and the calibration weights ``v``."""

    def __init__(self, hidden: int, heads: int, temperature: float, device: str):
        import torch

        self.layer = RelevanceAttention(hidden, heads, temperature).to(device)
        self.w = torch.nn.Parameter(torch.full((heads,), 1.0 / heads, device=device))
        self.v = torch.nn.Parameter(torch.zeros(heads, device=device))

    def head_scores(self, states: _States, text: str, doc_ids: list[str]):
        px, pv, pw = states.passages(doc_ids)
        qx, qv, qw = states.query_batch(text, len(doc_ids))
        return mean_over_query(self.layer(qx, qv, px, pv, pw), qw)  # (C, heads)

    def scores(self, states: _States, text: str, doc_ids: list[str], calibrate: bool):
        s = self.head_scores(states, text, doc_ids) @ self.w
        if calibrate:
            s = s - self.head_scores(states, NA_QUERY, doc_ids) @ self.v
        return s

    def snapshot(self) -> dict:
        return {"layer": copy.deepcopy(self.layer.state_dict()), "w": self.w.detach().clone(),
                "v": self.v.detach().clone()}

    def restore(self, snap: dict) -> None:
        import torch

        self.layer.load_state_dict(snap["layer"])
        with torch.no_grad():
            self.w.copy_(snap["w"])
            self.v.copy_(snap["v"])


class LateTraining:
    """One late-interaction training run: the candidates, gains and token states of every query (``--also`` sets
    included) and the optional distillation teacher; fits a scorer on a set of queries (:meth:`fit`) and scores
    queries with it (:meth:`score_run`)."""

    def __init__(self, config: AttnTrainConfig, log: Callable[[str], None]):
        self.config, self.log = config, log
        self.inputs = inputs = TrainingInputs.load(config)
        self.device = inputs.device
        qrels, run = inputs.qrels, inputs.run
        self.cands = {q.id: [h.doc_id for h in run.get(q.id, [])] for q in inputs.queries}
        self.by_id = {q.id: q for q in inputs.queries}
        self.gains = {q.id: np.asarray([max(0, qrels[q.id].get(d, 0)) for d in self.cands[q.id]], dtype=np.float32)
                      for q in inputs.queries}
        texts = dict(inputs.texts)
        self.extra = _extra_sets(config, self.cands, texts, self.by_id, self.gains, log)  # always fitted on
        tokenizer, model = load_backbone(config.base_model, self.device, attentions=False)
        model.eval()
        self.hidden, self.n_layers = model.config.hidden_size, model.config.num_hidden_layers
        self.states = _States(model, tokenizer, [q.text for q in self.by_id.values()], texts, config.max_length,
                              self.device, log)
        self.teacher = None
        if config.distill > 0:
            if self.extra:
                raise InputError("--distill takes the main set's stored vectors: not with --also")
            self.teacher = inputs.bi_encoder_scores(config.base_model)
        self.validation = 0.2 if config.validation is None else config.validation

    def score_run(self, scorer: _Scorer, keep) -> Run:
        import torch

        out: dict[str, list[float]] = {}
        with torch.no_grad():
            for qid in sorted(keep):
                q = self.by_id[qid]
                out[qid] = scorer.scores(self.states, q.text, self.cands[qid], self.config.calibrate).float().cpu().tolist()
        qs = [self.by_id[q] for q in sorted(keep)]
        return apply_scores(qs, Run({q.id: self.inputs.run.get(q.id, []) for q in qs}), self.config.depth, out,
                            "attention")

    def ndcg(self, scorer: _Scorer, keep) -> float:
        return evaluate(self.score_run(scorer, keep), {q: self.inputs.qrels.get(q, {}) for q in keep},
                        ["nDCG@10"])["nDCG@10"]

    def loss(self, scorer: _Scorer, qid: str):
        """ListNet over one query's candidates (plus the distillation term)."""
        import torch

        config, device = self.config, self.device
        s = scorer.scores(self.states, self.by_id[qid].text, self.cands[qid], config.calibrate).float()
        g = torch.tensor(2.0 ** self.gains[qid] - 1.0, device=device)
        loss = -(g / g.sum() * torch.log_softmax(s, 0)).sum()
        if self.teacher is not None:
            t = torch.tensor([self.teacher[(self.by_id[qid].text, d)] for d in self.cands[qid]], device=device)
            loss = loss + config.distill * torch.nn.functional.kl_div(
                torch.log_softmax(s, 0), torch.log_softmax(t / config.distill_temperature, 0),
                log_target=True, reduction="sum")
        return loss

    def fit(self, keep: set[str]) -> tuple[_Scorer, dict]:
        """Train on ``keep`` (a ``validation`` share held out to choose the checkpoint) plus the ``--also`` sets."""
        import torch

        config, log = self.config, self.log
        order = sorted(keep)
        random.Random(config.seed).shuffle(order)
        n_val = round(len(order) * self.validation) if self.validation > 0 else 0
        val_q, fit_q = set(order[:n_val]), set(order[n_val:]) | self.extra
        usable = sorted(q for q in fit_q if self.gains[q].max() > 0)
        if not usable:
            raise InputError("no training query has a relevant candidate")
        scorer = _Scorer(self.hidden, config.heads, config.temperature, self.device)
        opt = torch.optim.AdamW([{"params": list(scorer.layer.parameters()), "lr": config.lr},
                                 {"params": [scorer.w, scorer.v], "lr": config.head_lr}])
        rng = random.Random(config.seed)
        history, best = [], None
        start, losses = time.perf_counter(), []

        def checkpoint(step: int):
            nonlocal best
            if not val_q:
                return
            value = self.ndcg(scorer, val_q)
            history.append([step, round(value, 4)])
            if best is None or value > best[0]:
                best = (value, step, scorer.snapshot())

        checkpoint(0)
        for step in range(1, config.steps + 1):
            loss = self.loss(scorer, rng.choice(usable))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if step % config.eval_every == 0 or step == config.steps:
                checkpoint(step)
                log(f"  step {step}/{config.steps}: loss {np.mean(losses[-config.eval_every:]):.4f}"
                    + (f", validation nDCG@10 {history[-1][1]:.4f}" if history else "")
                    + f" ({time.perf_counter() - start:.0f}s)")
        if best is not None:
            scorer.restore(best[2])
            log(f"  kept step {best[1]} (validation nDCG@10 {best[0]:.4f})")
        info = {"train_queries": len(fit_q), "of_them_from_also": len(self.extra), "validation_queries": len(val_q),
                "train_seconds": round(time.perf_counter() - start, 1), "validation_history": history,
                "chosen_step": best[1] if best else config.steps}
        return scorer, info

    def fit_and_score(self, train_q: set[str], test: set[str]) -> tuple[Run, dict]:
        """One cross-validation fold."""
        scorer, info = self.fit(train_q)
        return self.score_run(scorer, test), info


def train_late(config: AttnTrainConfig, log: Callable[[str], None]) -> dict:
    """Train (and cross-validate) a late-interaction attention model; write its directory; return the card."""
    training = LateTraining(config, log)
    inputs = training.inputs
    card = inputs.card(config, interaction="late", state_seconds=round(training.states.seconds, 1))

    def fit_all(qids: set[str], out: Path) -> dict:
        scorer, info = training.fit(qids)
        save(out, scorer, config, training.n_layers)
        return info

    return fit_and_write("attention", config, card, {q.id for q in inputs.queries}, training.fit_and_score, fit_all,
                         first_run=inputs.run, qrels=inputs.qrels, measures=["nDCG@10", "RR@10", "AP"], log=log)


def _extra_sets(config, cands, texts, by_id, gains, log) -> set[str]:
    """Add the ``--also`` training sets (``index=DIR,topics=FILE,qrels=FILE,candidates=RUN[,depth=N]``) to the
    candidates, texts, queries and gains under prefixed ids (``also1:...``); they are fitted on in every fold and
    never used for validation or scoring. Returns their query ids."""
    from weir.indexer.index_dir import Index

    ids: set[str] = set()
    for j, text in enumerate(config.also or [], start=1):
        ds = TrainingSet.of(text).checked("weir train attention --also", needs=("index", "candidates"),
                                              takes=("depth",))
        qrels = read_qrels(ds.qrels)
        queries = [q for q in read_topics(ds.topics) if q.id in qrels]
        run = Run.read_trec(ds.candidates).truncated(ds.depth)
        docs = Index(ds.index).documents([h.doc_id for q in queries for h in run.get(q.id, [])])
        for q in queries:
            key = f"also{j}:{q.id}"
            hits = [h.doc_id for h in run.get(q.id, [])[:ds.depth]]
            cands[key] = [f"also{j}:{d}" for d in hits]
            for d in hits:
                texts[f"also{j}:{d}"] = docs[d].contents if d in docs else ""
            by_id[key] = Query(key, q.text)
            gains[key] = np.asarray([max(0, qrels[q.id].get(d, 0)) for d in hits], dtype=np.float32)
            ids.add(key)
        log(f"  also: {len(queries)} queries of {ds.topics} (candidates {ds.candidates}, top {ds.depth})")
    return ids


def save(out: Path, scorer: _Scorer, config: AttnTrainConfig, n_layers: int) -> None:
    """relevance.pt (the layer) and heads.json (what AttentionModel reads). Calibration weights ``v``
    are saved as per-head weights of the content-free pass: the reranker subtracts ``n @ v`` via ``weights``."""
    import torch

    torch.save(scorer.layer.state_dict(), out / "relevance.pt")
    w = scorer.w.detach().cpu().numpy().astype(float)
    v = scorer.v.detach().cpu().numpy().astype(float)
    settings = {"kind": "attention", "interaction": "late", "base_model": config.base_model,
                "max_length": config.max_length, "relevance_heads": config.heads, "temperature": config.temperature,
                "heads": [[n_layers, h] for h in range(config.heads)], "weights": w.tolist(),
                "calibration_weights": v.tolist(), "bias": 0.0, "calibrate": bool(config.calibrate),
                "idf": bool(config.idf)}
    (out / "heads.json").write_text(json.dumps(settings, indent=1) + "\n")
