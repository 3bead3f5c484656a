"""The stage contract, asked of every registered stage (as PyTerrier's and rerankers' shared tests do): on a small index
with every component, each first stage returns hits sorted by score and ranked from 1, at most ``k`` of them, each
carrying its own score; each reranker keeps exactly the candidates it was given, reorders its top ``depth`` by its
own score and leaves the rest below in their order; a pipeline records every stage's wall time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from weir.ranker import registry
from weir.ranker.options import PipelineOptions
from weir.ranker.stage import CandidateRun, Pipeline, Reranker
from weir.core.types import Query

TEXTS = [
    ("Coffee and health", "Drinking coffee may lower the risk of liver disease and type 2 diabetes."),
    ("Tea", "Green tea contains catechins; tea drinkers report less heart disease."),
    ("Roasting", "Coffee beans are roasted at high temperature, which changes their flavour."),
    ("Sleep", "Caffeine in coffee and tea delays sleep onset in adults."),
    ("Rain", "The rain in Spain stays mainly in the plain."),
    ("Diabetes", "Type 2 diabetes risk rises with obesity and falls with exercise."),
    ("Liver", "The liver clears caffeine; liver disease slows caffeine clearance."),
    ("Heart", "Heart disease is the leading cause of death worldwide."),
    ("Exercise", "Regular exercise lowers blood pressure and the risk of heart disease."),
    ("Espresso", "Espresso is coffee brewed by forcing hot water through finely ground beans."),
    ("", "Caffeine is a stimulant found in coffee, tea, cola and chocolate."),
    ("Chocolate", "Dark chocolate contains flavonoids and a little caffeine."),
]
QUERIES = [Query("q1", "coffee and liver disease"), Query("q2", "caffeine sleep"), Query("q3", "heart disease risk")]
K, DEPTH = 5, 4


def write_corpus(directory):
    """TEXTS as a collection directory (corpus.jsonl, documents d0..d11); returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "corpus.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "title": title, "text": text}) + "\n" for i, (title, text) in enumerate(TEXTS)))
    return directory


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """Every index component over TEXTS (the committed learned-weight heads), and an untrained cross-encoder."""
    import torch

    from weir.indexer.build import build_index
    from weir.indexer.index_dir import Index

    root = tmp_path_factory.mktemp("contract")
    build_index(write_corpus(root / "coll"), root / "index", components=("bm25", "dense", "deepct", "deepimpact"))
    crossencoder = root / "crossencoder"
    crossencoder.mkdir()
    (crossencoder / "crossencoder.json").write_text(json.dumps(
        {"kind": "crossencoder", "base_model": "all-MiniLM-L6-v2", "max_length": 64}))
    torch.manual_seed(0)
    torch.save(torch.nn.Linear(384, 1).state_dict(), crossencoder / "cls_head.pt")
    return Index(root / "index"), PipelineOptions.from_mapping({"crossencoder_model": str(crossencoder),
                                                                "depth_per_stage": 20})


def _sorted_and_ranked(hits) -> bool:
    return (all(a.score >= b.score for a, b in zip(hits, hits[1:]))
            and [h.rank for h in hits] == list(range(1, len(hits) + 1)))


@pytest.mark.parametrize("name", sorted(registry.FIRST_STAGES))
def test_first_stage_contract(index, name):
    opened, options = index
    pipeline = registry.build(name, opened, options)
    run = pipeline(QUERIES, k=K)
    assert set(run) == {q.id for q in QUERIES}
    for q in QUERIES:
        hits = run[q.id]
        assert 0 < len(hits) <= K and _sorted_and_ranked(hits)
        assert len({h.doc_id for h in hits}) == len(hits)
        assert all(h.stage_scores[name] == pytest.approx(h.score) for h in hits)
    assert set(run.timings) == {name} and run.timings[name] > 0
    # the first k hits of a deeper run: k only cuts
    deeper = pipeline(QUERIES, k=K + 3)
    assert all([h.doc_id for h in deeper[q.id][:K]] == [h.doc_id for h in run[q.id]] for q in QUERIES)


@pytest.mark.parametrize("name", sorted(registry.RERANKERS))
def test_reranker_contract(index, name):
    opened, options = index
    candidates = registry.build("bm25", opened, options)(QUERIES, k=len(TEXTS))
    reranker = registry.build_stage(name, opened, options)
    assert isinstance(reranker, Reranker)
    pipeline = Pipeline([CandidateRun(candidates), reranker])  # as `weir run --candidates` does
    run = pipeline(QUERIES, k=len(TEXTS), depth=DEPTH)
    for q in QUERIES:
        given, got = candidates[q.id], run[q.id]
        assert sorted(h.doc_id for h in got) == sorted(h.doc_id for h in given)  # none dropped, none invented
        assert _sorted_and_ranked(got)
        top = {h.doc_id for h in given[:DEPTH]}
        assert {h.doc_id for h in got[:DEPTH]} == top  # the top depth reordered among themselves
        assert all(name in h.stage_scores and h.stage_scores[name] == pytest.approx(h.score) for h in got[:DEPTH])
        assert [h.doc_id for h in got[DEPTH:]] == [h.doc_id for h in given[DEPTH:]]  # the rest keep their order
        assert all("bm25" in h.stage_scores for h in got)  # earlier stages' scores are kept
    assert list(run.timings) == ["candidates", name] and run.timings[name] > 0
    cut = pipeline(QUERIES, k=2, depth=DEPTH)
    assert all([h.doc_id for h in cut[q.id]] == [h.doc_id for h in run[q.id][:2]] for q in QUERIES)



@pytest.mark.parametrize("spec", sorted(registry.FIRST_STAGES) + [f"bm25>>{r}" for r in sorted(registry.RERANKERS)])
def test_a_query_gets_the_same_answer_alone_and_in_a_batch(index, spec):
    """What a stage computes for a query does not depend on the other queries of its batch, to the last bit: a
    micro-batching service answers a query exactly as it would alone. (Document-side caches, such as the attention
    reranker's passage states, are filled by the first run here, as a serving process fills them.)"""
    opened, options = index
    pipeline = registry.build(spec, opened, options)
    together = pipeline(QUERIES, k=K, depth=DEPTH)
    for q in QUERIES:
        alone = pipeline([q], k=K, depth=DEPTH)[q.id]
        assert [(h.doc_id, h.score, h.stage_scores) for h in alone] == \
               [(h.doc_id, h.score, h.stage_scores) for h in together[q.id]]


def test_ltr_takes_the_shipped_model_of_the_features_its_stages_give(index):
    """One LTR model per feature set (:func:`registry.ltr_model_for`): after a lexical first stage or a run's
    candidates it boosts from the cosine of the index's dense vectors (``ltr-cosine``); after a stage whose score
    carries a neural model's, or over an index without dense vectors, from the incoming score (``ltr``); a model
    the options name is taken as named."""
    from types import SimpleNamespace

    from weir.core.runtime import MODELS

    opened, options = index
    picked = {spec: Path(registry.build(spec, opened, options).stages[-1].model_path).name
              for spec in ("bm25>>ltr", "deepimpact>>ltr", "hybrid>>ltr", "dense>>ltr", "bm25>>attention>>ltr")}
    assert picked == {"bm25>>ltr": "ltr-cosine", "deepimpact>>ltr": "ltr-cosine", "hybrid>>ltr": "ltr",
                      "dense>>ltr": "ltr", "bm25>>attention>>ltr": "ltr"}
    candidates = CandidateRun(registry.build("bm25", opened, options)(QUERIES, k=K))
    assert Path(registry.build("ltr", opened, options, first_stage=candidates).stages[-1].model_path).name == \
        "ltr-cosine"
    assert registry.ltr_model_for(SimpleNamespace(components={"bm25": {}}), ["bm25"]) == "ltr"
    named = PipelineOptions.from_mapping({"ltr_model": str(MODELS / "ltr")})
    assert Path(registry.build("bm25>>ltr", opened, named).stages[-1].model_path).name == "ltr"
    assert (MODELS / "ltr-cosine" / "card.json").is_file()  # shipped, with its card
    # what a server's Info reports of each pipeline, without building it
    assert registry.reranker_models("bm25>>attention>>ltr", opened) == ["attention", "ltr"]
    assert registry.reranker_models("deepimpact>>ltr", opened) == ["ltr-cosine"]
    assert registry.reranker_models("bm25>>ltr", opened, named) == ["ltr"] and registry.reranker_models("bm25", opened) == []


def test_the_pipelines_of_one_cache_share_a_reranker_per_model(index):
    """A server's pipelines (:class:`registry.PipelineCache`) load each reranker's model once: ``dense>>ltr`` and
    ``hybrid>>ltr`` run the same ``ltr``, every ``>>attention`` the same attention model; ``bm25>>ltr`` its own
    ``ltr-cosine``; and a shared reranker answers as one built for its pipeline alone."""
    opened, options = index
    cache = registry.PipelineCache(opened, options)
    last = {spec: cache.get(spec).stages[-1] for spec in ("dense>>ltr", "hybrid>>ltr", "bm25>>ltr",
                                                          "bm25>>attention", "hybrid>>attention")}
    assert last["dense>>ltr"] is last["hybrid>>ltr"] and last["bm25>>ltr"] is not last["hybrid>>ltr"]
    assert last["bm25>>attention"] is last["hybrid>>attention"]
    alone = registry.build("hybrid>>ltr", opened, options)(QUERIES, k=K)
    shared = cache.get("hybrid>>ltr")(QUERIES, k=K)
    assert {q: [(h.doc_id, h.score) for h in shared[q]] for q in shared} == \
        {q: [(h.doc_id, h.score) for h in alone[q]] for q in alone}
