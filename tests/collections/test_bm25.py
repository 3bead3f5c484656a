"""BM25 reproduces the published figures on SciFact, ArguAna and TREC DL 2019."""

from __future__ import annotations

import json

import pytest

from weir.evaluation.experiment import Config, run_experiment
from weir.cli import main
from tests.conftest import collection

pytestmark = pytest.mark.data  # every test here reads ../shared/collections


def evaluate(capsys, run, qrels, *extra) -> dict:
    capsys.readouterr()
    assert main(["eval", "--run", str(run), "--qrels", str(qrels), "--format", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)["measures"]


def test_scifact_bm25_reproduces_published_figures(index_factory, tmp_path, capsys):
    coll = collection("beir-scifact")
    run = tmp_path / "scifact.bm25.trec"
    assert main(["run", "--index", str(index_factory("beir-scifact")), "--topics", str(coll / "queries.tsv"),
                 "--out", str(run)]) == 0
    m = evaluate(capsys, run, coll / "qrels.txt")
    assert m["nDCG@10"] == pytest.approx(0.6789, abs=0.0005)
    assert m["R@100"] == pytest.approx(0.9253, abs=0.0005)
    assert m["R@1000"] == pytest.approx(0.9767, abs=0.0005)


def test_arguana_bm25_with_identical_id_filter(index_factory, tmp_path, capsys):
    coll = collection("beir-arguana")
    run = tmp_path / "arguana.bm25.trec"
    assert main(["run", "--index", str(index_factory("beir-arguana")), "--topics", str(coll / "queries.tsv"),
                 "--out", str(run), "-k", "100", "--remove-identical"]) == 0
    m = evaluate(capsys, run, coll / "qrels.txt", "--measures", "nDCG@10,R@100")
    assert m["nDCG@10"] == pytest.approx(0.3970, abs=0.0005)
    assert m["R@100"] == pytest.approx(0.9324, abs=0.0005)


def test_dl19_bm25_full_corpus_run_evaluates_to_published_figure(capsys):
    coll = collection("msmarco-passage-trec-dl-pool")
    m = evaluate(capsys, coll / "runs" / "BM25_dl19.top100.trec", coll / "qrels.txt", "--min-rel", "2")
    assert m["nDCG@10"] == pytest.approx(0.5058, abs=0.0005)


def test_dl19_bm25_candidates_pass_through_a_pipeline_unchanged(tmp_path, index_factory, capsys):
    """`weir run --candidates RUN` with no reranker re-ranks nothing: the run evaluates exactly as the input."""
    coll = collection("msmarco-passage-trec-dl-pool")
    out = tmp_path / "passthrough.trec"
    assert main(["run", "--index", str(index_factory("adi")), "--topics", str(coll / "queries.tsv"),
                 "--candidates", str(coll / "runs" / "BM25_dl19.top100.trec"), "-k", "100", "--out", str(out)]) == 0
    m = evaluate(capsys, out, coll / "qrels.txt", "--min-rel", "2")
    assert m["nDCG@10"] == pytest.approx(0.5058, abs=0.0005)


@pytest.mark.data
def test_dl19_bm25_run_reproduces_the_published_figure(tmp_path):
    dl = collection("msmarco-passage-trec-dl-pool")
    runs = [str(dl / "runs" / "BM25_dl19.top100.trec"), str(dl / "runs" / "D_BERT_KD_TASB_dl19.top100.trec")]
    record = run_experiment(Config(qrels=str(dl / "qrels.txt"), runs=runs, min_rel=2), tmp_path)
    bm25, tasb = record["systems"]
    assert round(bm25["means"]["nDCG@10"], 4) == 0.5058 and bm25["queries"] == 43
    assert record["significance"]["results"]["nDCG@10"][tasb["label"]]["significant"]
