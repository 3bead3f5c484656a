"""Term weighting training: both heads in both shapes write a model card; several training sets are read and drawn
by their weights (per source or per query); a head of several members differs in its seeds only; self-supervised
pseudo-queries are deterministic and ask for what the
passage says elsewhere."""

from __future__ import annotations

import json

import pytest

from weir.core.types import Document, InputError


def judged(coll):  # the tiny collection's judgments as one training set
    from weir.training.common import TrainingSet

    return TrainingSet(collection=str(coll), topics=str(coll / "queries.tsv"), qrels=str(coll / "qrels.txt"))


@pytest.mark.slow  # a training run: make test, not test-fast
@pytest.mark.parametrize("kind", ["deepct", "deepimpact"])
@pytest.mark.parametrize("shape", ["bm25", "free"])
def test_training_writes_a_model_card(learned_tiny, tmp_path, monkeypatch, kind, shape):
    from weir.training.term_weighting import TrainConfig, train

    monkeypatch.setenv("WEIR_CACHE", str(tmp_path / "cache"))
    coll, _, _ = learned_tiny
    card = train(TrainConfig(kind=kind, train=[judged(coll)],
                             out=str(tmp_path / kind), epochs=2, negatives=2,
                             val_fraction=0.34, max_length=32, titles=True, shape=shape), log=lambda m: None)
    saved = json.loads((tmp_path / kind / "card.json").read_text())
    assert saved["kind"] == kind and saved["shape"] == shape and saved["head_sha256"]
    assert saved["training_data"][0]["validation_queries"] == 1 and saved["collections"] == ["coll"]
    epochs = [h["epoch"] for h in saved["metrics"]["history"]]
    assert epochs == ([0, 1, 2] if shape == "bm25" else [1, 2])  # the BM25 shape's untrained head is a candidate
    assert saved["metrics"]["validation"]["epoch"] in epochs and card["parameters"]["seed"] == 13
    assert (kind == "deepimpact") == ("fusion" in saved)


@pytest.mark.slow  # a training run: make test, not test-fast
def test_members_differ_in_their_seed_only_and_the_first_is_the_one_member_head(learned_tiny, tmp_path, monkeypatch):
    """`--members 2`: two heads on one split, seeds 13 and 1013; the first is bit for bit the head `--members 1`
    trains; the card records each member's seed, epoch, validation and own deepimpact+bm25 weight."""
    import torch

    from weir.training.term_weighting import TrainConfig, train

    monkeypatch.setenv("WEIR_CACHE", str(tmp_path / "cache"))
    coll, _, _ = learned_tiny
    cards, states = {}, {}
    for members in (1, 2):
        out = tmp_path / f"m{members}"
        cards[members] = train(TrainConfig(kind="deepimpact", train=[judged(coll)],
                                           out=str(out), epochs=2, negatives=2,
                                           val_fraction=0.34, max_length=32, members=members), log=lambda m: None)
        states[members] = torch.load(out / "head.pt", weights_only=True)
    one, two = cards[1], cards[2]
    assert "members" not in one and two["members"] == 2
    assert [m["seed"] for m in two["member_heads"]] == [13, 1013]
    first = {k.removeprefix("members.0."): v for k, v in states[2].items() if k.startswith("members.0.")}
    assert first.keys() == states[1].keys() and all(torch.equal(first[k], states[1][k]) for k in first)
    second = {k.removeprefix("members.1."): v for k, v in states[2].items() if k.startswith("members.1.")}
    assert not torch.equal(second["0.weight"], first["0.weight"])  # another initialization
    assert two["member_heads"][0]["history"] == one["metrics"]["history"]
    assert two["member_heads"][0]["fusion"]["weights"] == one["fusion"]["weights"]
    assert two["metrics"]["validation"]["epoch"] == [m["validation"]["epoch"] for m in two["member_heads"]]
    assert set(two["fusion"]) >= {"weights", "grid"}
    with pytest.raises(InputError, match="--members"):
        train(TrainConfig(kind="deepimpact", train=[judged(coll)],
                          out=str(tmp_path / "m0"), members=0), log=lambda m: None)


@pytest.mark.slow  # a training run: make test, not test-fast
def test_several_training_sets_are_read_and_drawn_by_weight(learned_tiny, tmp_path, monkeypatch):
    from weir.training.term_weighting import TrainConfig
    from weir.training.term_weighting.data import WeightingData
    from weir.training.term_weighting.loop import Training
    from weir.indexer.weighting.backbone import Backbone

    monkeypatch.setenv("WEIR_CACHE", str(tmp_path / "cache"))
    coll, _, _ = learned_tiny
    spec = f"{coll}:{coll / 'queries.tsv'}:{coll / 'qrels.txt'}"
    config = TrainConfig(kind="deepimpact", out=str(tmp_path / "m"), train=[f"{spec}:3", f"{spec}:1"],
                         self_supervised=[str(coll)], val_fraction=0.34, max_length=32, negatives=2)
    specs = config.sources()
    assert [(s is None, w) for s, _, w in specs] == [(False, 3.0), (False, 1.0), (True, 1.0)]
    backbone = Backbone(max_length=32)
    sources = [WeightingData(j, c, w, config, backbone, lambda m: None) for j, c, w in specs]
    sizes = [len(s.items) for s in sources]
    assert sizes[0] == sizes[1] != sizes[2]  # the pseudo-queries are a source of another size
    for draws, expected in (("sources", [3, 1, 1]), ("queries", [3 * sizes[0], sizes[1], sizes[2]])):
        config.draws = draws
        t = Training(config, sources, backbone.dim, lambda m: None)
        drawn = [si for _ in range(50) for si, _ in t.epoch_order()]
        assert len(drawn) == 50 * sum(sizes)  # an epoch draws as many queries as the sources have
        shares = [drawn.count(i) / len(drawn) for i in range(3)]
        assert shares == pytest.approx([e / sum(expected) for e in expected], abs=0.03), draws
        # the validation mean weighs the sources as they are drawn: by weight, or by weight x validation queries,
        # where the pseudo-queries (too easy to choose an epoch by) count only without judged sources
        assert t.validation_weights() == ([3, 1, 1] if draws == "sources" else
                                          [3 * len(sources[0].val), len(sources[1].val), 0])
        assert Training(config, sources[2:], backbone.dim, lambda m: None).validation_weights() == \
            ([1] if draws == "sources" else [len(sources[2].val)])
        # --validate-by sets: every judged source by its weight alone, however it is drawn
        config.validate_by = "sets"
        assert Training(config, sources, backbone.dim, lambda m: None).validation_weights() == [3, 1, 0]
        assert Training(config, sources[2:], backbone.dim, lambda m: None).validation_weights() == [1]
        config.validate_by = "queries"


def test_pseudo_queries_are_deterministic_and_leave_their_words_out():
    from weir.training.term_weighting.data import pseudo_items

    docs = [Document("a", "Statins and the heart", "Statins lower cholesterol in adults. They also reduce the risk "
                     "of stroke in older patients. Side effects include muscle pain."),
            Document("b", "", "Coffee is a stimulant drink. Caffeine blocks adenosine receptors in the brain."),
            Document("c", "", "Too short.")]
    first, again = pseudo_items(docs, 100, seed=5), pseudo_items(docs, 100, seed=5)
    assert [(i.qid, i.text, i.positives) for i in first] == [(i.qid, i.text, i.positives) for i in again]
    assert {i.text for i in first} >= {"Statins and the heart"} and all(i.positives <= {"a", "b"} for i in first)
    title = next(i for i in first if i.text == "Statins and the heart")
    kept, tf, length = title.rest
    assert "heart" not in kept and "cholesterol" in kept and length == tf.sum()  # the text without the title
    sentence = next(i for i in first if i.positives == {"b"})
    assert not set(sentence.rest[0]) & {"coffe", "stimul", "drink"} or not set(sentence.rest[0]) & {"caffein", "block"}
    assert [i.text for i in pseudo_items(docs, 100, seed=6)] != [] and len(pseudo_items(docs, 1, seed=5)) == 1


@pytest.mark.slow  # a training run: make test, not test-fast
def test_members_shrunk_by_their_disagreement_are_the_same_members_with_tau2_on_the_card(learned_tiny, tmp_path,
                                                                                           monkeypatch):
    """`--members 2 --shrink` trains the members `--members 2` trains, bit for bit, and writes the shrinkage prior it
    estimated on the training collection's terms (tau2 and what it came from) on the card; without 2 members or the
    bm25 shape it is refused before anything is read."""
    import torch

    from weir.training.term_weighting import TrainConfig, train

    monkeypatch.setenv("WEIR_CACHE", str(tmp_path / "cache"))
    coll, _, _ = learned_tiny
    cards, states = {}, {}
    for shrink in (False, True):
        out = tmp_path / f"s{int(shrink)}"
        cards[shrink] = train(TrainConfig(kind="deepimpact", train=[judged(coll)],
                                          out=str(out), epochs=2, negatives=2,
                                          val_fraction=0.34, max_length=32, members=2, shrink=shrink),
                              log=lambda m: None)
        states[shrink] = torch.load(out / "head.pt", weights_only=True)
    assert states[True].keys() == states[False].keys()
    assert all(torch.equal(states[True][k], states[False][k]) for k in states[True])
    assert "shrink" not in cards[False]
    record = json.loads((tmp_path / "s1" / "card.json").read_text())["shrink"]
    assert record["tau2"] >= 0 and record["rows"] > 0 and 0 <= record["mean_coefficient"] <= 1
    assert record["tau2"] == pytest.approx(max(0.0, record["variance_of_mean"] - record["mean_noise_variance"]))
    for members, shape in ((1, "bm25"), (2, "free")):
        with pytest.raises(InputError, match="--shrink"):
            train(TrainConfig(kind="deepimpact", train=[judged(coll)],
                              out=str(tmp_path / "no"), members=members, shape=shape,
                              shrink=True), log=lambda m: None)
        assert not (tmp_path / "no").exists()
