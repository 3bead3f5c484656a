"""Experiments: pipeline specs with options, experiment files, run-file experiments, bad input found before running."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from weir.evaluation.experiment import Config, load_config, parse_pipelines, run_experiment
from weir import cli
from weir.core.types import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "eval"


QRELS = FIXTURES / "qrels.txt"


RUN_A, RUN_B = FIXTURES / "run_a.trec", FIXTURES / "run_b.trec"


def test_parse_pipelines_with_options():
    specs = parse_pipelines("bm25, bm25[k1=1.2,b=0.75] ,bm25>>ltr[depth=50,name=x]")
    assert [(s.label, s.pipeline, s.options) for s in specs] == [
        ("bm25", "bm25", {}),
        ("bm25[k1=1.2,b=0.75]", "bm25", {"k1": 1.2, "b": 0.75}),
        ("bm25>>ltr[depth=50,name=x]", "bm25>>ltr", {"depth": 50, "name": "x"}),
    ]
    for bad in ("bm25[k1=1", "bm25]", "bm25[k1]"):
        with pytest.raises(InputError):
            parse_pipelines(bad)


def test_load_config_toml_and_json(tmp_path):
    (tmp_path / "e.toml").write_text(
        'index = "idx"\ntopics = "/abs/topics.tsv"\nqrels = "qrels.txt"\nmeasures = ["nDCG@10", "AP"]\n'
        'baseline = "bm25"\ntest = "wilcoxon"\n'
        '[[pipelines]]\nname = "bm25"\npipeline = "bm25"\n'
        '[[pipelines]]\nname = "tuned"\npipeline = "bm25"\noptions = {k1 = 1.2, b = 0.75}\n')
    settings = load_config(tmp_path / "e.toml")
    assert settings["indexes"] == [str(tmp_path / "idx")]
    assert settings["topics"] == "/abs/topics.tsv" and settings["qrels"] == str(tmp_path / "qrels.txt")
    assert [(p.label, p.options) for p in settings["pipelines"]] == [("bm25", {}), ("tuned", {"k1": 1.2, "b": 0.75})]
    config = Config(**settings)
    assert config.test == "wilcoxon" and config.measures == ["nDCG@10", "AP"]

    (tmp_path / "e.json").write_text(json.dumps({"qrels": "q", "runs": ["a.trec"], "pipelines": ["bm25,bm25[b=0.5]"]}))
    settings = load_config(tmp_path / "e.json")
    assert settings["runs"] == [str(tmp_path / "a.trec")] and len(settings["pipelines"]) == 2

    (tmp_path / "bad.json").write_text(json.dumps({"qrels": "q", "measure": "AP"}))
    with pytest.raises(InputError, match="unknown setting"):
        load_config(tmp_path / "bad.json")
    (tmp_path / "broken.toml").write_text("index = ")
    with pytest.raises(InputError, match="not a valid experiment file"):
        load_config(tmp_path / "broken.toml")


def test_run_files_experiment(tmp_path):
    record = run_experiment(Config(qrels=str(QRELS), runs=[str(RUN_A), str(RUN_B)], measures=["nDCG@10", "AP"]),
                            tmp_path / "out", command=["weir", "experiment"])
    assert record["baseline"] == "run_a"
    assert [s["label"] for s in record["systems"]] == ["run_a", "run_b"]
    # run_b is ideal on q1 and q2 and retrieves nothing for q3
    assert record["systems"][1]["means"] == pytest.approx({"nDCG@10": 2 / 3, "AP": 2 / 3})
    result = record["significance"]["results"]["AP"]["run_b"]
    assert result["n"] == 3 and 0 < result["p"] <= 1 and result["p_holm"] == result["p"]  # one comparison
    assert record["qrels"]["sha256"] and record["versions"]["ir-measures"]
    out = tmp_path / "out"
    for name in ("results.md", "results.json", "results.csv", "per_query.csv", "effectiveness.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "effectiveness.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "results.md").read_text()
    assert "run_a (baseline)" in md and "ms/query" not in md  # no latency for run files
    rows = list(csv.DictReader(open(out / "per_query.csv")))
    b_ap = {r["qid"]: float(r["delta"]) for r in rows if r["system"] == "run_b" and r["measure"] == "AP"}
    assert b_ap == pytest.approx({"q1": 1 - (1 + 2 / 3) / 3, "q2": 1 - 1 / 3, "q3": 0.0})
    # URisk of the first measure against the baseline: each query's change, losses counted 1 + 5 times
    deltas = [float(r["delta"]) for r in rows if r["system"] == "run_b" and r["measure"] == "nDCG@10"]
    expected = sum(d if d >= 0 else 6 * d for d in deltas) / len(deltas)
    assert record["risk"]["measure"] == "nDCG@10" and record["risk"]["alpha"] == 5
    assert record["risk"]["urisk"] == {"run_b": pytest.approx(expected, abs=1e-6)}
    assert "URisk of nDCG@10 against run_a" in md and f"run_b {expected:+.4f}" in md


def test_bad_input_fails_before_running(tmp_path):
    with pytest.raises(InputError, match="nothing to compare"):
        run_experiment(Config(qrels=str(QRELS)), tmp_path)
    with pytest.raises(InputError, match="unknown measure"):
        run_experiment(Config(qrels=str(QRELS), runs=[str(RUN_A)], measures=["nDCG@x"]), tmp_path)
    with pytest.raises(InputError, match="baseline 'nope'"):
        run_experiment(Config(qrels=str(QRELS), runs=[str(RUN_A)], baseline="nope"), tmp_path)
    with pytest.raises(InputError, match="need an index"):
        run_experiment(Config(qrels=str(QRELS), pipelines=parse_pipelines("bm25")), tmp_path)
    assert cli.main(["experiment", "--runs", str(tmp_path / "missing.trec"), "--qrels", str(QRELS),
                     "--out", str(tmp_path)]) == 2
