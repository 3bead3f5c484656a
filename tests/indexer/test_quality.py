"""Passage-quality estimators and static pruning in the build: the fraction pruned exactly, ties broken by id,
pruned documents in no component and no pipeline's answer, a pruned index searched as an unpruned index of the kept
documents, reproducible builds, cached scores, clear errors, and estimators that learn an obvious quality signal."""

from __future__ import annotations

import json

import numpy as np
import pytest

from weir.indexer.build import build_index
from weir.indexer.index_dir import Index, verify
from weir.indexer.quality import open_estimator
from weir.indexer.quality.cache import scores_for
from weir.indexer.quality.prune import PruneSpec, pruned_count, read_pruned, select
from weir.ranker import registry
from weir.ranker.options import PipelineOptions
from tests.ranker.test_stage_contract import QUERIES, TEXTS, write_corpus
from weir.core.types import Document, InputError, Query


@pytest.mark.parametrize("fraction, n, expected", [(0.25, 12, 3), (0.1, 12, 1), (0.5, 5, 3), (0.0, 7, 0),
                                                   (0.25, 5183, 1296), (0.4, 39610, 15844)])
def test_the_fraction_pruned_is_exact(fraction, n, expected):
    assert pruned_count(fraction, n) == expected
    mask = select(np.arange(n, dtype=float), [f"d{i}" for i in range(n)], PruneSpec("length", fraction))
    assert mask.sum() == expected and mask[:expected].all()  # the lowest scores go


def test_ties_are_broken_by_document_id_whatever_the_order():
    scores = np.array([1.0, 0.5, 0.5, 0.5, 2.0])
    ids = ["e", "c", "a", "b", "d"]
    pruned = select(scores, ids, PruneSpec("length", 0.4))
    assert [i for i, p in zip(ids, pruned) if p] == ["a", "b"]
    order = [3, 0, 4, 2, 1]  # the same documents in another order prune the same ids
    again = select(scores[order], [ids[i] for i in order], PruneSpec("length", 0.4))
    assert sorted(ids[i] for i, p in zip(order, again) if p) == ["a", "b"]
    assert select(scores, ids, PruneSpec("length", threshold=0.75)).tolist() == [False, True, True, True, False]


@pytest.mark.parametrize("text, message", [
    ("learned", "expected ESTIMATOR:FRACTION"), ("learned:1", "below 1"), ("learned:-0.1", "at least 0"),
    ("learned:quarter", "not a number"), ("learned:nan", "finite"), (":0.25", "expected ESTIMATOR"),
])
def test_bad_prune_values_are_clear_errors(text, message):
    with pytest.raises(InputError, match=message):
        PruneSpec.parse(text)


def test_the_command_line_refuses_bad_pruning_and_leaves_nothing(tmp_path, capsys):
    from weir.cli import main

    coll = write_corpus(tmp_path / "coll")
    for args, message in ((["--prune", "learned:2"], "below 1"), (["--prune", "nonsense:0.2"], "unknown quality "
                          "estimator 'nonsense'"), (["--prune", "random:0.2", "--prune-threshold", "random:0"],
                          "not both")):
        assert main(["index", "build", "--collection", str(coll), "--out", str(tmp_path / "i"), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("weir: error:") and message in err[0]
        assert not (tmp_path / "i").exists()


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    """The contract corpus with every component, 25% pruned by the shipped learned estimator; and an unpruned
    index of exactly the documents kept (the reference a pruned index must equal)."""
    root = tmp_path_factory.mktemp("pruned")
    coll = write_corpus(root / "coll")
    components = ("bm25", "dense", "deepct", "deepimpact")
    build_index(coll, root / "index", components=components, prune=PruneSpec("learned", 0.25))
    index = Index(root / "index")
    gone = set(read_pruned(index.path / "quality"))
    kept = root / "kept"
    kept.mkdir()
    (kept / "corpus.jsonl").write_text("".join(line for line in (coll / "corpus.jsonl").read_text().splitlines(True)
                                               if json.loads(line)["id"] not in gone))
    build_index(kept, root / "reference", components=components)
    return index, Index(root / "reference"), gone


def test_a_pruned_index_records_what_it_left_out(pruned):
    index, _, gone = pruned
    assert len(gone) == 3 and index.num_docs == 9 and index.manifest["counts"]["pruned"] == 3
    p = index.pruning
    assert p["estimator"] == "learned" and p["fraction"] == 0.25 and p["documents_scored"] == 12 and p["kept"] == 9
    assert len(p["card_sha256"]) == 64 and p["estimator_card"]["name"] == "learned"
    scores = np.load(index.path / "quality" / "scores.npy")
    ids = (index.path / "quality" / "docids.txt").read_text().split()
    assert len(scores) == 12 and ids == [f"d{i}" for i in range(12)]
    assert {ids[i] for i in np.argsort(scores)[:3]} == gone  # the lowest three
    for name in ("bm25", "dense", "deepct", "deepimpact"):
        assert index.manifest["components"][name]["documents"] == 9
    verify(index.path)  # the quality directory is checksummed with the components


def test_no_pipeline_answers_with_a_pruned_document(pruned):
    index, _, gone = pruned
    queries = QUERIES + [Query(f"g{i}", TEXTS[int(d[1:])][1]) for i, d in enumerate(sorted(gone))]  # their own text
    options = PipelineOptions.from_mapping({"depth_per_stage": 20})
    for name in registry.supported(index, options):
        run = registry.build(name, index, options)(queries, k=12)
        found = {h.doc_id for hits in run.values() for h in hits}
        assert found and not found & gone, name


def test_a_pruned_index_searches_as_an_unpruned_index_of_the_kept_documents(pruned):
    index, reference, _ = pruned
    for name in ("bm25", "deepct", "deepimpact", "dense", "hybrid"):
        ours = registry.build(name, index)(QUERIES, k=9)
        theirs = registry.build(name, reference)(QUERIES, k=9)
        for q in QUERIES:
            assert [(h.doc_id, h.score) for h in ours[q.id]] == [(h.doc_id, h.score) for h in theirs[q.id]], name


def test_dense_vectors_reused_from_another_index_are_the_vectors_encoded(pruned, tmp_path):
    index, reference, gone = pruned
    from weir.indexer.dense import DenseConfig, open_dense

    coll = index.manifest["collection"]["path"]
    build_index(coll, tmp_path / "copy", components=("dense",), prune=PruneSpec("learned", 0.25),
                dense=DenseConfig(vectors_from=str(index.path)))
    copy = Index(tmp_path / "copy")
    entry = copy.manifest["components"]["dense"]["vectors_reused"]
    assert entry["documents"] == 9 and entry["encoded"] == 0
    ours, theirs = open_dense(copy), open_dense(index)
    assert ours.docids == theirs.docids
    assert np.array_equal(ours.faiss.reconstruct_n(0, 9), theirs.faiss.reconstruct_n(0, 9))
    with pytest.raises(InputError, match="another corpus"):
        other = write_corpus(tmp_path / "other")
        (other / "corpus.jsonl").write_text((other / "corpus.jsonl").read_text().replace("Coffee", "Cocoa"))
        build_index(other, tmp_path / "bad", components=("dense",), dense=DenseConfig(vectors_from=str(index.path)))


def test_a_pruned_build_is_reproducible(tmp_path, monkeypatch):
    coll = write_corpus(tmp_path / "coll")
    for n in (1, 2):
        monkeypatch.setenv("WEIR_CACHE", str(tmp_path / f"cache{n}"))  # scored anew each time
        build_index(coll, tmp_path / f"i{n}", prune=PruneSpec("learned", 0.4))
    for name in ("scores.npy", "docids.txt", "pruned.txt"):
        assert (tmp_path / "i1" / "quality" / name).read_bytes() == (tmp_path / "i2" / "quality" / name).read_bytes()
    assert not Index(tmp_path / "i1").pruning["scoring"]["cached"]


def test_scores_are_cached_per_corpus_and_estimator(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIR_CACHE", str(tmp_path))
    docs = [Document(f"d{i}", t, x) for i, (t, x) in enumerate(TEXTS)]
    estimator = open_estimator("length")
    first, record = scores_for(estimator, docs, "a" * 64, progress=False)
    again, cached = scores_for(estimator, docs, "a" * 64, progress=False)
    assert not record["cached"] and cached["cached"] and np.array_equal(first, again)
    assert set(record["quantiles"]) >= {"0.00", "0.25", "0.50", "1.00"}
    _, other = scores_for(estimator, docs[:-1], "a" * 64, progress=False)  # other documents under the same key
    assert not other["cached"]


def test_near_duplicates_score_low_and_the_first_copy_stays():
    base = "the quick brown fox jumps over the lazy dog near the river bank on a sunny day in june"
    docs = [Document("a", "", base), Document("b", "", "Something else entirely about proteins folding in cells."),
            Document("c", "", base.upper() + "!"), Document("d", "", base.replace("june", "july"))]
    scores = open_estimator("duplicates").score(docs)
    assert scores[0] == 1.0 and scores[1] == 1.0 and scores[2] == 0.0 and 0 < scores[3] < 0.5


def test_random_scores_depend_on_seed_and_id_only():
    docs = [Document(f"d{i}", "", "x") for i in range(50)]
    a, b = open_estimator("random", seed=3).score(docs), open_estimator("random", seed=3).score(docs[::-1])
    assert np.array_equal(a, b[::-1]) and not np.array_equal(a, open_estimator("random", seed=4).score(docs))


def _synthetic_collection(root):
    """Forty judged passages of prose and forty of keyword junk sharing their words: the junk is what BM25 also
    retrieves for the training queries, so it becomes the negatives."""
    topics = ["coffee", "volcano", "glacier", "protein", "comet", "harbor", "violin", "orchard", "desert", "bridge",
              "lantern", "meadow", "canyon", "falcon", "garnet", "island", "jungle", "kettle", "lagoon", "marble"]
    docs, queries, qrels = [], [], []
    for i, word in enumerate(topics * 2):
        good, bad = f"g{i}", f"b{i}"
        docs.append({"id": good, "title": f"On the {word}", "text": f"The {word} is described here in plain sentences, "
                     f"with the history of the {word} and what people know about it today."})
        docs.append({"id": bad, "title": "", "text": f"{word} ### {word} 1234 $$ {word} !! 99 ## {word} %% {word}"})
        queries.append(f"q{i}\twhat is known about the {word}\n")
        qrels.append(f"q{i} 0 {good} 1\n")
    root.mkdir()
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "queries.tsv").write_text("".join(queries))
    (root / "qrels.txt").write_text("".join(qrels))
    return root


@pytest.mark.parametrize("estimator", ["learned", "surface"])
def test_an_estimator_learns_an_obvious_quality_signal(tmp_path, estimator):
    from weir.training.quality import QualityTrainConfig, train

    coll = _synthetic_collection(tmp_path / "coll")
    card = train(QualityTrainConfig(estimator=estimator, train=[f"{coll}:{coll}/queries.tsv:{coll}/qrels.txt"],
                                    out=str(tmp_path / "model"), epochs=30, rounds=50, negatives=1),
                 log=lambda _: None)
    assert card["training_data"][0]["positives"] > 0 and card["training_data"][0]["negatives"] > 0
    model = open_estimator(str(tmp_path / "model"))
    docs = [Document(d["id"], d["title"], d["text"]) for d in map(json.loads, (coll / "corpus.jsonl").open())]
    scores = model.score(docs)
    good = [s for d, s in zip(docs, scores) if d.id.startswith("g")]
    bad = [s for d, s in zip(docs, scores) if d.id.startswith("b")]
    assert min(good) > max(bad)  # every prose passage above every junk one, so pruning 50% takes exactly the junk
