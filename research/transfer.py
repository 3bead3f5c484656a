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
- ``quality-loco``, ``quality-final``, ``quality-table``: the pruning estimators judged the same way
  (``research/transfer_quality.py``);
- ``ltr-final``: that LTR trained on every collection (the shipped default, ``--out-dir``/ltr), and SciFact test;
- ``ltr-sweep``: the ``ltr-loco`` protocol in one process for several recipes (``--variant``), every collection's
  features computed once (pickled under --work): to compare recipes before confirming one with ``ltr-loco``;
- ``ltr-risk``: issue 53's risk-aware table from ``ltr-sweep``'s rows: per collection left out, each ``--variant``'s
  nDCG@10, URisk (alpha 5) against hybrid and paired p against the first variant named (the one-member reference);
- ``ltr-risk-oof``: training queries only: the members' out-of-fold spread against the size of the trees' move, and
  the URisk of three ways of weighing it (``research/transfer_ltr.py``);
- ``fusion-loco``: the ``deepimpact+bm25`` weight chosen by leaving one collection out. For each collection X, its
  leave-one-out DeepImpact head (as ``loco`` trains it; X indexed with bm25 and that head) scores X's evaluation
  topics fused with BM25 at every weight 0, 0.05, ..., 1 on ``deepimpact`` (min-max, as served). The weight for X is
  the one of the best mean relative change of nDCG@10 against BM25 over the *other* collections (each scored by its
  own leave-one-out head), ties to the weight nearest 0.5; `weir experiment` then measures X at that weight beside the
  weight of its head's card (chosen on the training sets' validation queries). The weight best over all six collections
  is printed too: the candidate for a head trained on all six (stop 25 kept the card's: ``research/notebook.md``).

- ``epochs``: training side only, no held-out figure: each leave-one-out DeepImpact head's judged validation sets,
  epoch by epoch against the untrained head, and the epoch each rule would keep (``queries``, the shipped one;
  ``sets``; ``worst``: only an epoch that raises every set), for the variant's heads and the one under --out-dir.

- ``shrinkage``: unlabelled text only: for each leave-one-out head shrunk by its members' disagreement
  (``--train-args "--set members=3 --set shrink=true"``), the share of the correction kept on each collection's
  terms, the one left out beside the
  ones it trained on.

- ``members``: each member of the variant's leave-one-out heads of several members (``--train-args "--set members=
  N"``) written as a head of its own (``loco-TAG.mM``), for ``fusion-loco --tag TAG.mM`` to measure it alone.

``--self-supervise-training`` adds, to every head, pseudo-queries of each of its training collections (``weir train
--self-supervised C`` for every source C it trains on; the collection left out still contributes nothing): query
forms no judged set has, for no judgment (stop 26, ``research/notebook.md``).

A variant may retrain one kind only: ``--kinds deepimpact --reuse bm25`` trains the DeepImpact heads (with
``--train-args``, options of `weir train`) and takes the DeepCT heads of the variant ``bm25``.

Usage: python research/transfer.py cache|loco|self|final|table [--work WORK] [--shape bm25] [--tag bm25]
       [--collections a,b] [--epochs 10] [--kinds deepimpact --reuse TAG] [--train-args "--set draws=sources"]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from transfer_common import COLLECTIONS, PIPELINES, ROOT, SOURCES, evaluate, loco_head, train
from transfer_fusion import fusion_loco
from transfer_heads import epochs, members, shrinkage
from transfer_ltr import ltr_final, ltr_loco, ltr_risk_oof, ltr_risk_table, ltr_sweep, ltr_table
from transfer_quality import quality_final, quality_loco, quality_table


def cache(args) -> None:
    from weir.indexer.collections import Collection
    from weir.indexer.weighting.cache import cached_term_vectors
    from weir.indexer.weighting.backbone import Backbone

    backbone = Backbone()
    for name in args.collections:
        docs = list(Collection.open(COLLECTIONS / name).corpus(skip_empty=True))  # as training and indexing read it
        cached_term_vectors(backbone, docs, desc=f"{name} term vectors")


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
                                        "ltr-sweep", "ltr-risk", "ltr-risk-oof", "fusion-loco", "epochs", "members", "shrinkage",
                                        "quality-loco", "quality-final", "quality-table"))
    ap.add_argument("--indexes", type=Path, default=ROOT / "indexes", help="ltr: an index (bm25, dense) per "
                    "collection, named after it")
    ap.add_argument("--ltr-args", default="", help="ltr: options of `weir train ltr` for the variant (--set KEY=VALUE ...)")
    ap.add_argument("--variant", action="append", default=[], help="ltr-sweep: TAG=JSON, TrainConfig fields over "
                    "the shipped recipe, e.g. 'sets={\"inner_by\": \"sets\"}' (repeatable)")
    ap.add_argument("--dl-attention", type=Path, default=None, help="ltr-sweep: a run of bm25>>attention over the DL "
                    "pool's BM25 top 100 (`weir run --candidates ... --pipeline attention`), reranked by each model")
    ap.add_argument("--splits", default="test,test-bm25,test-attention", help="ltr-sweep: the evaluation splits "
                    "reranked (test: the hybrid top 100; test-bm25: BM25's; test-attention: with --dl-attention)")
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
                    "never the collection left out); --train-args \"--set pseudo_queries=N\" sizes them")
    ap.add_argument("--out-dir", default=str(ROOT / "weir" / "models"), help="final: where the heads go (<dir>/deepct, ...)")
    ap.add_argument("--quality-args", default="", help="quality: options of `weir train quality` for the variant")
    ap.add_argument("--quality-sources", default=",".join(SOURCES), help="quality: the sources estimators train on")
    ap.add_argument("--quality-fractions", default="0.1,0.25,0.4", help="quality: the fractions pruned")
    ap.add_argument("--quality-with", default="bm25,dense", help="quality: the swept indexes' components (bm25: BM25 "
                    "alone; with dense, hybrid too)")
    args = ap.parse_args()
    args.quality_sources = [c for c in args.quality_sources.split(",") if c]
    args.collections = [c for c in args.collections.split(",") if c]
    args.splits = [s for s in args.splits.split(",") if s]
    args.kinds = [k for k in args.kinds.split(",") if k]
    args.tag = args.tag or args.shape
    {"cache": cache, "loco": loco, "self": self_supervised, "final": final, "table": table, "ltr-loco": ltr_loco,
     "ltr-final": ltr_final, "ltr-sweep": ltr_sweep, "ltr-risk": ltr_risk_table, "ltr-risk-oof": ltr_risk_oof,
     "fusion-loco": fusion_loco,
     "epochs": epochs, "members": members, "shrinkage": shrinkage, "quality-loco": quality_loco,
     "quality-final": quality_final, "quality-table": quality_table}[args.command](args)


if __name__ == "__main__":
    main()
