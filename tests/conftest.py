"""Shared fixtures. Tests that need ../shared/collections skip without it, and fail when WEIR_REQUIRE_DATA=1 (CI)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
from hypothesis import settings

# Generated-input tests (hypothesis): a developer's run explores new examples (that is how they find defects); CI
# (.ci/run sets HYPOTHESIS_PROFILE=ci) replays the same derandomized ones, so that a landing is decided by the change
# and not by the draw. A failure prints the @reproduce_failure blob either way.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS = Path(os.environ.get("WEIR_COLLECTIONS", ROOT.parent / "shared" / "collections"))


def collection(name: str) -> Path:
    """The path of a shared collection; skip (or fail under WEIR_REQUIRE_DATA=1) when it is not there."""
    path = COLLECTIONS / name
    if not (path / "corpus.jsonl").is_file():
        reason = f"collection {name!r} not found at {path} (set WEIR_COLLECTIONS or place ../shared beside the repo)"
        if os.environ.get("WEIR_REQUIRE_DATA") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def in_loopback_namespace(command: list[str]) -> tuple[list[str], str]:
    """``command`` run in a loopback-only network namespace where one can be made (root, ``unshare`` and ``ip``):
    there Ray binds 127.0.0.1 only (../shared/DESIGN.md). Returns the command and where it runs, in words."""
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):
        return (["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {shlex.join(command)}"],
                "loopback-only namespace")
    return command, "this network namespace (not root, or no unshare): gRPC on 127.0.0.1"


@pytest.fixture(scope="session")
def index_factory(tmp_path_factory):
    """Build (once per session) the index of a shared collection: ``index_factory("beir-scifact", "bm25")``."""
    from weir.indexer.build import build_index

    built: dict[tuple, Path] = {}

    def make(name: str, components: str = "bm25", **options) -> Path:
        key = (name, components, repr(sorted(options.items())))  # options may hold a dict (dense settings)
        if key not in built:
            out = tmp_path_factory.mktemp("indexes") / f"{name}-{components.replace(',', '-')}"
            build_index(collection(name), out, components=tuple(components.split(",")), **options)
            built[key] = out
        return built[key]

    return make


@pytest.fixture(scope="session")
def candidates_index(tmp_path_factory):
    """A BM25 index of just the documents a run of a shared collection ranks (``candidates_index(
    "msmarco-passage-trec-dl-pool", "runs/BM25_dl19.top100.trec")``): what a reranker over that run reads (the
    passages' text), a tenth of the DL pool to index. Built once per session."""
    from weir.indexer.build import build_index

    built: dict[tuple, Path] = {}

    def make(name: str, run: str) -> Path:
        if (name, run) not in built:
            source = collection(name)
            wanted = {line.split()[2] for line in (source / run).read_text(encoding="utf-8").splitlines() if line}
            root = tmp_path_factory.mktemp(f"{name}-candidates")
            (root / "coll").mkdir()
            with open(source / "corpus.jsonl", encoding="utf-8") as f, \
                    open(root / "coll" / "corpus.jsonl", "w", encoding="utf-8") as out:
                out.writelines(line for line in f if json.loads(line)["id"] in wanted)
            build_index(root / "coll", root / "index", components=("bm25",))
            built[(name, run)] = root / "index"
        return built[(name, run)]

    return make


WEIGHTING_DOCS = [  # the tiny corpus of the learned term weighting tests
    {"id": "d1", "title": "Protein folding", "text": "Proteins fold; misfolded proteins aggregate in neurons."},
    {"id": "d2", "title": "Running mice", "text": "Mice running on wheels ran faster than sedentary mice."},
    {"id": "d3", "title": "", "text": "p53-dependent apoptosis after DNA damage in the U.S. cohort (3.5 mg/kg)."},
    {"id": "d4", "title": "Vitamin D", "text": "Vitamin D deficiency and bone density in elderly women."},
]


WEIGHTING_QUERIES = [("q1", "misfolded protein aggregates"), ("q2", "do mice run faster?"), ("q3", "vitamin D bone")]


def weighting_collection(root: Path) -> Path:
    """The tiny corpus (WEIGHTING_DOCS), its queries and qrels written as a collection under ``root``."""
    coll = root / "coll"
    coll.mkdir()
    (coll / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in WEIGHTING_DOCS), encoding="utf-8")
    (coll / "queries.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in WEIGHTING_QUERIES), encoding="utf-8")
    (coll / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\nq3 0 d4 1\n", encoding="utf-8")
    return coll


def learned_index(coll: Path, models: dict, out: Path) -> Path:
    """An index of ``coll`` with bm25 and both learned components, from these head directories."""
    from weir.indexer.build import build_index

    build_index(coll, out, components=("bm25", "deepct", "deepimpact"),
                learned={"deepct_model": str(models["deepct"]), "deepimpact_model": str(models["deepimpact"])})
    return out


@pytest.fixture(scope="session")
def learned_tiny(tmp_path_factory):
    """A corpus, two untrained heads saved as artifacts (fixed seed), and an index with both learned components."""
    import torch

    from weir.indexer.weighting.backbone import Backbone
    from weir.indexer.weighting.model import make_head, save

    root = tmp_path_factory.mktemp("weighting")
    coll = weighting_collection(root)
    backbone = Backbone(max_length=16)  # small windows: long passages are cut at word boundaries
    models = {}
    for kind in ("deepct", "deepimpact"):
        torch.manual_seed(0)
        head = make_head(kind, backbone.dim)
        if kind == "deepct":
            torch.nn.init.normal_(head.weight, std=0.05)
            torch.nn.init.constant_(head.bias, 0.3)
        models[kind] = save(root / kind, head, {"kind": kind, "base_model": "all-MiniLM-L6-v2", "max_length": 16})
    return coll, models, learned_index(coll, models, root / "index")


# --- a tiny BM25 + dense index and an untrained attention model directory (rerankers, training, service) ---

DOCS = [  # the tiny index of the LTR tests
    {"id": "d1", "title": "Apple pie", "text": "apple banana split with banana"},
    {"id": "d2", "title": "", "text": "cherry orange"},
    {"id": "d3", "title": "Banana bread", "text": "bread recipe apple"},
]


@pytest.fixture(scope="session")
def tiny_index(tmp_path_factory):
    from weir.indexer.build import build_index
    from weir.indexer.index_dir import Index

    root = tmp_path_factory.mktemp("tiny")
    (root / "coll").mkdir()
    with open(root / "coll" / "corpus.jsonl", "w") as f:
        for d in DOCS:
            f.write(json.dumps(d) + "\n")
    build_index(root / "coll", root / "index", components=("bm25", "dense"))
    return Index(root / "index")


HEADS = [[5, 3], [2, 0]]
WEIGHTS = [0.7, -0.2]


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("attn")
    (path / "heads.json").write_text(json.dumps({"kind": "attention", "base_model": "all-MiniLM-L6-v2",
                                                 "max_length": 64, "heads": HEADS, "weights": WEIGHTS, "bias": 0.1,
                                                 "calibrate": True, "idf": False}))
    return path
