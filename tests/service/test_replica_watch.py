"""The sharded front's view of its replicas (weir/service/sharded/replicas.py), driven by a status it is handed: a
deployment that loses a replica is degraded (Info), one with none is refused at once (UNAVAILABLE naming it) and makes
the server NOT_SERVING, and its recovery is timed. Killing real replicas under load: tests/collections/
test_sharded_service.py."""

from __future__ import annotations

import grpc
import pytest

from weir.service.failures import Failure
from weir.service.metrics import Metrics
from weir.service.sharded.replicas import ReplicaWatch


def test_a_deployment_without_replicas_is_refused_at_once_and_its_recovery_is_timed():
    status = {"app-shard-0": {"shard-0": (2, "HEALTHY")}, "app-shard-1": {"shard-1": (2, "HEALTHY")}}
    changes: list[bool] = []
    metrics = Metrics()
    watch = ReplicaWatch({"shard 0": ("app-shard-0", "shard-0"), "shard 1": ("app-shard-1", "shard-1")},
                         {"shard 0": 2, "shard 1": 2}, metrics, status=lambda: status, on_change=changes.append)
    watch.poll()
    watch.check("shard 0")
    assert [(r.deployment, r.running, r.target) for r in watch.replicas()] == [("shard 0", 2, 2), ("shard 1", 2, 2)]

    status["app-shard-0"]["shard-0"] = (1, "UNHEALTHY")  # one replica of two lost: degraded, still answering
    watch.poll()
    watch.check("shard 0")
    assert changes == [] and watch.replicas()[0].running == 1
    status["app-shard-0"]["shard-0"] = (0, "UNHEALTHY")  # none left: refused at once, naming the shard
    watch.poll()
    with pytest.raises(Failure) as refused:
        watch.check("shard 0")
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE and "shard 0 has no replica running" in refused.value.message
    watch.check("shard 1")
    assert changes == [False]  # the health service is told: NOT_SERVING
    assert metrics.registry.get_sample_value("weir_replicas_running", {"deployment": "shard 0"}) == 0

    status["app-shard-0"]["shard-0"] = (2, "HEALTHY")
    watch.poll()
    watch.check("shard 0")
    assert changes == [False, True]
    assert metrics.registry.get_sample_value("weir_replica_recovery_seconds_count", {"deployment": "shard 0"}) == 1
    del status["app-shard-1"]  # an application gone from the controller's view: no replica
    watch.poll()
    with pytest.raises(Failure, match="shard 1 has no replica"):
        watch.check("shard 1")
