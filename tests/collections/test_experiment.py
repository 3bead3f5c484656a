"""`weir experiment` on ADI: tables, significance, runs and plots; several indexes."""

from __future__ import annotations

import json

import pytest

from weir.evaluation.experiment import Config, parse_pipelines, run_experiment
from weir.evaluation.measures import evaluate
from weir import cli
from tests.conftest import collection
from weir.core.trec import read_qrels
from weir.core.types import Run

pytestmark = pytest.mark.data  # every test here reads ../shared/collections


@pytest.mark.data
def test_experiment_command_on_adi(index_factory, tmp_path, capsys):
    adi = collection("adi")
    index = index_factory("adi")
    out = tmp_path / "exp"
    status = cli.main(["experiment", "--index", str(index), "--topics", str(adi / "queries.tsv"),
                       "--qrels", str(adi / "qrels.txt"), "--pipelines", "bm25,bm25[k1=1.2,b=0.75]",
                       "--measures", "nDCG@10,AP,R@100", "--test", "wilcoxon", "--warmup", "2",
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
                                   measures=["nDCG@10"], warmup=0, options={"device": "cpu"}), tmp_path)
    labels = [s["label"] for s in record["systems"]]
    assert len(labels) == 2 and all(label.endswith("adi-bm25:bm25") for label in labels)
    assert len(record["indexes"]) == 2
    assert (tmp_path / "effectiveness-index-size.png").stat().st_size > 0
    assert "index MiB" in (tmp_path / "results.md").read_text()
    # the same index, built the same way, gives the same figures: no significant difference
    assert not record["significance"]["results"]["nDCG@10"][labels[1]]["significant"]
