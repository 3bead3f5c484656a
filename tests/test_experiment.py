"""Evaluation against trec_eval's figures, and `weir experiment` end to end (run files; ADI pipelines; DL 2019)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import pytrec_eval

from indexer.collections import read_qrels
from ranker.evaluate import evaluate
from ranker.experiment import Config, load_config, parse_pipelines, run_experiment
from tests.conftest import collection
from weir import cli
from weir.types import InputError, Run

FIXTURES = Path(__file__).parent / "fixtures" / "eval"
QRELS = FIXTURES / "qrels.txt"
RUN_A, RUN_B = FIXTURES / "run_a.trec", FIXTURES / "run_b.trec"


# --- measures: ours (ir-measures) against trec_eval's definitions and pytrec_eval ------------------------------

def test_measures_match_hand_computed_trec_eval_values():
    means, by_query = evaluate(Run.read_trec(RUN_A), read_qrels(QRELS), ["nDCG@10", "RR@10", "AP", "R@100"],
                               per_query=True)
    # q1: relevant d1 (1), d3 (2), d7 (1, not retrieved); hits d1 d2 d3 d4 d5
    ap_q1 = (1 / 1 + 2 / 3) / 3
    ndcg_q1 = (1 + 2 / math.log2(4)) / (2 + 1 / math.log2(3) + 1 / math.log2(4))  # trec_eval: gain = grade
    # q2: relevant d2 only (d5 is judged 0), at rank 3
    # q3 (judged, not retrieved) counts 0, as trec_eval -c; q4 (retrieved, not judged) is ignored
    assert by_query["AP"] == pytest.approx({"q1": ap_q1, "q2": 1 / 3, "q3": 0.0})
    assert by_query["RR@10"] == pytest.approx({"q1": 1.0, "q2": 1 / 3, "q3": 0.0})
    assert by_query["nDCG@10"] == pytest.approx({"q1": ndcg_q1, "q2": 1 / math.log2(4), "q3": 0.0})
    assert by_query["R@100"] == pytest.approx({"q1": 2 / 3, "q2": 1.0, "q3": 0.0})
    assert means["AP"] == pytest.approx((ap_q1 + 1 / 3 + 0) / 3)


@pytest.mark.parametrize("binary_min_rel", [1, 2])
def test_measures_match_pytrec_eval(binary_min_rel):
    qrels, run = read_qrels(QRELS), Run.read_trec(RUN_A)
    ours = evaluate(run, qrels, ["nDCG@10", "AP", "R@100", "P@5"], binary_min_rel=binary_min_rel, per_query=True)[1]
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map", "recall.100", "P.5"},
                                               relevance_level=binary_min_rel)
    reference = evaluator.evaluate(run.to_dict())  # the queries the run retrieved for: q1, q2
    reference["q3"] = {name: 0.0 for name in reference["q1"]}  # judged, not retrieved: 0 (trec_eval -c)
    for ours_name, trec_name in [("AP", "map"), ("R@100", "recall_100"), ("P@5", "P_5")]:
        assert ours[ours_name] == pytest.approx({q: v[trec_name] for q, v in reference.items()})
    # nDCG uses the grades themselves whatever the binary threshold
    assert ours["nDCG@10"] == pytest.approx({q: v["ndcg_cut_10"] for q, v in reference.items()})
    if binary_min_rel == 2:  # only d3 (grade 2) counts for q1, at rank 3; q2 has nothing relevant
        assert ours["AP"] == pytest.approx({"q1": 1 / 3, "q2": 0.0, "q3": 0.0})


# --- configuration ------------------------------------------------------------------------------------------------

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


# --- run files ----------------------------------------------------------------------------------------------------

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


# --- pipelines over real collections --------------------------------------------------------------------------

@pytest.mark.data
def test_experiment_command_on_adi(index_factory, tmp_path, capsys):
    adi = collection("adi")
    index = index_factory("adi")
    out = tmp_path / "exp"
    status = cli.main(["experiment", "--index", str(index), "--topics", str(adi / "queries.tsv"),
                       "--qrels", str(adi / "qrels.txt"), "--pipelines", "bm25,bm25[k1=1.2,b=0.75]",
                       "--measures", "nDCG@10,AP,R@100", "--test", "wilcoxon", "--warmup", "2", "--threads", "1",
                       "--out", str(out)])
    assert status == 0
    printed = capsys.readouterr().out
    assert "| bm25 (baseline)" in printed and "bm25[k1=1.2,b=0.75]" in printed and "ms/query" in printed
    for name in ("results.md", "results.json", "results.csv", "per_query.csv", "effectiveness-latency.png",
                 "runs/bm25.trec", "runs/bm25_k1=1.2_b=0.75.trec"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "effectiveness-latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((out / "results.json").read_text())
    bm25, tuned = record["systems"]
    assert bm25["means"]["nDCG@10"] == pytest.approx(0.4747, abs=5e-5)  # the collection's README
    assert bm25["means"]["AP"] == pytest.approx(0.4016, abs=5e-5)
    assert tuned["stages"]["stages"][0] | {"class": None} == {"name": "bm25", "class": None, "k1": 1.2, "b": 0.75}
    assert bm25["ms_per_query"] > 0 and set(bm25["stage_ms_per_query"]) == {"bm25"}
    assert record["significance"]["test"].startswith("Wilcoxon")
    assert set(record["significance"]["results"]["AP"]) == {"bm25[k1=1.2,b=0.75]"}
    idx = record["indexes"]["adi-bm25"]
    assert idx["manifest"]["collection"]["sha256"] == idx["collection_sha256"] and len(idx["manifest_sha256"]) == 64
    assert record["topics"]["queries"] == 35 and len(record["topics"]["sha256"]) == 64
    assert record["command"][0] == "weir" and record["versions"]["pyserini"]
    # the saved run evaluates to the figure in the table
    saved = evaluate(Run.read_trec(out / "runs" / "bm25.trec"), read_qrels(adi / "qrels.txt"), ["nDCG@10"])
    assert saved["nDCG@10"] == pytest.approx(bm25["means"]["nDCG@10"])


@pytest.mark.data
def test_several_indexes_label_rows_and_plot_size(index_factory, tmp_path):
    adi = collection("adi")
    first, second = index_factory("adi"), index_factory("adi", threads=1)
    record = run_experiment(Config(qrels=str(adi / "qrels.txt"), topics=str(adi / "queries.tsv"),
                                   indexes=[str(first), str(second)], pipelines=parse_pipelines("bm25"),
                                   measures=["nDCG@10"], warmup=0, options={"threads": 1}), tmp_path)
    labels = [s["label"] for s in record["systems"]]
    assert len(labels) == 2 and all(label.endswith("adi-bm25:bm25") for label in labels)
    assert len(record["indexes"]) == 2
    assert (tmp_path / "effectiveness-index-size.png").stat().st_size > 0
    assert "index MiB" in (tmp_path / "results.md").read_text()
    # the same index, built the same way, gives the same figures: no significant difference
    assert not record["significance"]["results"]["nDCG@10"][labels[1]]["significant"]


@pytest.mark.data
def test_dl19_bm25_run_reproduces_the_published_figure(tmp_path):
    dl = collection("msmarco-passage-trec-dl-pool")
    runs = [str(dl / "runs" / "BM25_dl19.top100.trec"), str(dl / "runs" / "D_BERT_KD_TASB_dl19.top100.trec")]
    record = run_experiment(Config(qrels=str(dl / "qrels.txt"), runs=runs, binary_min_rel=2), tmp_path)
    bm25, tasb = record["systems"]
    assert round(bm25["means"]["nDCG@10"], 4) == 0.5058 and bm25["queries"] == 43
    assert record["significance"]["results"]["nDCG@10"][tasb["label"]]["significant"]
