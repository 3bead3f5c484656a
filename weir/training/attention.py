"""`weir train attention` and `weir train crossencoder`: the settings and inputs both attention trainers start from.

- ``--interaction late`` (the default of `weir train attention`, :mod:`.attention_late`): the relevance attention
  layer over the frozen backbone's per-segment token states, trained listwise, the checkpoint chosen on held-out
  training queries;
- ``--interaction joint`` (:mod:`.attention_joint`), and the cross-encoder baseline: the backbone's top layers
  fine-tuned on whole (query, passage) inputs; attention heads then selected QRHead-style.

Candidates come from a TREC run (top ``depth``) with labels from the qrels; ``folds`` writes a cross-validated run
(each fold scored by a model trained on the other folds only), then the saved model trains on every query.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from weir.core.provenance import model_card, sha256_file
from weir.core.types import InputError, Query, Run


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
    steps: int | None = None  # None: 200 late, 120 joint
    group: int = 8
    lr: float | None = None  # None: 3e-3 late, 5e-5 joint
    head_lr: float = 1e-2
    entropy: float = 0.0
    select: int = 8
    idf: bool = False
    calibrate: bool = True
    folds: int = 0
    cv_run: str | None = None
    min_rel: int = 1  # the lowest grade counted relevant (2 for TREC DL)
    seed: int = 13
    select_queries: int = 10
    cv_only: bool = False
    cache: str | None = None
    validation: float | None = None  # None: 0.2 late (the checkpoint), 0.0 joint
    distill: float = 0.0
    distill_temperature: float = 0.05
    device: str | None = None
    interaction: str | None = None  # None: late for attention, joint for crossencoder; joint: one input through every layer; late: weir.ranker.rerankers.relevance_attention
    heads: int = 1  # late: heads of the relevance attention layer
    temperature: float = 0.05  # late: the similarity initialization's softmax temperature
    eval_every: int = 25  # late: steps between validation checkpoints
    also: list = field(default_factory=list)  # late: further TrainingSets (or their key=value text), always fitted on
    command: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.kind not in ("attention", "crossencoder"):
            raise InputError(f"unknown model kind {self.kind!r}")
        if self.interaction is None:
            self.interaction = "late" if self.kind == "attention" else "joint"
        late = self.interaction == "late"
        for name, if_late, if_joint in (("steps", 200, 120), ("lr", 3e-3, 5e-5), ("validation", 0.2, 0.0)):
            if getattr(self, name) is None:
                setattr(self, name, if_late if late else if_joint)
        if self.interaction not in ("joint", "late"):
            raise InputError(f"unknown interaction {self.interaction!r} (joint or late)")
        if self.interaction == "late" and self.kind != "attention":
            raise InputError("--interaction late is for the attention reranker only")


@dataclass
class TrainingInputs:
    """What both trainers start from: the device (CPU threads set), the index, the qrels, the judged training
    queries, the candidate run (top ``depth``) and the candidates' texts (empty for a missing document)."""

    device: str
    index: object
    qrels: dict[str, dict[str, int]]
    queries: list[Query]
    run: Run
    texts: dict[str, str]

    @classmethod
    def load(cls, config: AttnTrainConfig) -> TrainingInputs:
        """Seed torch, then read everything ``config`` names."""
        import torch

        from weir.indexer.index_dir import Index
        from weir.core.runtime import prepare_device
        from weir.core.trec import read_qrels, read_topics

        torch.manual_seed(config.seed)
        device = prepare_device(config.device)
        index = Index(config.index)
        qrels = read_qrels(config.qrels)
        queries = [q for q in read_topics(config.topics) if q.id in qrels]
        if not queries:
            raise InputError(f"{config.topics}: no topic has qrels in {config.qrels}")
        run = Run.read_trec(config.candidates).truncated(config.depth)
        doc_ids = [h.doc_id for q in queries for h in run.get(q.id, [])]
        docs = index.documents(doc_ids)
        texts = {d: (docs[d].contents if d in docs else "") for d in doc_ids}
        return cls(device, index, qrels, queries, run, texts)

    def card(self, config: AttnTrainConfig, **fields) -> dict:
        """The model card's header for a model trained on these inputs."""
        return model_card(config.kind, base_model=config.base_model, command=config.command, dists=("torch",),
                          training_data={"index": config.index, "topics": config.topics, "qrels": config.qrels,
                                         "candidates": config.candidates, "topics_sha256": sha256_file(config.topics),
                                         "qrels_sha256": sha256_file(config.qrels), "queries": len(self.queries)},
                          parameters={k: v for k, v in config.__dict__.items() if k != "command"},
                          device=self.device, **fields)

    def bi_encoder_scores(self, model: str) -> dict[tuple[str, str], float]:
        """(query text, doc id) -> cosine of the backbone's own bi-encoder embeddings (the index's stored vectors)."""
        from weir.indexer.dense import open_dense

        dense = open_dense(self.index)
        qv = dense.query_encoder(model, self.device).encode_queries([q.text for q in self.queries])
        out = {}
        for q, v in zip(self.queries, qv):
            hits = self.run.get(q.id, [])
            for h, row in zip(hits, dense.rows([h.doc_id for h in hits])):
                if row < 0:
                    raise InputError(f"{h.doc_id}: no stored vector in {dense.path} (distillation needs every "
                                     f"candidate)")
                out[(q.text, h.doc_id)] = float(np.asarray(dense.vectors[row], dtype=np.float32) @ v)
        return out
