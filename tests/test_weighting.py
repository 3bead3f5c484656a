"""Learned term weighting on a tiny hand-made corpus: tokenization shared by documents and queries, DeepCT
pseudo-document frequencies, DeepImpact quantization and impact scores, checked against the formulas; the model
card; a few training steps of each head."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from indexer.weighting.build import deepct_tf, impact_scale, pseudo_document, quantize
from indexer.weighting.terms import terms, unique_terms, word_terms

DOCS = [
    {"id": "d1", "title": "Protein folding", "text": "Proteins fold; misfolded proteins aggregate in neurons."},
    {"id": "d2", "title": "Running mice", "text": "Mice running on wheels ran faster than sedentary mice."},
    {"id": "d3", "title": "", "text": "p53-dependent apoptosis after DNA damage in the U.S. cohort (3.5 mg/kg)."},
    {"id": "d4", "title": "Vitamin D", "text": "Vitamin D deficiency and bone density in elderly women."},
]
QUERIES = [("q1", "misfolded protein aggregates"), ("q2", "do mice run faster?"), ("q3", "vitamin D bone")]


def test_formulas_by_hand():
    assert deepct_tf(np.array([0.004, 0.005, 0.123, 1.5, -0.2])).tolist() == [0, 0, 12, 150, -20]  # half to even; < 1 dropped later
    assert deepct_tf(np.array([0.0151])).tolist() == [2]
    assert impact_scale(2.0) == 128.0
    assert quantize(np.array([0.0, 0.001, 1.0, 2.0]), 128.0).tolist() == [0, 1, 128, 256]
    assert pseudo_document(["a", "b", "c"], np.array([2, 0, 3])) == "a a c c c"


def test_query_and_document_tokenization_agree():
    words, pairs = word_terms("The proteins of p53-dependent U.S. mice")
    assert words == ["The", "proteins", "of", "p53", "dependent", "U", "S", "mice"]
    assert [t for _, t in pairs] == ["protein", "p53", "depend", "u", "s", "mice"]  # "the", "of": stopwords
    doc = set(terms(DOCS[0]["title"] + " " + DOCS[0]["text"]))
    assert {"protein", "misfold", "aggreg"} <= doc and set(unique_terms(QUERIES[0][1])) <= doc
    assert unique_terms("Running RUNS running") == ["run"]
    assert unique_terms("") == [] and unique_terms("the of and") == []


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A corpus, two untrained heads saved as artifacts (fixed seed), and an index with both learned components."""
    import torch

    from indexer.build import build_index
    from indexer.weighting.model import Backbone, make_head, save

    root = tmp_path_factory.mktemp("weighting")
    coll = root / "coll"
    coll.mkdir()
    (coll / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    (coll / "queries.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in QUERIES), encoding="utf-8")
    (coll / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\nq3 0 d4 1\n", encoding="utf-8")
    backbone = Backbone(max_length=16)  # small windows: long passages are cut at word boundaries
    models = {}
    for kind in ("deepct", "deepimpact"):
        torch.manual_seed(0)
        head = make_head(kind, backbone.dim)
        if kind == "deepct":
            torch.nn.init.normal_(head.weight, std=0.05)
            torch.nn.init.constant_(head.bias, 0.3)
        models[kind] = save(root / kind, head, {"kind": kind, "base_model": "all-MiniLM-L6-v2", "max_length": 16})
    index = root / "index"
    build_index(coll, index, components=("bm25", "deepct", "deepimpact"),
                learned={"deepct_model": str(models["deepct"]), "deepimpact_model": str(models["deepimpact"])})
    return coll, models, index


def _postings(path) -> dict[str, dict[str, int]]:
    """docid -> {term: stored frequency} of a Lucene index, read term by term."""
    from jnius import autoclass

    from ranker.lucene_search import open_reader

    reader = open_reader(path)
    try:
        ids = (path / "docids.txt").read_text(encoding="utf-8").splitlines()
        out: dict[str, dict[str, int]] = {d: {} for d in ids}
        te = autoclass("org.apache.lucene.index.MultiTerms").getTerms(reader, "contents").iterator()
        no_more = autoclass("org.apache.lucene.search.DocIdSetIterator").NO_MORE_DOCS
        while (ref := te.next()) is not None:
            term = ref.utf8ToString()
            pe = te.postings(None, 8)  # PostingsEnum.FREQS
            while (doc := pe.nextDoc()) != no_more:
                out[ids[doc]][term] = pe.freq()
        return out
    finally:
        reader.close()


def _expected(models, kind):
    from indexer.weighting.model import TermWeighter

    m = TermWeighter(models[kind])
    return {d["id"]: dict(zip(*m.weights([(d["title"] + " " + d["text"]) if d["title"] else d["text"]])[0]))
            for d in DOCS}


def test_deepct_pseudo_documents_hold_round_100w(tiny):
    _, models, index = tiny
    weights = _expected(models, "deepct")
    postings = _postings(index / "deepct")
    for doc_id, w in weights.items():
        want = {t: int(round(v * 100)) for t, v in w.items() if round(v * 100) >= 1}
        assert postings[doc_id] == want
    manifest = json.loads((index / "manifest.json").read_text())
    card_sha = manifest["components"]["deepct"]["model"]["card_sha256"]
    import hashlib

    assert card_sha == hashlib.sha256((models["deepct"] / "card.json").read_bytes()).hexdigest()


def test_impact_index_and_scores_follow_the_formulas(tiny):
    from ranker.index import Index
    from ranker.learned import ImpactRetriever
    from weir.types import Query

    _, models, index = tiny
    impacts = _expected(models, "deepimpact")
    max_impact = max(max(w.values()) for w in impacts.values())
    manifest = json.loads((index / "manifest.json").read_text())
    q = manifest["components"]["deepimpact"]["parameters"]["quantization"]
    assert q["max_impact"] == pytest.approx(max_impact, rel=1e-6)
    assert q["scale"] == pytest.approx(256 / max_impact, rel=1e-6)
    quantized = {d: {t: math.ceil(v * q["scale"]) for t, v in w.items() if math.ceil(v * q["scale"]) >= 1}
                 for d, w in impacts.items()}
    assert _postings(index / "deepimpact") == quantized
    assert max(max(w.values()) for w in quantized.values()) == 256
    run = ImpactRetriever(Index(index))([Query(q, t) for q, t in QUERIES], k=10)
    for qid, text in QUERIES:
        qt = set(unique_terms(text))
        want = {d: sum(v for t, v in w.items() if t in qt) for d, w in quantized.items()}
        got = {h.doc_id: h.score for h in run[qid]}
        assert got == {d: float(s) for d, s in want.items() if s > 0}


def test_learned_pipelines_run(tiny):
    from ranker import pipelines
    from ranker.index import Index
    from weir.types import Query

    _, _, index = tiny
    idx = Index(index)
    for name in ("deepct", "deepimpact", "deepimpact+bm25"):
        run = pipelines.build(name, idx)([Query("q3", "vitamin D bone")], k=3)
        assert run["q3"] and {h.doc_id for h in run["q3"]} <= {d["id"] for d in DOCS}
        assert name != "deepimpact+bm25" or run["q3"][0].doc_id == "d4"  # BM25's half ranks the vitamin D paper first


@pytest.mark.parametrize("kind", ["deepct", "deepimpact"])
def test_training_writes_a_model_card(tiny, tmp_path, monkeypatch, kind):
    from indexer.weighting.train import TrainConfig, train

    monkeypatch.setenv("WEIR_CACHE", str(tmp_path / "cache"))
    coll, _, _ = tiny
    card = train(TrainConfig(kind=kind, collection=str(coll), queries=str(coll / "queries.tsv"),
                             qrels=str(coll / "qrels.txt"), out=str(tmp_path / kind), epochs=2, negatives=2,
                             val_fraction=0.34, max_length=32, titles=True), log=lambda m: None)
    saved = json.loads((tmp_path / kind / "card.json").read_text())
    assert saved["kind"] == kind and saved["head_sha256"] and saved["data"]["validation_queries"] == 1
    assert saved["metrics"]["validation"]["epoch"] in (1, 2) and card["parameters"]["seed"] == 13
    assert (kind == "deepimpact") == ("fusion" in saved)


def test_one_command_builds_both_learned_indexes_of_a_collection(tmp_path, capsys):
    """`weir index build --with bm25,deepct,deepimpact` with the committed artifacts, on ADI (82 documents): one
    encoder pass for both heads, a progress bar, and searchable deepct / deepimpact / deepimpact+bm25 pipelines."""
    from tests.conftest import collection
    from weir.cli import main

    adi = collection("adi")
    out = tmp_path / "adi"
    assert main(["index", "build", "--collection", str(adi), "--out", str(out), "--with", "bm25,deepct,deepimpact"]) == 0
    err = capsys.readouterr().err
    assert "deepimpact+deepct weights" in err or "deepct+deepimpact weights" in err
    manifest = json.loads((out / "manifest.json").read_text())
    for name in ("deepct", "deepimpact"):
        entry = manifest["components"][name]
        assert entry["documents"] == 82 and entry["model"]["card_sha256"] and entry["model"]["kind"] == name
    assert manifest["components"]["deepimpact"]["parameters"]["quantization"]["bits"] == 8
    for pipeline in ("deepct", "deepimpact", "deepimpact+bm25"):
        assert main(["run", "--index", str(out), "--topics", str(adi / "queries.tsv"), "--out",
                     str(tmp_path / f"{pipeline}.run"), "--pipeline", pipeline, "-k", "10"]) == 0
        assert (tmp_path / f"{pipeline}.run").stat().st_size > 0
