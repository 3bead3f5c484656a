"""The training-side steps of the transfer protocol (research/transfer.py), no held-out figure: ``epochs`` (the epoch
each validation rule keeps), ``members`` (each member of a head as a head of its own) and ``shrinkage`` (the share of
the members' correction a shrunk head keeps on each collection's terms)."""

from __future__ import annotations

import json
from pathlib import Path

from transfer_common import COLLECTIONS, SOURCES


def _epoch_rules(card: dict) -> dict:
    """The epoch each validation rule keeps, from a head's recorded history (judged sets only): ``queries`` (the mean
    over validation queries, as recorded), ``sets`` (every set alike) and ``worst`` (the best smallest relative change
    over the sets against the untrained head, epoch 0: an epoch is kept only if it raises every set). Ties go to the
    earlier epoch, as in training."""
    history = card["metrics"]["history"]
    judged = [d["collection"] for d in card["training_data"] if "qrels" in d]
    base = {n: history[0]["sources"][n]["nDCG@10"] for n in judged}

    def change(h: dict) -> dict:
        return {n: h["sources"][n]["nDCG@10"] / base[n] - 1 for n in judged}

    rules = {"queries": lambda h: h["nDCG@10"],
             "sets": lambda h: sum(h["sources"][n]["nDCG@10"] for n in judged) / len(judged),
             "worst": lambda h: min(change(h).values())}
    kept = {r: max(history, key=lambda h, f=f: (round(f(h), 10), -h["epoch"]))["epoch"] for r, f in rules.items()}
    return {"kept": kept, "changes": [change(h) for h in history],
            "validation_queries": {d["collection"]: d["validation_queries"] for d in card["training_data"]}}


def members(args) -> None:
    """Each member of the variant's leave-one-out DeepImpact heads (`weir train --set members=N`) as a head of its own,
    under ``loco-TAG.mM``: its weights, and the card with its own epoch, validation and ``deepimpact+bm25`` weight, so
    that ``fusion-loco --tag TAG.mM`` measures it alone."""
    import torch

    for held in args.collections:
        head = args.work / f"loco-{args.tag}" / held / "deepimpact"
        card = json.loads((head / "card.json").read_text())
        state = torch.load(head / "head.pt", map_location="cpu", weights_only=True)
        for m, member in enumerate(card.get("member_heads", [])):
            out = args.work / f"loco-{args.tag}.m{m}" / held / "deepimpact"
            if (out / "card.json").is_file():
                continue
            out.mkdir(parents=True, exist_ok=True)
            prefix = f"members.{m}."
            torch.save({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}, out / "head.pt")
            own = {k: v for k, v in card.items() if k not in ("members", "member_heads", "head_sha256")}
            own.update({"fusion": member["fusion"], "metrics": {"validation": member["validation"],
                                                                 "history": member["history"]},
                        "member_of": str(head), "member": m, "seed": member["seed"]})
            (out / "card.json").write_text(json.dumps(own, indent=1))
            print(f"{held}: member {m} (seed {member['seed']}) -> {out}", flush=True)


def shrinkage(args) -> None:
    """Unlabelled text only: for each leave-one-out DeepImpact head of the variant shrunk by its members'
    disagreement (`weir train --set members=N --set shrink=true`), the mean share of the members' correction it keeps
    (tau2 / (tau2 + v)) and the mean |log-factor| before and after, over a seeded sample of every collection's term
    rows: does the collection left out make its members disagree more than the ones they trained on?"""
    import numpy as np
    import torch

    from weir.indexer.collections import Collection
    from weir.indexer.weighting.cache import cached_term_vectors
    from weir.indexer.weighting.members import coefficient
    from weir.indexer.weighting.backbone import Backbone
    from weir.indexer.weighting.model import TermWeighter

    backbone = Backbone()
    rows_of = {}
    for name in SOURCES:  # the same sample of each collection's rows for every head
        tv = cached_term_vectors(backbone, list(Collection.open(COLLECTIONS / name).corpus(skip_empty=True)))
        rng = np.random.default_rng(13)
        take = np.sort(rng.choice(len(tv.data), min(len(tv.data), 50_000), replace=False))
        rows_of[name] = torch.from_numpy(np.asarray(tv.data[take], dtype=np.float32))
    for held in args.collections:
        head = args.work / f"loco-{args.tag}" / held / "deepimpact"
        if not (head / "card.json").is_file():
            continue
        model = TermWeighter(head, backbone=backbone)
        if model.shrink is None:
            print(f"{held}: {head} is not shrunk (--shrink)", flush=True)
            continue
        cells = []
        for name, x in rows_of.items():
            with torch.inference_mode():
                logs = model.head.log_factors(x)
                kept = coefficient(logs, model.shrink)
            mean = logs.mean(0)
            cells.append(f"{name}{' (left out)' if name == held else ''} kept {kept.mean():.3f}, |log f| "
                         f"{mean.abs().mean():.4f} -> {(mean * kept).abs().mean():.4f}")
        print(f"{held} left out (tau2 {model.shrink:.5f}): " + "; ".join(cells), flush=True)


def epochs(args) -> None:
    """Training side only: for each leave-one-out DeepImpact head of the variant, and the head under --out-dir, the
    judged sets' validation nDCG@10 of every epoch against the untrained head's, and the epoch each rule keeps."""
    heads = [(f"{held} left out", args.work / f"loco-{args.tag}" / held / "deepimpact") for held in args.collections]
    heads.append(("trained on all", Path(args.out_dir) / "deepimpact"))
    for label, head in heads:
        if not (head / "card.json").is_file():
            continue
        rules = _epoch_rules(json.loads((head / "card.json").read_text()))
        sizes = ", ".join(f"{n} {v}" for n, v in rules["validation_queries"].items())
        print(f"{label} ({head}); validation queries: {sizes}")
        for e, ch in enumerate(rules["changes"]):
            print(f"  epoch {e}: " + ", ".join(f"{n} {v:+.1%}" for n, v in ch.items())
                  + f"; smallest {min(ch.values()):+.1%}")
        print("  kept: " + ", ".join(f"{r} {e}" for r, e in rules["kept"].items()), flush=True)
