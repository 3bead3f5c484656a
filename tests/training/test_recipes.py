"""Recipes: every shipped model has one, it reads, and a trainer's settings come from it, then the command line;
bad recipes and settings are refused with what is known; the cheap shipped models are trained again from their
recipes (the same trees; the same weights to 1e-6, or where a CPU's sums drift further, the same scores) (the
expensive ones: the closing notes of issue 30)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from weir.core.runtime import MODELS
from weir.core.types import InputError
from weir.training.recipes import Recipe, collections_dir, settings

SHIPPED = ("deepct", "deepimpact", "ltr", "ltr-cosine", "ltr-attention", "attention", "quality-learned",
           "quality-surface")


# settings a card does not record, with why: the model was trained before the setting existed (or was a recorded
# parameter), so it was trained as its command said (its flag) or, without the flag, as the trainer's default
BEFORE_THE_SETTING = {
    "deepct": ("members", "shrink", "validate_by"),  # card of 2026-12-02: one head, no shrinkage, drawn by queries
    "ltr": ("members", "min_rel"),  # one booster; min_rel the grade counted relevant (--binary-min-rel)
    "ltr-cosine": ("members", "min_rel"),
    "ltr-attention": ("members", "folds", "min_rel"),
    "attention": ("min_rel",),
}
FLAGS = {"min_rel": "--binary-min-rel"}  # the command line flag a setting had, where it is not --KEY


def _trainer_default(name: str, key: str):
    import dataclasses

    model = Recipe.load(name).model
    if model in ("deepct", "deepimpact"):
        from weir.training.term_weighting.config import TrainConfig as config
    elif model == "ltr":
        from weir.training.ltr.config import TrainConfig as config
    elif model == "attention":
        from weir.training.attention import AttnTrainConfig as config
    else:
        raise AssertionError(f"{name}: no trainer default known for {key}")
    return {f.name: f.default for f in dataclasses.fields(config)}[key]


def _as_trained(name: str, card: dict, key: str):
    """What a setting the card does not record was when the model was trained: its flag's value in the card's
    command, else the trainer's default."""
    command = list(card.get("command") or [])
    flag = FLAGS.get(key, "--" + key.replace("_", "-"))
    if flag in command:
        return type(_trainer_default(name, key))(command[command.index(flag) + 1])
    return _trainer_default(name, key)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_model_has_a_recipe_of_its_trainer_with_its_cards_settings(name):
    """Every setting of a recipe is on its card with the same value; the few a card does not hold are named in
    :data:`BEFORE_THE_SETTING` and must be what the card's command gave (or the trainer's default); a term weighting
    recipe's ``min_rel`` is the default of its sets, each of which names its own."""
    recipe = Recipe.load(name)
    assert recipe.name == name and recipe.sets
    card = json.loads((MODELS / name / "card.json").read_text(encoding="utf-8"))
    recorded = card["parameters"]
    for key, value in recipe.parameters.items():
        if key == "params":  # LightGBM's: the card holds them merged with weir's defaults
            assert {k: recorded[k] for k in value} == value
        elif key in recorded:
            assert recorded[key] == value, key
        elif key == "min_rel" and all("min_rel" in s for s in recipe.sets):
            continue  # each set's own grade, on the card's sets
        else:
            assert key in BEFORE_THE_SETTING.get(name, ()), f"{name}: the card does not record {key!r}"
            assert value == _as_trained(name, card, key), key
    assert all(Path(s["topics"]).parts[:len(collections_dir().parts)] == collections_dir().parts for s in recipe.sets)


def test_an_ltr_card_names_the_candidates_of_each_training_set():
    """``ltr-cosine`` trains on BM25's top 100: the BM25 first stage over five collections' indexes, and MS MARCO's
    BM25 run over the DL pool (its card names that run and its checksum, and no first stage)."""
    card = json.loads((MODELS / "ltr-cosine" / "card.json").read_text(encoding="utf-8"))
    sets = {Path(s["topics"]).parent.name: s for s in card["training_data"]}
    assert len(sets) == 6 and all(s["rows"] > 0 for s in sets.values())
    dl = sets.pop("msmarco-passage-trec-dl-pool")
    assert dl["candidates"].endswith("BM25_dl19.top100.trec") and dl["candidates_sha256"] and dl["first_stage"] is None
    assert all(s["first_stage"] == "bm25" and s["candidates"] is None for s in sets.values())

def test_settings_come_from_the_recipe_then_the_command_line(tmp_path):
    from weir.training.term_weighting import TrainConfig

    recipe = Recipe.load("deepimpact")
    values = {**recipe.parameters, "epochs": 1, "seed": 7}
    config = settings("deepimpact", TrainConfig, sets=recipe.sets, values=values, out=str(tmp_path), command=[])
    assert (config.kind, config.members, config.shrink, config.epochs, config.seed) == ("deepimpact", 3, True, 1, 7)
    assert [s.min_rel for s in config.train] == [1, 1, 2, 1, 1, 1]
    with pytest.raises(InputError, match="no setting shrinkage.*its settings: .*shrink"):
        settings("deepimpact", TrainConfig, sets=recipe.sets, values={"shrinkage": True}, out="x", command=[])


def test_bad_recipes_are_refused_naming_what_is_wrong(tmp_path):
    path = tmp_path / "recipe.toml"
    for text, message in (('model = "bert"', "one of deepct"), ('model = "ltr"\nepochs = 3', "unknown key"),
                          ('model = "ltr"\n[[train]]\nsplit = "x"', "unknown key.*split"), ("model = [", "not a valid")):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(InputError, match=message):
            Recipe.load(path)
    with pytest.raises(InputError, match="no recipe nothing.*deepimpact"):
        Recipe.load("nothing")


def test_a_retired_flag_is_answered_with_the_setting_that_replaces_it(capsys):
    from weir.cli import main

    assert main(["train", "deepimpact", "--train", "a:b:c", "--shrink"]) == 2
    assert "use --set shrink=VALUE" in capsys.readouterr().err


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("name, files", [("quality-surface", ["model.txt"]), ("quality-learned", ["head.pt"])])
def test_the_cheap_shipped_models_are_trained_again_from_their_recipes(name, files, tmp_path,
                                                                                   monkeypatch):
    from tests.conftest import collection
    from weir.cli import main

    monkeypatch.setenv("WEIR_COLLECTIONS", str(collection("beir-scifact").parent))
    monkeypatch.setenv("WEIR_CACHE", str(tmp_path / "cache"))
    assert main(["train", "--recipe", name, "--out", str(tmp_path / name)]) == 0
    card = json.loads((tmp_path / name / "card.json").read_text(encoding="utf-8"))
    shipped = json.loads((MODELS / name / "card.json").read_text(encoding="utf-8"))
    assert not [s for s in strings(card) if Path(s).is_absolute()]  # no machine's directory
    if all(same_model(tmp_path / name / file, MODELS / name / file) for file in files):
        assert list(card["metrics"]["validation_survival"].values()) == list(
            shipped["metrics"]["validation_survival"].values())
        return
    # weights apart: the model must still be the shipped one in what it does (see same_model)
    assert all(file.endswith(".pt") for file in files), "a LightGBM model is the same byte for byte on every CPU"
    assert_same_scores(tmp_path / name, MODELS / name, collection("cacm"))


def same_model(made: Path, shipped: Path) -> bool:
    """LightGBM's text model: the same trees, byte for byte. A torch state_dict: the same tensors to 1e-6 (a float sum
    differs in its last bits between CPUs whose kernels use different vector widths: AVX2 and AVX-512 machines gave
    weights 1e-7 apart, and torch.save's bytes differ with them). On some CPUs an Adam-trained head drifts further
    (``quality-learned`` on an Intel Xeon with AMX: weights 3e-3 apart, trained again bit for bit on that machine:
    Adam's normalized steps amplify last-bit differences of the fp32 reader's inputs); False then, and the caller
    compares what the two models do."""
    if made.suffix != ".pt":
        assert made.read_bytes() == shipped.read_bytes()
        return True
    import torch

    def tensors(state, prefix=""):
        for key, value in state.items():
            if isinstance(value, dict):
                yield from tensors(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    a = dict(tensors(torch.load(made, map_location="cpu", weights_only=True)))
    b = dict(tensors(torch.load(shipped, map_location="cpu", weights_only=True)))
    assert a.keys() == b.keys()
    assert all(a[key].shape == b[key].shape for key in a)
    return all(torch.allclose(a[key].double(), b[key].double(), rtol=0, atol=1e-6) for key in a)


def assert_same_scores(made: Path, shipped: Path, collection_path: Path) -> None:
    """Two quality models that do the same: their scores of a collection's passages rank them alike (Spearman >=
    0.999) and prune the same quarter (>= 98% of it). Measured on CACM between the shipped ``quality-learned`` and
    the one trained again on an Intel Xeon with AMX: 0.99986 and 98.9%."""
    import numpy as np
    from scipy.stats import spearmanr

    from weir.indexer.collections import Collection
    from weir.indexer.quality import open_estimator

    documents = list(Collection.open(collection_path).corpus())
    a, b = (open_estimator(str(model)).score(documents) for model in (made, shipped))
    quarter = len(documents) // 4
    pruned = [set(np.argsort(scores, kind="stable")[:quarter].tolist()) for scores in (a, b)]
    assert spearmanr(a, b).correlation >= 0.999
    assert len(pruned[0] & pruned[1]) >= 0.98 * quarter


def strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def test_an_index_cached_without_a_wanted_component_is_built_again(tmp_path, monkeypatch):
    """What a recipe's sets run on (``$WEIR_CACHE/indexes``): a directory there whose manifest lacks a component the
    recipe needs is never used as it is (a feature would be read from nothing); it is built again."""
    from weir.indexer.index_dir import read_manifest
    from weir.training.recipes import cached_index

    coll = tmp_path / "tiny"
    coll.mkdir()
    docs = [{"id": f"d{i}", "title": "", "text": f"passage {i} about w{i}"} for i in range(3)]
    (coll / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    monkeypatch.setenv("WEIR_CACHE", str(tmp_path / "cache"))
    logs: list[str] = []
    first = cached_index(str(coll), "bm25", logs.append)
    assert "bm25" in read_manifest(first)["components"] and len(logs) == 1
    assert cached_index(str(coll), "bm25", logs.append) == first and len(logs) == 1  # reused, not built again
    manifest = json.loads((first / "manifest.json").read_text())
    manifest["components"] = {}  # as if put there by hand without it
    (first / "manifest.json").write_text(json.dumps(manifest))
    assert cached_index(str(coll), "bm25", logs.append) == first
    assert "cached without bm25" in logs[1] and "bm25" in read_manifest(first)["components"]
