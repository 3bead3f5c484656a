"""The service config of a sharded server: shards instead of an index, the [ray] section, their checks; which
pipelines a sharded server refuses and why (service/sharded.py; the serving itself: tests/collections/)."""

from __future__ import annotations

import pytest

from service.config import RayConfig, ServiceConfig
from weir.types import InputError


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
    from service.sharded import unsupported_reason

    assert unsupported_reason("bm25>>attention") is None and unsupported_reason("dense>>crossencoder") is None
    assert "whole-index statistics" in unsupported_reason("bm25>>ltr")
    assert unsupported_reason("deepct") is None and unsupported_reason("hybrid>>attention") is None
    assert "quantize" in unsupported_reason("deepimpact+bm25")
    assert "quantized" in unsupported_reason("deepimpact>>attention")
