"""The transfer protocol of the learned term weights: every head judged on a collection it never saw.

Training sources, one per collection of ../shared/collections (its training split where it has one, else its
judgments):

| collection | trains on | evaluated on |
|---|---|---|
| beir-scifact | queries.train / qrels.train (809) | queries / qrels (test, 300) |
| beir-arguana | the synthetic queries.train-genq (25,844; 3,000 sampled) | queries / qrels (1,406), identical ids removed |
| msmarco-passage-trec-dl-pool | DL 2019 (43, grade >= 2) | the same DL 2019 topics, when held out |
| cacm, cranfield, adi | their topics and qrels | the same, when held out |

Commands (each step a `weir` process; everything under --work, reused when there):

- ``cache``: the backbone's term vectors of every collection, computed once into ``$WEIR_CACHE``;
- ``loco``: for each collection X, DeepCT and DeepImpact heads trained on every other source, X indexed with them
  (bm25, deepct, deepimpact), and `weir experiment` on X's evaluation topics (bm25, deepct, deepimpact,
  deepimpact+bm25; paired t-test against bm25, Holm); ``--shape`` chooses the head shape, ``--tag`` names the
  variant;
- ``self``: for the collections given, the leave-one-out sources plus ``--self-supervised X`` (pseudo-queries from X),
  evaluated the same way, beside the leave-one-out head of X (``--kinds``: the heads adapted, the others stay the
  leave-one-out heads: the variant's own or those of ``--reuse``, trained when ``--reuse`` names them, left out of the
  experiment when neither has them);
- ``final``: heads trained on every source (the shipped defaults, ``--out-dir``), and SciFact test with them;
- ``table``: the tables of everything run so far (Markdown);
- ``ltr-loco``: for each collection X, an LTR model trained on the other collections' hybrid top-100 (their
  training judgments, as above; indexes with bm25 and dense under --indexes), and `weir experiment` of ``hybrid``
  against ``hybrid>>ltr`` on X; ``--ltr-args`` are the `weir train ltr` options of the variant (``--tag`` names it);
- ``ltr-final``: that LTR trained on every collection (the shipped default, ``--out-dir``/ltr), and SciFact test;
- ``ltr-sweep``: the ``ltr-loco`` protocol in one process for several recipes (``--variant``), every collection's
  features computed once (pickled under --work): to compare recipes before confirming one with ``ltr-loco``;
- ``fusion-loco``: the ``deepimpact+bm25`` weight chosen by leaving one collection out. For each collection X, its
  leave-one-out DeepImpact head (as ``loco`` trains it; X indexed with bm25 and that head) scores X's evaluation
  topics fused with BM25 at every weight 0, 0.05, ..., 1 on ``deepimpact`` (min-max, as served). The weight for X is
  the one of the best mean relative change of nDCG@10 against BM25 over the *other* collections (each scored by its
  own leave-one-out head), ties to the weight nearest 0.5; `weir experiment` then measures X at that weight beside the
  weight of its head's card (chosen on the training sets' validation queries). The weight best over all six collections
  is printed too: the candidate for a head trained on all six (stop 25 kept the card's: ``models/RESULTS.md``).

- ``epochs``: training side only, no held-out figure: each leave-one-out DeepImpact head's judged validation sets,
  epoch by epoch against the untrained head, and the epoch each rule would keep (``queries``, the shipped one;
  ``sets``; ``worst``: only an epoch that raises every set), for the variant's heads and the one under --out-dir.

- ``shrinkage``: unlabelled text only: for each leave-one-out head shrunk by its members' disagreement (``--train-args
  "--members 3 --shrink"``), the share of the correction kept on each collection's terms, the one left out beside the
  ones it trained on.

- ``members``: each member of the variant's leave-one-out heads of several members (``--train-args "--members
  N"``) written as a head of its own (``loco-TAG.mM``), for ``fusion-loco --tag TAG.mM`` to measure it alone.

``--self-supervise-training`` adds, to every head, pseudo-queries of each of its training collections (``weir train
--self-supervised C`` for every source C it trains on; the collection left out still contributes nothing): query
forms no judged set has, for no judgment (stop 26, ``models/RESULTS.md``).

A variant may retrain one kind only: ``--kinds deepimpact --reuse bm25`` trains the DeepImpact heads (with
``--train-args``, options of `weir train`) and takes the DeepCT heads of the variant ``bm25``.

Usage: python scripts/transfer.py cache|loco|self|final|table [--work WORK] [--shape bm25] [--tag bm25]
       [--collections a,b] [--epochs 10] [--kinds deepimpact --reuse TAG] [--train-args "--draws sources"]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's packages, however the script is started

from weir.training.fusion import WEIGHT_GRID  # the weights `weir train deepimpact` chooses among

COLLECTIONS = Path(os.environ.get("WEIR_COLLECTIONS", ROOT.parent / "shared" / "collections"))
SOURCES = {  # collection -> (training topics, training qrels, grade counted relevant, evaluation options)
    "beir-scifact": ("queries.train.tsv", "qrels.train.txt", 1, []),
    "beir-arguana": ("queries.train-genq.tsv", "qrels.train-genq.txt", 1, ["--remove-identical"]),
    "msmarco-passage-trec-dl-pool": ("queries.tsv", "qrels.txt", 2, ["--binary-min-rel", "2"]),
    "cacm": ("queries.tsv", "qrels.txt", 1, []),
    "cranfield": ("queries.tsv", "qrels.txt", 1, []),
    "adi": ("queries.tsv", "qrels.txt", 1, []),
}
PIPELINES = "bm25,deepct,deepimpact,deepimpact+bm25"
WEIR = [sys.executable, "-m", "weir.cli"]


def run(cmd: list[str], log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    print("$ weir " + " ".join(cmd[3:]), flush=True)
    with open(log, "a", encoding="utf-8") as f:
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)


def source(name: str) -> str:
    topics, qrels, min_rel, _ = SOURCES[name]
    c = COLLECTIONS / name
    return f"{c}:{c / topics}:{c / qrels}:1:{min_rel}"


def train(kind: str, out: Path, names: list[str], args, extra: list[str] = (), log_dir: Path | None = None) -> Path:
    """A head trained on these sources (kept when already there); its log beside it, or under ``log_dir``."""
    if (out / "card.json").is_file():
        return out
    cmd = WEIR + ["train", kind, "--out", str(out), "--shape", args.shape, "--epochs", str(args.epochs)]
    for n in names:
        cmd += ["--train", source(n)]
        if args.self_supervise_training:  # the training collections' own pseudo-queries, never the held-out one's
            cmd += ["--self-supervised", str(COLLECTIONS / n)]
    run(cmd + list(extra), (log_dir or out.parent) / f"train-{kind}.log")
    return out


def evaluate(name: str, models: dict[str, Path], work: Path) -> dict:
    """Index ``name`` with these heads (deepct, deepimpact, or both) and run the experiment of the pipelines that use
    them; the experiment's record."""
    index, exp = work / "index", work / "experiment"
    c = COLLECTIONS / name
    kinds = [k for k in ("deepct", "deepimpact") if k in models]
    if not (index / "manifest.json").is_file():
        heads = [a for k in kinds for a in (f"--{k}-model", str(models[k]))]
        run(WEIR + ["index", "build", "--collection", str(c), "--out", str(index), "--with", ",".join(["bm25", *kinds]),
                    *heads, "--overwrite", "--skip-empty"], work / "build.log")
    pipelines = ",".join(p for p in PIPELINES.split(",") if p.split("+")[0] in ("bm25", *kinds))
    if not (exp / "results.json").is_file():
        run(WEIR + ["experiment", "--index", str(index), "--topics", str(c / "queries.tsv"), "--qrels",
                    str(c / "qrels.txt"), "--pipelines", pipelines, "--measures", "nDCG@10,R@100", "--out", str(exp)]
            + SOURCES[name][3], work / "experiment.log")
    return json.loads((exp / "results.json").read_text())


LTR_QUERIES = 1000  # training queries per collection at most (ArguAna's synthetic set is 25,844)


def ltr_set(name: str, args) -> str:
    topics, qrels, _, _ = SOURCES[name]
    c = COLLECTIONS / name
    return (f"index={args.indexes / name},topics={c / topics},qrels={c / qrels},first_stage=hybrid,depth=100,"
            f"max_queries={LTR_QUERIES}")


def ltr_train(out: Path, names: list[str], args) -> Path:
    if (out / "model.txt").is_file():
        return out
    first, *rest = names
    topics, qrels, _, _ = SOURCES[first]
    c = COLLECTIONS / first
    cmd = WEIR + ["train", "ltr", "--index", str(args.indexes / first), "--topics", str(c / topics), "--qrels",
                  str(c / qrels), "--first-stage", "hybrid", "--max-queries", str(LTR_QUERIES), "--out", str(out)]
    for n in rest:
        cmd += ["--also", ltr_set(n, args)]
    run(cmd + args.ltr_args.split(), out.parent / "train-ltr.log")
    return out


def ltr_evaluate(name: str, model: Path, work: Path, args) -> dict:
    exp = work / "experiment"
    c = COLLECTIONS / name
    if not (exp / "results.json").is_file():
        run(WEIR + ["experiment", "--index", str(args.indexes / name), "--topics", str(c / "queries.tsv"), "--qrels",
                    str(c / "qrels.txt"), "--pipelines", f"hybrid,hybrid>>ltr[ltr_model={model}]",
                    "--measures", "nDCG@10,R@100", "--out", str(exp)] + SOURCES[name][3], work / "experiment.log")
    return json.loads((exp / "results.json").read_text())


def ltr_loco(args) -> None:
    for held in args.collections:
        work = args.work / f"ltr-{args.tag}" / held
        model = ltr_train(work / "ltr", [n for n in SOURCES if n != held], args)
        ltr_evaluate(held, model, work, args)


def ltr_final(args) -> None:
    model = ltr_train(Path(args.out_dir) / "ltr", list(SOURCES), args)
    ltr_evaluate("beir-scifact", model, args.work / f"ltr-final-{args.tag}" / "beir-scifact", args)


RECIPE = {"init_from": "first_score_norm", "monotone": True,  # the shipped LTR recipe; a variant overrides it
          "params": {"num_leaves": 7, "min_data_in_leaf": 50, "lambda_l2": 10}}


def _examples(name: str, split: str, args):
    """The LTR examples of one collection's ``train`` (at most LTR_QUERIES) or ``test`` queries, hybrid top-100, as
    `weir train ltr` computes them; pickled under --work for this very index (named by its manifest's checksum, so a
    rebuilt index never meets the features of the one before), reused when there."""
    import hashlib
    import pickle

    from weir.training.common import TrainingSet
    from weir.training.ltr import load_examples

    index = args.indexes / name
    built = hashlib.sha256((index / "manifest.json").read_bytes()).hexdigest()[:12]
    path = args.work / "ltr-features" / f"{name}.{split}.{built}.pkl"
    if path.is_file():
        return pickle.loads(path.read_bytes())
    topics, qrels = SOURCES[name][:2] if split == "train" else ("queries.tsv", "qrels.txt")
    c = COLLECTIONS / name
    ds = TrainingSet(index=str(index), topics=str(c / topics), qrels=str(c / qrels), first_stage="hybrid",
                     depth=100, max_queries=LTR_QUERIES if split == "train" else None)
    ex = load_examples(ds, log=lambda m: print(m, flush=True))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(ex))
    return ex


def ltr_sweep(args) -> None:
    """In one process, features computed once per collection: for each variant (``--variant TAG=JSON``, TrainConfig
    fields over :data:`RECIPE`) and each collection X, the model of the other collections' training queries reranks
    X's hybrid top-100 of its evaluation topics; nDCG@10 of hybrid and of hybrid>>ltr, paired t-test; then SciFact
    test by the model of every collection (as ``ltr-final``). The same models and scores as `ltr-loco` (`weir train
    ltr` + `weir experiment`), to compare recipes cheaply before confirming one that way. Rows go to
    --work/ltr-sweep.jsonl."""
    from weir.evaluation.measures import evaluate
    from weir.evaluation.significance import paired, paired_test
    from weir.ranker.rerankers.ltr_features import FEATURES
    from weir.ranker.stage import apply_scores
    from weir.training.ltr import TrainConfig, fit_on, init_column, rounds_note, score_boosters
    from weir.core.trec import read_qrels

    train = {n: _examples(n, "train", args) for n in args.collections}
    test = {n: _examples(n, "test", args) for n in args.collections}
    out = args.work / "ltr-sweep.jsonl"
    for variant in args.variant:
        tag, _, spec = variant.partition("=")
        fields = {**RECIPE, **json.loads(spec or "{}")}
        fields["params"] = {**RECIPE["params"], **fields.get("params", {})}
        # each collection left out; then SciFact test by the model of every collection (the shipped default's recipe)
        for held, trained_on in [(n, [m for m in args.collections if m != n]) for n in args.collections] + (
                [("beir-scifact", list(args.collections))] if "beir-scifact" in args.collections else []):
            config = TrainConfig(sets=[], out="", rounds=300, **fields)
            data = [train[n] for n in trained_on]
            boosters, info = fit_on(data, set(data[0].qids), config, FEATURES)
            ex = test[held]
            keep = set(ex.qids)
            scores = score_boosters(boosters, ex, keep, init_column(config, FEATURES), rounds=info.get("rounds"))
            queries = [q for q in ex.queries if q.id in keep]
            ltr = apply_scores(queries, ex.run, 100, scores, "ltr")
            hybrid = ex.run
            if "--remove-identical" in SOURCES[held][3]:
                ltr, hybrid = ltr.without_identical_ids(), hybrid.without_identical_ids()
            qrels = read_qrels(COLLECTIONS / held / "qrels.txt")
            (h_mean, h_q), (l_mean, l_q) = (evaluate(r, qrels, ["nDCG@10"], min_rel=SOURCES[held][2],
                                                     per_query=True) for r in (hybrid, ltr))
            p = paired_test(*paired(l_q["nDCG@10"], h_q["nDCG@10"])[1:])[1]
            seen = held in trained_on
            row = {"variant": tag, "held_out": held, "trained_on": trained_on, "in_training": seen,
                   "hybrid": round(h_mean["nDCG@10"], 4), "ltr": round(l_mean["nDCG@10"], 4), "p": round(p, 3),
                   "rounds": info.get("rounds"), "how": rounds_note(info), "fields": fields}
            print(f"{tag:>12} {held + (' (trained on)' if seen else ''):>42}: hybrid {row['hybrid']:.4f} "
                  f"ltr {row['ltr']:.4f} ({row['ltr'] - row['hybrid']:+.4f}, p {p:.3f}); {row['how']}", flush=True)
            with open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")


def cache(args) -> None:
    from weir.indexer.collections import Collection
    from weir.indexer.weighting.cache import cached_term_vectors
    from weir.indexer.weighting.model import Backbone

    backbone = Backbone()
    for name in args.collections:
        docs = list(Collection.open(COLLECTIONS / name).corpus(skip_empty=True))  # as training and indexing read it
        cached_term_vectors(backbone, docs, desc=f"{name} term vectors")


def loco_head(held: str, kind: str, args) -> Path:
    """The leave-one-out head of this kind for ``held``: the variant's own, or the one it took from ``--reuse``."""
    own = args.work / f"loco-{args.tag}" / held / kind
    return own if (own / "card.json").is_file() or not args.reuse else args.work / f"loco-{args.reuse}" / held / kind


def loco(args) -> None:
    """With ``--reuse``, only the kinds of ``--kinds`` are trained (with ``--train-args``); the others are the heads
    of the variant ``--reuse`` for the same collection."""
    for held in args.collections:
        work = args.work / f"loco-{args.tag}" / held
        others = [n for n in SOURCES if n != held]
        models = {k: train(k, work / k, others, args, args.train_args.split()) if k in args.kinds or not args.reuse
                  else train(k, loco_head(held, k, args), others, args)
                  for k in ("deepct", "deepimpact")}
        evaluate(held, models, work)


def self_supervised(args) -> None:
    for held in args.collections:
        work = args.work / f"self-{args.tag}" / held
        others = [n for n in SOURCES if n != held]
        extra = ["--self-supervised", str(COLLECTIONS / held)]
        models = {k: train(k, work / k, others, args, args.train_args.split() + extra) if k in args.kinds
                  else train(k, loco_head(held, k, args), others, args)  # not adapted: the leave-one-out head
                  for k in ("deepct", "deepimpact")
                  if k in args.kinds or args.reuse or (loco_head(held, k, args) / "card.json").is_file()}
        evaluate(held, models, work)


def final(args) -> None:
    out = Path(args.out_dir)
    work = args.work / f"final-{args.tag}"  # the logs stay out of the model directories' parent (models/)
    models = {k: train(k, out / k, list(SOURCES), args, args.train_args.split(), log_dir=work)
              for k in ("deepct", "deepimpact")}
    evaluate("beir-scifact", models, work / "beir-scifact")


def _fusion_grid(held: str, index: Path, work: Path) -> dict:
    """nDCG@10 of BM25 and of deepimpact+bm25 at every weight of WEIGHT_GRID on ``held``'s evaluation topics, over
    ``index`` (the runs of the served stages, fused as served); cached as ``work/fusion-grid.json``."""
    path = work / "fusion-grid.json"
    if path.is_file():
        return json.loads(path.read_text())
    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.evaluation.measures import evaluate as measure
    from weir.ranker.options import FusionOptions
    from weir.ranker.retrievers.hybrid import fuse_runs, impact_fusion_settings
    from weir.core.trec import read_qrels, read_topics

    c = COLLECTIONS / held
    qrels = read_qrels(c / "qrels.txt")
    queries = [q for q in read_topics(c / "queries.tsv") if q.id in qrels]
    identical = "--remove-identical" in SOURCES[held][3]
    k = 1000 + identical
    idx = Index(index)
    fused = registry.build_stage("deepimpact+bm25", idx)
    runs = fused.stage_runs(queries, k)  # [deepimpact, bm25], each to its depth (1000)

    def ndcg(run) -> float:
        if identical:
            run = run.without_identical_ids()
        return measure(run.truncated(1000), qrels, ["nDCG@10"], min_rel=SOURCES[held][2])["nDCG@10"]

    grid = {str(w): ndcg(fuse_runs(runs, method="minmax", weights=[w, round(1 - w, 2)], depth=k,
                                   name="deepimpact+bm25")) for w in WEIGHT_GRID}
    card = impact_fusion_settings(idx, FusionOptions())
    out = {"collection": held, "queries": len(queries), "bm25": ndcg(runs[1]), "grid": grid,
           "card_weights": card["weights"]}
    path.write_text(json.dumps(out))
    return out


def _mean_change(grids: list[dict], w: float) -> float:
    """The mean over ``grids`` of the relative change of deepimpact+bm25 at weight ``w`` against BM25."""
    return sum((g["grid"][str(w)] - g["bm25"]) / g["bm25"] for g in grids) / len(grids)


def _choose_weight(grids: list[dict]) -> tuple[float, float]:
    """The weight of the best mean relative change against BM25 over ``grids`` (ties to the weight nearest 0.5)."""
    best = max(WEIGHT_GRID, key=lambda w: (round(_mean_change(grids, w), 10), -abs(w - 0.5)))
    return best, _mean_change(grids, best)


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
    """Each member of the variant's leave-one-out DeepImpact heads (`weir train --members N`) as a head of its own,
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
    disagreement (`weir train --members N --shrink`), the mean share of the members' correction it keeps
    (tau2 / (tau2 + v)) and the mean |log-factor| before and after, over a seeded sample of every collection's term
    rows: does the collection left out make its members disagree more than the ones they trained on?"""
    import numpy as np
    import torch

    from weir.indexer.collections import Collection
    from weir.indexer.weighting.cache import cached_term_vectors
    from weir.indexer.weighting.members import coefficient
    from weir.indexer.weighting.model import Backbone, TermWeighter

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


def fusion_loco(args) -> None:
    grids = {}
    for held in args.collections:
        work = args.work / f"loco-{args.tag}" / held
        head = train("deepimpact", work / "deepimpact", [n for n in SOURCES if n != held], args,
                     args.train_args.split())
        index = work / "index-bm25-deepimpact"
        if not (index / "manifest.json").is_file():
            run(WEIR + ["index", "build", "--collection", str(COLLECTIONS / held), "--out", str(index), "--with",
                        "bm25,deepimpact", "--deepimpact-model", str(head), "--overwrite", "--skip-empty"],
                work / "build.log")
        grids[held] = _fusion_grid(held, index, work)
        g = grids[held]
        print(f"{held}: bm25 {g['bm25']:.4f}; deepimpact+bm25 at w = " + ", ".join(
            f"{w}: {g['grid'][str(w)]:.4f}" for w in WEIGHT_GRID), flush=True)
    if len(grids) < 3:
        print("choosing a weight by leaving one collection out needs 3 collections or more: grids only", flush=True)
        return
    choices = {}
    for held in args.collections:
        others = [grids[n] for n in args.collections if n != held]
        w, gain = _choose_weight(others)
        choices[held] = {"weight": w, "others_mean_relative_change": gain, "card_weights": grids[held]["card_weights"]}
    w_all, gain_all = _choose_weight(list(grids.values()))
    summary = {"tag": args.tag, "collections": args.collections, "grid": WEIGHT_GRID, "choices": choices,
               "all": {"weight": w_all, "mean_relative_change": gain_all},
               "rule": "best mean relative change of nDCG@10 against BM25 over the other collections, each scored by "
                       "its own leave-one-collection-out head; ties to the weight nearest 0.5"}
    (args.work / f"fusion-loco-{args.tag}.json").write_text(json.dumps(summary, indent=1) + "\n")
    for held in args.collections:
        work = args.work / f"loco-{args.tag}" / held
        w = choices[held]["weight"]
        exp = work / "experiment-fusion"
        c = COLLECTIONS / held
        if not (exp / "results.json").is_file():
            run(WEIR + ["experiment", "--index", str(work / "index-bm25-deepimpact"), "--topics",
                        str(c / "queries.tsv"), "--qrels", str(c / "qrels.txt"), "--pipelines",
                        f"bm25,deepimpact,deepimpact+bm25,deepimpact+bm25[fusion_weights={w};{round(1 - w, 2)}]",
                        "--measures", "nDCG@10,R@100", "--out", str(exp)] + SOURCES[held][3],
                work / "experiment-fusion.log")
        record = json.loads((exp / "results.json").read_text())
        systems = {s["label"]: s["means"]["nDCG@10"] for s in record["systems"]}
        tests = record["significance"]["results"]["nDCG@10"]
        cells = [f"{label} {value:.4f}" + (f" (p {tests[label]['p_holm']:.3f})" if label in tests else "")
                 for label, value in systems.items()]
        print(f"{held}: weight {w} (card {choices[held]['card_weights']}): " + "; ".join(cells), flush=True)
    print(f"all six: weight {w_all} on deepimpact (mean relative change {gain_all:+.2%})", flush=True)


def _row(record: dict) -> dict:
    systems = {s["label"]: s for s in record["systems"]}
    tests = record["significance"]["results"]["nDCG@10"]
    base = systems["bm25"]["means"]["nDCG@10"]
    out = {"bm25": base}
    for name in PIPELINES.split(",")[1:]:
        if name not in systems:  # an experiment of one kind of head only (`self --kinds deepimpact`)
            continue
        value = systems[name]["means"]["nDCG@10"]
        t = tests[name]
        out[name] = (value, (value - base) / base, t["p_holm"], t["significant"])
    return out


def ltr_table(args) -> None:
    print("\n| collection | variant | hybrid | hybrid>>ltr | p (Holm) |\n|---|---|---:|---:|---:|")
    for kind in sorted(args.work.glob("ltr-*")):
        for held in sorted(kind.iterdir()):
            results = held / "experiment" / "results.json"
            if not results.is_file():
                continue
            record = json.loads(results.read_text())
            hybrid, ltr = (s["means"]["nDCG@10"] for s in record["systems"])
            t = next(iter(record["significance"]["results"]["nDCG@10"].values()))
            print(f"| {held.name} | {kind.name} | {hybrid:.4f} | {ltr:.4f} ({ltr - hybrid:+.4f}) | {t['p_holm']:.3f} |")


def table(args) -> None:
    print("| collection | variant | bm25 | " + " | ".join(PIPELINES.split(",")[1:]) + " |")
    print("|---|---|---:|" + "---:|" * 3)
    for kind in sorted(k for k in args.work.glob("*-*") if k.is_dir() and not k.name.startswith("ltr-")):
        for held in sorted(kind.iterdir()):
            results = held / "experiment" / "results.json"
            if not results.is_file():
                continue
            row = _row(json.loads(results.read_text()))
            cells = []
            for name in PIPELINES.split(",")[1:]:
                if name not in row:
                    cells.append("-")
                    continue
                value, rel, p, sig = row[name]
                mark = (" ↑" if rel > 0 else " ↓") if sig else ""
                cells.append(f"{value:.4f} ({rel:+.1%}, p {p:.3f}){mark}")
            print(f"| {held.name} | {kind.name} | {row['bm25']:.4f} | " + " | ".join(cells) + " |")
    ltr_table(args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("cache", "loco", "self", "final", "table", "ltr-loco", "ltr-final",
                                        "ltr-sweep", "fusion-loco", "epochs", "members", "shrinkage"))
    ap.add_argument("--indexes", type=Path, default=ROOT / "indexes", help="ltr: an index (bm25, dense) per "
                    "collection, named after it")
    ap.add_argument("--ltr-args", default="", help="ltr: options of `weir train ltr` for the variant")
    ap.add_argument("--variant", action="append", default=[], help="ltr-sweep: TAG=JSON, TrainConfig fields over "
                    "the shipped recipe, e.g. 'sets={\"inner_by\": \"sets\"}' (repeatable)")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "transfer")
    ap.add_argument("--collections", default=",".join(SOURCES))
    ap.add_argument("--shape", default="bm25", choices=("bm25", "free"))
    ap.add_argument("--tag", default=None, help="names the variant's directories (default: the shape)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--kinds", default="deepct,deepimpact", help="self: the heads adapted with pseudo-queries; "
                    "loco: the heads trained (the others from --reuse)")
    ap.add_argument("--reuse", default=None, help="loco, self: the variant (tag) whose heads of the kinds not in "
                    "--kinds are used")
    ap.add_argument("--train-args", default="", help="options of `weir train deepct|deepimpact` for the variant")
    ap.add_argument("--self-supervise-training", action="store_true", help="every head also trains on pseudo-queries "
                    "of each of its training collections (--self-supervised C for every --train C; no judgment, and "
                    "never the collection left out); --train-args \"--pseudo-queries N\" sizes them")
    ap.add_argument("--out-dir", default=str(ROOT / "models"), help="final: where the heads go (<dir>/deepct, ...)")
    args = ap.parse_args()
    args.collections = [c for c in args.collections.split(",") if c]
    args.kinds = [k for k in args.kinds.split(",") if k]
    args.tag = args.tag or args.shape
    {"cache": cache, "loco": loco, "self": self_supervised, "final": final, "table": table, "ltr-loco": ltr_loco,
     "ltr-final": ltr_final, "ltr-sweep": ltr_sweep, "fusion-loco": fusion_loco,
     "epochs": epochs, "members": members, "shrinkage": shrinkage}[args.command](args)


if __name__ == "__main__":
    main()
