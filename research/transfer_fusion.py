"""The ``fusion-loco`` step of the transfer protocol (research/transfer.py): the ``deepimpact+bm25`` weight chosen by
leaving one collection out, from each collection's grid of fused nDCG@10 over its leave-one-out head."""

from __future__ import annotations

import json
from pathlib import Path

from transfer_common import COLLECTIONS, SOURCES, WEIR, run, train  # first: it puts the repository on sys.path

from weir.training.fusion import WEIGHT_GRID  # the weights `weir train deepimpact` chooses among


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
