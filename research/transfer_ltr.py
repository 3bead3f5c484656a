"""The LTR steps of the transfer protocol (research/transfer.py): ``ltr-loco`` and ``ltr-final`` (`weir train ltr`
and `weir experiment` per collection), ``ltr-sweep`` (several recipes in one process over features computed once),
and the table of their experiments."""

from __future__ import annotations

import json
from pathlib import Path

from transfer_common import COLLECTIONS, SOURCES, WEIR, run

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
    cmd = WEIR + ["train", "ltr", "--also", f"index={args.indexes / first},topics={c / topics},qrels={c / qrels},"
                  f"first_stage=hybrid,max_queries={LTR_QUERIES}", "--out", str(out)]
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
          "params": {"learning_rate": 0.02, "num_leaves": 7, "min_data_in_leaf": 50, "lambda_l2": 10}}


SPLITS = {  # split -> (the topics' side, the candidates): hybrid or BM25 top-100 of the training or evaluation topics
    "train": ("train", "hybrid"), "train-bm25": ("train", "bm25"), "test": ("test", "hybrid"),
    "test-bm25": ("test", "bm25"), "test-attention": ("test", "attention")}
DL_BM25 = "runs/BM25_dl19.top100.trec"  # the DL pool's BM25 candidates: the full corpus's top 100, as the issue's


def _examples(name: str, split: str, args):
    """The LTR examples of one collection's split (:data:`SPLITS`; at most LTR_QUERIES training queries), as `weir
    train ltr` computes them; pickled under --work for this very index (named by its manifest's checksum, so a
    rebuilt index never meets the features of the one before), reused when there. The DL pool's BM25 candidates are
    the shared full-corpus run (its pool's own BM25 ranks a pool, not MS MARCO)."""
    import hashlib
    import pickle

    from weir.training.common import TrainingSet
    from weir.training.ltr import load_examples

    index = args.indexes / name
    built = hashlib.sha256((index / "manifest.json").read_bytes()).hexdigest()[:12]
    path = args.work / "ltr-features" / f"{name}.{split}.{built}.pkl"
    if path.is_file():
        return pickle.loads(path.read_bytes())
    side, stage = SPLITS[split]
    topics, qrels = SOURCES[name][:2] if side == "train" else ("queries.tsv", "qrels.txt")
    c = COLLECTIONS / name
    candidates = str(c / DL_BM25) if stage == "bm25" and (c / DL_BM25).is_file() else None
    if stage == "attention":  # bm25>>attention's run: the candidates, and their attention scores as a stage's
        candidates = str(args.dl_attention)
    ds = TrainingSet(index=str(index), topics=str(c / topics), qrels=str(c / qrels), candidates=candidates,
                     first_stage="hybrid" if stage == "attention" else stage, depth=100,
                     max_queries=LTR_QUERIES if side == "train" else None,
                     stage_runs=f"attention:{candidates}" if stage == "attention" else None)
    ex = load_examples(ds, log=lambda m: print(m, flush=True))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(ex))
    return ex


def _judge(held: str, ex, scores: dict[str, dict], qrels) -> dict:
    """nDCG@10 of the first stage, of the cosine alone and of each named set of LTR scores (``scores``: name ->
    per-query scores, e.g. ``ltr`` and ``ltr_mean``) over one split's candidates; each LTR's paired t-test p against
    the first stage and the cosine, its URisk (alpha 5) against the first stage, and every query's nDCG@10
    (``per_query``: name -> {qid: value}) for any other paired figure later."""
    import numpy as np

    from weir.evaluation.measures import evaluate
    from weir.evaluation.risk import urisk
    from weir.evaluation.significance import paired, paired_test
    from weir.ranker.rerankers.ltr import per_query
    from weir.ranker.rerankers.ltr_features import FEATURES
    from weir.ranker.stage import apply_scores

    keep = set.intersection(*(set(s) for s in scores.values()))
    queries = [q for q in ex.queries if q.id in keep]
    col = FEATURES.index("dense_cos")
    cos = per_query(ex.qids, np.nan_to_num(ex.X[:, col], nan=-2.0))
    runs = {"first": ex.run, "cos": apply_scores(queries, ex.run, 100, cos, "cos"),
            **{name: apply_scores(queries, ex.run, 100, s, "ltr") for name, s in scores.items()}}
    if "--remove-identical" in SOURCES[held][3]:
        runs = {k: r.without_identical_ids() for k, r in runs.items()}
    per = {k: evaluate(r, qrels, ["nDCG@10"], min_rel=SOURCES[held][2], per_query=True) for k, r in runs.items()}
    row = {k: round(m["nDCG@10"], 4) for k, (m, _) in per.items()}
    values = {k: p["nDCG@10"] for k, (_, p) in per.items()}
    for name in scores:
        suffix = "" if name == "ltr" else f"_{name}"
        for k in ("first", "cos"):
            row[f"p_{k}{suffix}"] = round(paired_test(*paired(values[name], values[k])[1:])[1], 3)
        row[f"urisk5{suffix}"] = round(urisk(values[name], values["first"]), 5)
    row["per_query"] = {k: {q: round(v, 5) for q, v in values[k].items()} for k in ("first", *scores)}
    return row


def ltr_sweep(args) -> None:
    """In one process, features computed once per collection and split: for each variant (``--variant TAG=JSON``,
    TrainConfig fields over :data:`RECIPE`, and ``"train_on": "hybrid"|"bm25"``, the candidates it trains on) and
    each collection X, the model of the other collections' training queries reranks X's hybrid top-100 and BM25
    top-100 of its evaluation topics (the DL pool's: the full corpus's BM25 run; with ``--dl-attention RUN``, also
    that run of ``bm25>>attention`` over it, its scores as the stage feature); nDCG@10 of the first stage, of the
    cosine alone and of the LTR, paired t-tests; then SciFact test by the model of every collection (as
    ``ltr-final``). The same models and scores as `ltr-loco` (`weir train ltr` + `weir experiment`), to compare
    recipes cheaply before confirming one that way. Rows go to --work/ltr-sweep.jsonl."""
    from weir.core.trec import read_qrels
    from weir.ranker.rerankers.ltr_features import FEATURES
    from weir.training.ltr import TrainConfig, fit_on, init_column, rounds_note, score_boosters

    out = args.work / "ltr-sweep.jsonl"
    for variant in args.variant:
        tag, _, spec = variant.partition("=")
        fields = {**RECIPE, **json.loads(spec or "{}")}
        fields["params"] = {**RECIPE["params"], **fields.get("params", {})}
        train_on = fields.pop("train_on", "hybrid")
        train = {n: _examples(n, "train" if train_on == "hybrid" else f"train-{train_on}", args)
                 for n in args.collections}
        # each collection left out; then SciFact test by the model of every collection (the shipped default's recipe)
        for held, trained_on in [(n, [m for m in args.collections if m != n]) for n in args.collections] + (
                [("beir-scifact", list(args.collections))] if "beir-scifact" in args.collections else []):
            config = TrainConfig(sets=[], out="", rounds=300, **fields)
            data = [train[n] for n in trained_on]
            boosters, info = fit_on(data, set(data[0].qids), config, FEATURES)
            qrels = read_qrels(COLLECTIONS / held / "qrels.txt")
            dl_attention = held == "msmarco-passage-trec-dl-pool" and args.dl_attention
            for split in [s for s in args.splits if s != "test-attention" or dl_attention]:
                ex = _examples(held, split, args)
                init = init_column(config, FEATURES)
                scores = {"ltr": score_boosters(boosters, ex, set(ex.qids), init, rounds=info.get("rounds"),
                                                risk=info.get("risk", 0.0))}
                if info.get("risk"):  # the same members' mean, risk 0
                    scores["ltr_mean"] = score_boosters(boosters, ex, set(ex.qids), init, rounds=info.get("rounds"))
                seen = held in trained_on
                row = {"variant": tag, "held_out": held, "split": split, "trained_on": trained_on,
                       "in_training": seen, **_judge(held, ex, scores, qrels), "rounds": info.get("rounds"),
                       "risk": info.get("risk", 0.0), "risk_choice": info.get("risk_choice"),
                       "how": rounds_note(info), "fields": {**fields, "train_on": train_on}}
                mean = (f" mean {row['ltr_mean']:.4f} (URisk5 {row['urisk5_ltr_mean']:+.4f})" if "ltr_mean" in row
                        else "")
                print(f"{tag:>12} {held + (' (trained on)' if seen else ''):>42} {split:>9}: first {row['first']:.4f}"
                      f" cos {row['cos']:.4f} ltr {row['ltr']:.4f} (p {row['p_first']:.3f} / {row['p_cos']:.3f};"
                      f" URisk5 {row['urisk5']:+.4f}){mean}; {row['how']}", flush=True)
                with open(out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")


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


def ltr_risk_table(args) -> None:
    """Issue 53's risk-aware acceptance from --work/ltr-sweep.jsonl: per collection left out (split ``test``), each
    variant's nDCG@10 (change against hybrid), its URisk (alpha 5) against hybrid, and its paired t-test p against
    the first variant named (``--variant TAG``: the one-member reference); rows of a several-member variant also show
    its members' plain mean (risk 0). The last row: the mean over the collections."""
    import numpy as np

    from weir.evaluation.significance import paired, paired_test

    tags = [v.partition("=")[0] for v in args.variant]
    rows = {}
    for line in (args.work / "ltr-sweep.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["split"] == "test" and not r["in_training"] and r["variant"] in tags:
            rows[(r["variant"], r["held_out"])] = r  # the latest row of a (variant, collection) wins
    held = [c for c in args.collections if all((t, c) in rows for t in tags)]
    print("\n| collection | hybrid | " + " | ".join(f"{t}: nDCG@10 | URisk5 | p vs {tags[0]}" for t in tags) + " |")
    print("|---|---:|" + "---:|---:|---:|" * len(tags))
    sums = {t: [] for t in tags}
    for c in held:
        ref = rows[(tags[0], c)]["per_query"]["ltr"]
        cells = []
        for t in tags:
            r = rows[(t, c)]
            p = paired_test(*paired(r["per_query"]["ltr"], ref)[1:])[1] if t != tags[0] else float("nan")
            mean = (f" (mean {r['ltr_mean']:.4f}, {r['urisk5_ltr_mean']:+.4f})" if "ltr_mean" in r else "")
            cells.append(f"{r['ltr']:.4f} ({r['ltr'] - r['first']:+.4f}){mean} | {r['urisk5']:+.4f} | "
                         + ("" if t == tags[0] else f"{p:.3f}") + (f"; risk {r['risk']:g}" if r.get("risk") else ""))
            sums[t].append((r["ltr"] - r["first"], r["urisk5"]))
        print(f"| {c} | {rows[(tags[0], c)]['first']:.4f} | " + " | ".join(cells) + " |")
    print("| mean | | " + " | ".join(f"({np.mean([d for d, _ in sums[t]]):+.4f}) | {np.mean([u for _, u in sums[t]]):+.4f}"
                                     f" | " for t in tags) + " |")


def ltr_risk_oof(args) -> None:
    """Training queries only, no held-out figure: why a risk chosen by the members' spread moves little. For each
    ``--variant`` fitted on ``--collections``' training sets, every member's out-of-fold scores (as the risk's choice
    reads them, :mod:`weir.training.ltr.risk`); per set, the median spread against the median size of the trees' move
    (their mean score centred per query) and their correlation; then, per form and weight, the sets' mean URisk (alpha
    5) and nDCG@10 against the candidates' order: ``lcb`` mean - w * spread (what is served), ``soft`` the move
    shrunk towards 0 by w * spread, ``scale`` the move divided by 1 + w (no spread: the first stage's pull alone)."""
    import numpy as np

    from weir.evaluation.risk import urisk_of
    from weir.ranker.rerankers.ltr import base_scores
    from weir.ranker.rerankers.ltr_features import FEATURES
    from weir.training.ltr import TrainConfig, init_column
    from weir.training.ltr.boosting import ndcg_at_10_per_query
    from weir.training.ltr.risk import RISK_GRID, candidate_order, out_of_fold
    from weir.training.ltr.rounds import rounds_by_cv

    forms = {"lcb": lambda m, s, w: m - w * s, "soft": lambda m, s, w: np.sign(m) * np.maximum(np.abs(m) - w * s, 0),
             "scale": lambda m, s, w: m / (1 + w)}
    data = [_examples(n, "train", args) for n in args.collections]
    for variant in args.variant:
        tag, _, spec = variant.partition("=")
        fields = {**RECIPE, **json.loads(spec or "{}")}
        fields["params"] = {**RECIPE["params"], **fields.get("params", {})}
        config = TrainConfig(sets=[], out="", rounds=300, **fields)
        fits: list = []
        rounds, _, _ = rounds_by_cv(data, set(data[0].qids), config, FEATURES, fits)
        oof = out_of_fold(data, fits, config.members, rounds)
        table: dict = {}
        for name, ex, scores in zip(args.collections, data, oof):
            rows, groups = ex.rows(set(ex.qids))
            y, s = ex.y[rows], scores[:, rows]
            base = base_scores(ex.X[rows], groups, init_column(config, FEATURES))
            starts = np.cumsum([0] + groups[:-1])
            move = s.mean(axis=0) - np.repeat([s.mean(axis=0)[a:a + n].mean() for a, n in zip(starts, groups)], groups)
            spread = s.std(axis=0)
            before = ndcg_at_10_per_query(candidate_order(groups), y, groups)
            print(f"{tag} {name}: {rounds} rounds; spread median {np.median(spread):.4f}, |move| median "
                  f"{np.median(np.abs(move)):.4f}, correlation {np.corrcoef(spread, np.abs(move))[0, 1]:+.3f}")
            for form, f in forms.items():
                for w in RISK_GRID:
                    after = ndcg_at_10_per_query(base + f(move, spread, w), y, groups)
                    table.setdefault((form, w), []).append((urisk_of(after - before), after.mean()))
        print(f"\n| form | weight | URisk5 (mean of sets) | nDCG@10 |\n|---|---:|---:|---:|")
        for (form, w), v in table.items():
            print(f"| {form} | {w:g} | {np.mean([u for u, _ in v]):+.4f} | {np.mean([n for _, n in v]):.4f} |")
