"""`train`: the settings checked, the sources read (their term vectors from the cache), the members trained, the head
written with its model card (what it was trained on, how, its validation and ``deepimpact+bm25`` weight)."""

from __future__ import annotations

import random
import time
from dataclasses import asdict

import numpy as np

from weir.indexer.weighting.backbone import Backbone
from weir.indexer.weighting.model import FEATURES, KINDS, SHAPES, save
from weir.training.common import seeds_of_members
from weir.training.term_weighting.config import DRAWS, VALIDATE_BY, TrainConfig
from weir.training.term_weighting.data import WeightingData
from weir.training.term_weighting.loop import Training, fusion_weight, train_deepct_recall, train_ranking
from weir.training.term_weighting.members import join_members, member_card
from weir.core.inference import exact_backend
from weir.core.provenance import model_card, sha256_file
from weir.core.runtime import select_device
from weir.core.types import InputError


HEADS = {("deepct", "free"): "Linear(dim, 1) on the first word piece of each term's first word",
         ("deepimpact", "free"): "Linear(dim, dim) -> ReLU -> Linear(dim, 1) -> ReLU on the first word piece of each "
                                 "unique term's first word",
         ("deepct", "bm25"): "tf' = round(10 tf exp(ln 2 tanh(o))), o = Linear(dim, dim) -> ReLU -> Linear(dim, 1) "
                             "(last layer starts at 0); searched with BM25 k1 9, b 0.4",
         ("deepimpact", "bm25"): "impact = BM25(tf, idf, length of the collection indexed; k1 0.9, b 0.4) x "
                                 "exp(ln 2 tanh(o)), o = Linear(dim, dim) -> ReLU -> Linear(dim, 1) (last layer "
                                 "starts at 0)"}


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
    # fp32 whatever the inference default: the shipped heads were trained on fp32 term vectors, and a model trained
    # again from its recipe must be the model shipped
    backbone = Backbone(config.base_model, device=config.device, max_length=config.max_length,
                        backend=exact_backend(select_device(config.device)), input=config.input)
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
            train_deepct_recall(t)
        else:
            train_ranking(t)
        t.head.load_state_dict(t.best_state)
        t.head.eval()
        members.append(t)
    t = members[0] if len(members) == 1 else join_members(config, members, backbone.dim, log)
    card = _card(config, sources, t, backbone, read - start, time.perf_counter() - read)
    if config.kind == "deepimpact":
        card["fusion"] = fusion_weight(t)
        log(f"deepimpact+bm25 on validation: weights {card['fusion']['weights']} nDCG@10 "
            f"{card['fusion']['validation_nDCG@10']:.4f}")
    if len(members) > 1:
        card["members"] = len(members)
        card["member_heads"] = [member_card(config, mt) for mt in members]
        if t.shrinkage is not None:
            card["shrink"] = t.shrinkage
    save(config.out, t.head, card)
    return card


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
