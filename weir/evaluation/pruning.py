"""`weir quality sweep`: how much of a collection each quality estimator can prune, measured.

For each estimator and each fraction, an index of the collection is built with that fraction pruned
(:mod:`weir.indexer.quality.prune`; real builds, so sizes and build times are measured), the pipelines run over the
topics, and every pruned index is compared with the unpruned one, query by query: a paired t-test
(:func:`weir.evaluation.significance.paired_test`) and a paired two one-sided tests procedure at an equivalence
margin of ``margin`` times the unpruned mean (:func:`weir.evaluation.significance.equivalence_test`); an estimator
is also compared with ``random`` at the same fraction (with ``random_seeds=N``, each query's mean over N random draws:
the expected loss of pruning at random, not one draw's luck). Written: ``sweep.md`` (the tables and, per estimator and
pipeline, the largest fraction still equivalent), ``sweep.json`` (everything, per query) and ``sweep.png``
(effectiveness, index size and build time against the fraction pruned).

Cross-fitting (``cross_fit=K``) evaluates a trained estimator on the judgments of the topics themselves without
testing on what it saw: the judged topics are split into K folds (:func:`weir.evaluation.folds.folds_of`); for each
fold, ``learned`` / ``surface`` are trained on the other folds' judgments only, the indexes pruned by that model
answer that fold's queries, and the folds' per-query results are joined. Used where a collection has no training
split (the TREC DL pool); estimators given as model directories, and the untrained ones, are used as they are. The
training comes in as a parameter, ``train_estimator`` (:class:`TrainEstimator`): evaluation sits below training
and never imports it; `weir quality sweep` passes :func:`weir.training.quality.fit`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from weir.evaluation.measures import evaluate
from weir.evaluation.significance import equivalence_test, paired, paired_test
from weir.evaluation.folds import folds_of
from weir.core.provenance import utc_now, versions, write_json
from weir.core.trec import read_qrels, read_topics
from weir.core.types import InputError, Query

TRAINABLE = ("learned", "surface")


class TrainEstimator(Protocol):
    """Trains a quality estimator (``learned`` | ``surface``) on the judgments ``topics`` / ``qrels`` over
    ``collection`` alone, with ``options`` (`weir train quality` settings), and writes its model directory ``out``."""

    def __call__(self, estimator: str, *, collection: str, topics: str, qrels: str, out: str, options: dict[str, Any],
                 device: str | None, command: list[str], log: Callable[[str], None]) -> object: ...


@dataclass
class SweepConfig:
    collection: str
    topics: str
    qrels: str
    out: str
    estimators: list[str] = field(default_factory=lambda: ["learned", "surface", "random"])
    fractions: list[float] = field(default_factory=lambda: [0.1, 0.25, 0.4, 0.5])
    components: list[str] = field(default_factory=lambda: ["bm25", "dense"])
    pipelines: list[str] = field(default_factory=lambda: ["bm25", "hybrid"])
    measure: str = "nDCG@10"
    k: int = 1000
    min_rel: int = 1
    margin: float = 0.02  # relative to the unpruned index's mean
    alpha: float = 0.05
    cross_fit: int = 0
    train_options: dict[str, Any] = field(default_factory=dict)  # for cross-fitted estimators (QualityTrainConfig)
    remove_identical: bool = False
    skip_empty: bool = False  # leave out empty documents instead of failing (as `weir index build --skip-empty`)
    reuse_vectors: bool = True  # pruned indexes copy the unpruned index's dense vectors instead of encoding again
    seed: int = 0
    random_seeds: int = 1  # random pruning's row: each query's mean over this many draws (seed, seed + 1, ...)
    fold_seed: int = 13
    device: str | None = None
    command: list[str] = field(default_factory=list)


def _estimators(config: SweepConfig) -> list[tuple[str, str]]:
    """(label, estimator spec): ``NAME``, ``LABEL=NAME`` or ``LABEL=MODEL_DIR``."""
    out = []
    for item in config.estimators:
        label, sep, spec = item.partition("=")
        label, spec = (label.strip(), spec.strip()) if sep else (item.strip(), item.strip())
        if not label or not spec:
            raise InputError(f"estimator {item!r}: expected NAME, LABEL=NAME or LABEL=MODEL_DIR")
        out.append((label, spec))
    labels = [label for label, _ in out]
    if len(set(labels)) != len(labels):
        raise InputError(f"two estimators have the same label: {', '.join(labels)}")
    return out


def _check(config: SweepConfig) -> None:
    from weir.indexer.build import COMPONENTS
    from weir.indexer.quality import ESTIMATORS
    from weir.ranker import registry

    for f in config.fractions:
        if not 0 < f < 1:
            raise InputError(f"fractions must be between 0 and 1, exclusive (got {f}); the unpruned index is always "
                             "built")
    for c in config.components:
        if c not in COMPONENTS:
            raise InputError(f"unknown component {c!r}; known: {', '.join(COMPONENTS)}")
    for p in config.pipelines:
        registry.parse(p)
    for _, spec in _estimators(config):
        if spec not in ESTIMATORS and not Path(spec).is_dir():
            raise InputError(f"unknown quality estimator {spec!r}; known: {', '.join(ESTIMATORS)}, or a model "
                             "directory")
    if config.cross_fit == 1 or config.cross_fit < 0:
        raise InputError(f"--cross-fit needs at least 2 folds (got {config.cross_fit})")
    if config.random_seeds < 1:
        raise InputError(f"random pruning needs at least one draw (got --random-seeds {config.random_seeds})")
    if not 0 < config.margin < 1:
        raise InputError(f"the equivalence margin is a share of the unpruned mean, between 0 and 1 (got "
                         f"{config.margin})")


class Sweep:
    def __init__(self, config: SweepConfig, log: Callable[[str], None], train_estimator: TrainEstimator | None = None):
        _check(config)
        if config.cross_fit and train_estimator is None and any(s in TRAINABLE for _, s in _estimators(config)):
            raise InputError(f"cross-fitting {', '.join(TRAINABLE)} needs a train_estimator "
                             "(weir.training.quality.fit)")
        self.config, self.log, self.train_estimator = config, log, train_estimator
        self.out = Path(config.out)
        self.topics = read_topics(config.topics)
        self.qrels = read_qrels(config.qrels)
        self.judged = [q for q in self.topics if q.id in self.qrels]
        if not self.judged:
            raise InputError(f"none of the topics of {config.topics} is judged in {config.qrels}")

    def index(self, name: str, spec: str | None, fraction: float, seed: int | None = None) -> tuple[Path, dict]:
        """The index pruned ``fraction`` by ``spec`` (unpruned when None; ``seed`` of random, default the sweep's),
        built once and reused by later sweeps."""
        from weir.indexer.build import build_index
        from weir.indexer.index_dir import read_manifest
        from weir.indexer.quality.prune import PruneSpec

        c = self.config
        path = self.out / "indexes" / name
        prune = PruneSpec(spec, fraction=fraction, seed=c.seed if seed is None else seed) if spec else None
        if (path / "manifest.json").is_file():
            manifest = read_manifest(path)
            same = sorted(manifest["components"]) == sorted(c.components) and (
                (prune is None and "pruning" not in manifest)
                or (prune is not None and manifest.get("pruning", {}).get("fraction") == fraction
                    and manifest["pruning"]["estimator"] == spec
                    and manifest["pruning"].get("seed", prune.seed) == prune.seed))
            if same:
                self.log(f"{name}: reusing the index built before")
                return path, manifest
        self.log(f"{name}: building ({', '.join(c.components)}" + (f"; {spec} prunes {fraction:.0%})" if spec else ")"))
        dense = None
        if spec and c.reuse_vectors and "dense" in c.components:
            from weir.indexer.dense import DenseConfig

            dense = DenseConfig(vectors_from=str(self.out / "indexes" / "unpruned"))
        return path, build_index(c.collection, path, components=tuple(c.components), overwrite=True, prune=prune,
                                 dense=dense, device=c.device, skip_empty=c.skip_empty)

    def evaluate(self, path: Path, queries: list[Query]) -> dict[str, dict[str, float]]:
        """{pipeline: {qid: measure}} over ``queries``."""
        from weir.indexer.index_dir import Index
        from weir.ranker import registry

        index = Index(path)
        out = {}
        for name in self.config.pipelines:
            pipeline = registry.build(name, index)
            run = pipeline.search(queries, self.config.k, remove_identical=self.config.remove_identical)
            _, by_query = evaluate(run, {q.id: self.qrels[q.id] for q in queries}, [self.config.measure],
                                   min_rel=self.config.min_rel, per_query=True)
            values = by_query[self.config.measure]
            out[name] = {q.id: float(values.get(q.id, 0.0)) for q in queries}
        return out

    def cost(self, manifest: dict) -> dict[str, Any]:
        components = manifest["components"]
        pruning = manifest.get("pruning") or {}
        quality = pruning.get("scoring", {})
        return {"documents": manifest["counts"]["documents"], "pruned": manifest["counts"].get("pruned", 0),
                "bytes": sum(c["bytes"] for c in components.values()),
                "component_bytes": {n: c["bytes"] for n, c in components.items()},
                "build_seconds": {n: c["build_seconds"] for n, c in components.items()},
                "copied": sorted(n for n, c in components.items() if c.get("vectors_reused")),
                "quality_seconds": quality.get("seconds", 0.0) if pruning else 0.0,
                "quality_cached": bool(quality.get("cached")) if pruning else False,
                "quality_passages_per_second": quality.get("passages_per_second") if pruning else None}

    def fold_model(self, fold: int, label: str, spec: str, train_qids: set[str]) -> str:
        """Train ``spec`` (learned | surface) on the judgments of ``train_qids`` only; its model directory."""
        directory = self.out / "folds" / str(fold)
        model = directory / label
        if (model / "card.json").is_file():
            self.log(f"fold {fold}: reusing {label} trained before ({model})")
            return str(model)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "topics.tsv").write_text("".join(f"{q.id}\t{q.text}\n" for q in self.topics if q.id in train_qids),
                                              encoding="utf-8")
        (directory / "qrels.txt").write_text("".join(f"{q} 0 {d} {r}\n" for q in sorted(train_qids)
                                                     for d, r in sorted(self.qrels[q].items())), encoding="utf-8")
        options = {"min_rel": self.config.min_rel, **self.config.train_options}
        self.log(f"fold {fold}: training {label} on the judgments of {len(train_qids)} queries")
        self.train_estimator(spec, collection=self.config.collection, topics=str(directory / "topics.tsv"),
                             qrels=str(directory / "qrels.txt"), out=str(model), options=options,
                             device=self.config.device, command=["weir quality sweep (cross-fit)"], log=self.log)
        return str(model)

    def random_draws(self, label: str, fraction: float) -> dict[str, Any]:
        """Random pruning's row over ``random_seeds`` draws: each query's measure the mean over the draws, the
        expected effect of pruning at random rather than the luck of one draw (one index per draw)."""
        c = self.config
        seeds = [c.seed + i for i in range(c.random_seeds)]
        per_query: dict[str, dict[str, float]] = {p: {} for p in c.pipelines}
        costs = []
        for seed in seeds:
            name = f"{label}-{fraction:g}" if seed == c.seed else f"{label}-seed{seed}-{fraction:g}"
            path, manifest = self.index(name, "random", fraction, seed=seed)
            costs.append(self.cost(manifest))
            for p, values in self.evaluate(path, self.judged).items():
                for q, v in values.items():
                    per_query[p][q] = per_query[p].get(q, 0.0) + v / len(seeds)
        return {"estimator": label, "spec": "random", "fraction": fraction, "seeds": seeds, **costs[0],
                "per_query": per_query}

    def run(self) -> dict[str, Any]:
        c = self.config
        self.out.mkdir(parents=True, exist_ok=True)
        record: dict[str, Any] = {"created": utc_now(), "command": c.command, "config": asdict(c),
                                  "versions": versions("pyserini", "faiss-cpu", "torch", "lightgbm", "scipy",
                                                       "statsmodels"),
                                  "queries": len(self.judged), "rows": []}
        path, manifest = self.index("unpruned", None, 0.0)
        baseline = self.evaluate(path, self.judged)
        record["rows"].append({"estimator": "none", "fraction": 0.0, **self.cost(manifest), "per_query": baseline})
        folds = folds_of([q.id for q in self.judged], c.cross_fit, c.fold_seed) if c.cross_fit else None
        if folds:
            record["folds"] = [sorted(f) for f in folds]
        for label, spec in _estimators(c):
            crossed = folds is not None and spec in TRAINABLE
            for fraction in c.fractions:
                if spec == "random" and c.random_seeds > 1:
                    record["rows"].append(self.random_draws(label, fraction))
                    continue
                if not crossed:
                    path, manifest = self.index(f"{label}-{fraction:g}", spec, fraction)
                    record["rows"].append({"estimator": label, "spec": spec, "fraction": fraction,
                                           **self.cost(manifest), "per_query": self.evaluate(path, self.judged)})
                    continue
                per_query: dict[str, dict[str, float]] = {p: {} for p in c.pipelines}
                costs = []
                for k, fold in enumerate(folds):
                    model = self.fold_model(k, label, spec, {q.id for q in self.judged} - fold)
                    path, manifest = self.index(f"{label}-fold{k}-{fraction:g}", model, fraction)
                    costs.append(self.cost(manifest))
                    for p, values in self.evaluate(path, [q for q in self.judged if q.id in fold]).items():
                        per_query[p].update(values)
                record["rows"].append({"estimator": label, "spec": f"{spec} (cross-fitted, {len(folds)} folds)",
                                       "fraction": fraction, **costs[0], "fold_costs": costs, "per_query": per_query})
            self._write(record)
        self._write(record)
        return record

    def _write(self, record: dict) -> None:
        summarize(record, self.config)
        write_json(self.out / "sweep.json", record)
        (self.out / "sweep.md").write_text(markdown(record, self.config), encoding="utf-8")
        plot(record, self.config, self.out / "sweep.png")


def _stats(row: dict, base: dict, random_row: dict | None, pipeline: str, config: SweepConfig) -> dict:
    _, x, y = paired(row["per_query"][pipeline], base["per_query"][pipeline])
    n = len(x)
    mean, base_mean = sum(x) / n, sum(y) / n
    _, p = paired_test(x, y)
    margin = config.margin * base_mean
    out = {"mean": mean, "delta": mean - base_mean, "relative": (mean - base_mean) / base_mean if base_mean else 0.0,
           "p": p, "margin": margin, "p_equivalence": equivalence_test(x, y, margin) if margin > 0 else 1.0}
    out["equivalent"] = out["p_equivalence"] < config.alpha
    if random_row is not None and random_row is not row:
        _, xr, yr = paired(row["per_query"][pipeline], random_row["per_query"][pipeline])
        _, pr = paired_test(xr, yr)
        out.update({"random_mean": sum(yr) / len(yr), "delta_random": (sum(xr) - sum(yr)) / len(xr), "p_random": pr,
                    "beats_random": pr < config.alpha and sum(xr) > sum(yr)})
    return out


def summarize(record: dict, config: SweepConfig) -> None:
    """Every row's statistics per pipeline, and the largest fraction still equivalent per estimator and pipeline."""
    base = record["rows"][0]
    randoms = {r["fraction"]: r for r in record["rows"] if r.get("spec") == "random"}
    for row in record["rows"]:
        row["stats"] = {p: _stats(row, base, randoms.get(row["fraction"]), p, config) for p in config.pipelines}
    largest: dict[str, dict[str, float]] = {}
    for row in record["rows"][1:]:
        for p, s in row["stats"].items():
            best = largest.setdefault(row["estimator"], {}).setdefault(p, 0.0)
            if s["equivalent"] and row["fraction"] > best:
                largest[row["estimator"]][p] = row["fraction"]
    record["largest_equivalent_fraction"] = largest


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def markdown(record: dict, config: SweepConfig) -> str:
    m = config.measure
    base = record["rows"][0]
    lines = [f"# Static pruning sweep: {Path(config.collection).name}", "",
             f"{record['queries']} judged topics ({Path(config.topics).name}); {m}; equivalence: TOST at a margin of "
             f"{config.margin:.0%} of the unpruned mean, alpha {config.alpha}; p: paired t-test against the unpruned "
             "index; vs random: paired t-test against random pruning of the same fraction" +
             (f" (each query's mean over {config.random_seeds} random draws)." if config.random_seeds > 1 else ".") +
             (f" Trained estimators cross-fitted over {config.cross_fit} folds of the topics (each query answered by "
              "an estimator that never saw its judgments)." if config.cross_fit else "") +
             (" The pruned indexes' dense vectors are copied from the unpruned index (the same passages, encoded "
              "once): build s counts the components built, quality s the scoring." if config.reuse_vectors
              and "dense" in config.components else ""), ""]
    for p in config.pipelines:
        lines += [f"## {p}", "", f"| estimator | pruned | documents | index MiB | build s | quality s | {m} | Δ | p | "
                  "TOST p | equivalent | vs random |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
        for row in record["rows"]:
            s = row["stats"][p]
            build = sum(v for n, v in row["build_seconds"].items() if n not in row["copied"])
            vs = ""
            if "p_random" in s:
                vs = f"{s['delta_random']:+.4f} (p {_p(s['p_random'])}){' **better**' if s['beats_random'] else ''}"
            quality = f"{row['quality_seconds']:.1f}" + (" (cached)" if row["quality_cached"] else "")
            lines.append(f"| {row['estimator']} | {row['fraction']:.0%} | {row['documents']:,} | "
                         f"{row['bytes'] / 2**20:.1f} | {build:.1f} | {quality if row['fraction'] else '-'} | "
                         f"{s['mean']:.4f} | {s['relative']:+.1%} | {_p(s['p']) if row is not base else '-'} | "
                         f"{_p(s['p_equivalence']) if row is not base else '-'} | "
                         f"{('yes' if s['equivalent'] else 'no') if row is not base else '-'} | {vs} |")
        lines.append("")
    lines += ["## Largest fraction pruned with an equivalent result", "",
              "| estimator | " + " | ".join(config.pipelines) + " |", "|---|" + "---:|" * len(config.pipelines)]
    for estimator, by_pipeline in record.get("largest_equivalent_fraction", {}).items():
        cells = " | ".join(f"{by_pipeline.get(p, 0.0):.0%}" for p in config.pipelines)
        lines.append(f"| {estimator} | {cells} |")
    return "\n".join(lines) + "\n"


def plot(record: dict, config: SweepConfig, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), dpi=110)
    base = record["rows"][0]
    copied = sorted({n for r in record["rows"] for n in r.get("copied", [])})  # not built again: left out of the times
    estimators = list(dict.fromkeys(r["estimator"] for r in record["rows"][1:]))
    styles = ["-", "--", ":", "-."]
    for e_i, estimator in enumerate(estimators):
        rows = [base] + sorted((r for r in record["rows"] if r["estimator"] == estimator), key=lambda r: r["fraction"])
        xs = [r["fraction"] * 100 for r in rows]
        color = f"C{e_i}"
        for p_i, p in enumerate(config.pipelines):
            axes[0].plot(xs, [r["stats"][p]["mean"] for r in rows], styles[p_i % 4], marker="o", color=color,
                         label=f"{estimator} · {p}")
        axes[1].plot(xs, [r["bytes"] / 2**20 for r in rows], marker="o", color=color, label=estimator)
        axes[2].plot(xs, [sum(v for n, v in r["build_seconds"].items() if n not in copied) +
                          (r["quality_seconds"] if r["fraction"] else 0) for r in rows],
                     marker="o", color=color, label=estimator)
    for p_i, p in enumerate(config.pipelines):
        mean = base["stats"][p]["mean"]
        axes[0].axhspan(mean * (1 - config.margin), mean * (1 + config.margin), color="grey", alpha=0.12)
    axes[0].set_ylabel(f"{config.measure} (grey: ±{config.margin:.0%} of unpruned)")
    axes[1].set_ylabel("index size (MiB)")
    built = [n for n in config.components if n not in copied]
    axes[2].set_ylabel(f"{' + '.join(built)} build + quality scoring (s)")
    for ax in axes:
        ax.set_xlabel("documents pruned (%)")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.suptitle(f"Static pruning of {Path(config.collection).name}: {', '.join(config.components)}")
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def sweep(config: SweepConfig, log: Callable[[str], None] = print,
          train_estimator: TrainEstimator | None = None) -> dict:
    """Run the sweep (cross-fitted estimators trained by ``train_estimator``); write and return its record."""
    start = time.perf_counter()
    record = Sweep(config, log, train_estimator).run()
    log(f"sweep done in {time.perf_counter() - start:.0f}s: {Path(config.out) / 'sweep.md'}, "
        f"{Path(config.out) / 'sweep.png'}")
    return record
