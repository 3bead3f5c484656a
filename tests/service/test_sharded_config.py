"""The service config of a sharded server: shards instead of an index, the [ray] section, their checks; which
pipelines a sharded server refuses and why (weir/service/sharded/pipelines.py; the serving itself: tests/collections/)."""

from __future__ import annotations

import pytest

from weir.service.config import RayConfig, ServiceConfig
from weir.core.types import InputError


def test_shards_and_the_ray_section_come_from_toml_relative_to_the_file(tmp_path):
    path = tmp_path / "serve.toml"
    path.write_text('shards = ["s0", "/abs/s1"]\n[ray]\nshard_replicas = 2\nreranker_num_gpus = 0\n')
    config = ServiceConfig.load(path, ray={"reranker_replicas": 3, "address": None})
    assert config.shards == (str(tmp_path / "s0"), "/abs/s1") and config.index == ""
    assert config.ray == RayConfig(shard_replicas=2, reranker_replicas=3, reranker_num_gpus=0)


@pytest.mark.parametrize("values, message", [
    ({}, "needs an index"),
    ({"index": "i", "shards": ["a"]}, "not both"),
    ({"shards": ["a"], "ray": {"shard_replicas": 0}}, "at least 1"),
    ({"shards": ["a"], "ray": {"reranker_num_gpus": "many"}}, "reranker_num_gpus"),
    ({"shards": ["a"], "ray": {"replicas": 2}}, "bad service setting"),
])
def test_bad_sharded_settings_are_input_errors(values, message):
    with pytest.raises(InputError, match=message):
        ServiceConfig.load(**values)


def test_pipelines_that_cannot_run_over_shards_say_why():
    pytest.importorskip("ray")
    from weir.service.sharded.pipelines import unsupported_reason

    assert unsupported_reason("bm25>>attention") is None and unsupported_reason("dense>>crossencoder") is None
    assert "whole-index statistics" in unsupported_reason("bm25>>ltr")
    assert unsupported_reason("deepct") is None and unsupported_reason("hybrid>>attention") is None
    assert unsupported_reason("deepimpact+bm25") is None  # over a shard set
    refused = {"deepimpact": "built one by one", "deepimpact+bm25": "it fuses deepimpact: built one by one"}
    assert "one by one" in unsupported_reason("deepimpact+bm25", refused)
    assert "one by one" in unsupported_reason("deepimpact>>attention", refused)
    assert unsupported_reason("bm25>>attention", refused) is None


def test_a_sharded_server_refuses_deepimpact_over_shards_built_one_by_one(learned_tiny, tmp_path):
    """Shards built one by one quantize impacts each on its own scale: a config serving deepimpact (or the fusion
    of it) over them fails at start-up, before Ray starts, saying to build a shard set; their default pipelines
    leave deepimpact out and keep what compares (bm25, deepct)."""
    pytest.importorskip("ray")
    from weir.indexer.build import build_index
    from weir.indexer.index_dir import Index
    from weir.indexer.shards import ShardSpec
    from weir.ranker.options import PipelineOptions
    from weir.service.sharded.pipelines import refused_stages, sharded_pipelines
    from weir.service.sharded.server import ShardedServer

    coll, models, _ = learned_tiny
    learned = {f"{k}_model": str(v) for k, v in models.items()}
    parts = [tmp_path / f"alone-{i}" for i in range(2)]
    for i, p in enumerate(parts):
        build_index(coll, p, components=("bm25", "deepct", "deepimpact"), learned=learned, shard=ShardSpec(i, 2))
    for pipeline in ("deepimpact", "deepimpact+bm25>>attention"):
        config = ServiceConfig.load(shards=[str(p) for p in parts], pipelines=[pipeline], default_pipeline=pipeline)
        with pytest.raises(InputError, match="one by one.*--shard-set"):
            ShardedServer(config)._deploy()
    shards = [Index(p) for p in parts]
    served = sharded_pipelines(shards, PipelineOptions(), refused_stages(shards))
    assert "bm25" in served and "deepct" in served
    assert not any(p.startswith("deepimpact") for p in served)


def test_ivfpq_dense_shards_without_rescoring_are_refused_and_the_others_still_served():
    """IVF-PQ shards that rank by their codes score with codebooks of their own: dense (and hybrid, which fuses it) are
    refused with the reason; re-scored IVF-PQ, HNSW and IVF-Flat shards give exact inner products of the neighbours
    they find, so dense is served over them."""
    pytest.importorskip("ray")
    from types import SimpleNamespace

    from weir.service.sharded.pipelines import refused_stages, unsupported_reason

    def shards(kind, **parameters):
        return [SimpleNamespace(manifest={"components": {"bm25": {}, "dense": {"index": kind, "parameters": parameters}}})
                for _ in range(2)]

    for unscored in (shards("ivfpq"), shards("ivfpq", rerank=0)):
        refused = refused_stages(unscored)
        assert "codebooks" in refused["dense"] and "codebooks" in unsupported_reason("dense>>attention", refused)
        assert unsupported_reason("bm25", refused) is None
    for kind, parameters in (("flat", {}), ("hnsw", {}), ("ivfflat", {}), ("ivfpq", {"rerank": 100})):
        assert "dense" not in refused_stages(shards(kind, **parameters))
