"""What the front knows of its deployments' replicas: :class:`ReplicaWatch` reads Ray Serve's status (``serve.status()``,
the controller's view) every ``interval`` seconds on a thread of its own, and keeps, per deployment (``shard 0``,
``reranker attention``), how many replicas run of how many asked. From it:

- a call to a deployment with no replica running is refused at once, UNAVAILABLE naming it, instead of waiting in
  Ray's queue until its deadline while Ray Serve restarts the replica (:meth:`ReplicaWatch.check`);
- ``Info`` lists each deployment's replicas (running of asked: fewer is degraded), and the gRPC health service says
  NOT_SERVING while some deployment has none (the server can answer nothing that needs it);
- each loss and recovery is logged with the time it took (``weir_replicas_running`` gauge, and
  ``weir_replica_recovery_seconds``: from the first poll that saw fewer replicas to the one that saw all again).

Ray Serve restarts a dead replica by itself; a watch is needed because a handle's calls to a deployment without a
replica wait for one, and the front has no other view of the replicas."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from weir.service.failures import Failure

log = logging.getLogger("weir.service.sharded")


@dataclass(frozen=True)
class Replicas:
    """One deployment's replicas, as Ray Serve's controller reports them."""

    deployment: str  # as callers are told: "shard 0", "reranker attention"
    running: int
    target: int
    status: str  # Ray Serve's deployment status: HEALTHY, UNHEALTHY, UPDATING, ...


class ReplicaWatch:
    """Polls ``status()`` (default: Ray Serve's) for the deployments of ``apps`` (label -> (application, deployment
    name)); ``on_change(ready)`` is told whether every deployment has a replica running, when that changes."""

    def __init__(self, apps: dict[str, tuple[str, str]], targets: dict[str, int], metrics=None, *,
                 interval: float = 0.5, status: Callable | None = None,
                 on_change: Callable[[bool], None] | None = None):
        self.apps, self.targets, self.metrics, self.interval = apps, targets, metrics, interval
        self._status = status or _serve_status
        self.on_change = on_change
        self._state = {label: Replicas(label, targets[label], targets[label], "HEALTHY") for label in apps}
        self._degraded_since: dict[str, float] = {}
        self.last_change = float("-inf")  # when a deployment last lost or regained replicas (time.monotonic)
        self._ready = True
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="weir-replica-watch", daemon=True)

    def start(self) -> ReplicaWatch:
        self.poll()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception as e:  # a controller that does not answer this once: the last view stands
                log.warning("could not read Ray Serve's status: %s", e)

    def poll(self) -> None:
        """Read the status once and note what changed."""
        status, now = self._status(), time.monotonic()
        for label, (app, name) in self.apps.items():
            deployment = status.get(app, {}).get(name)
            running, state = (0, "MISSING") if deployment is None else deployment
            replicas = Replicas(label, running, self.targets[label], state)
            with self._lock:
                before, self._state[label] = self._state[label], replicas
            if self.metrics is not None:
                self.metrics.replicas.labels(label).set(running)
            if running != before.running:
                self.last_change = now
            if running < replicas.target and label not in self._degraded_since:
                self._degraded_since[label] = now
                log.warning("%s: %d of %d replicas running (%s)", label, running, replicas.target, state)
            elif running >= replicas.target and label in self._degraded_since:
                seconds = now - self._degraded_since.pop(label)
                if self.metrics is not None:
                    self.metrics.recovery.labels(label).observe(seconds)
                log.warning("%s: all %d replicas running again, %.1f s after the loss was seen", label,
                            replicas.target, seconds)
            elif running != before.running:
                log.warning("%s: %d of %d replicas running (%s)", label, running, replicas.target, state)
        ready = all(r.running > 0 for r in self.replicas())
        if ready != self._ready:
            self._ready = ready
            if self.on_change is not None:
                self.on_change(ready)

    def steady_since(self, since: float) -> bool:
        """Whether every deployment has had all its replicas running from ``since`` (time.monotonic) until now."""
        return not self._degraded_since and self.last_change < since

    def replicas(self) -> list[Replicas]:
        with self._lock:
            return list(self._state.values())

    def check(self, label: str) -> None:
        """Failure(UNAVAILABLE) when ``label`` has no replica running."""
        with self._lock:
            replicas = self._state.get(label)
        if replicas is not None and replicas.running == 0:
            raise Failure(grpc.StatusCode.UNAVAILABLE,
                          f"{label} has no replica running ({replicas.target} asked; Ray Serve is restarting it); "
                          "try again shortly")


def _serve_status() -> dict[str, dict[str, tuple[int, str]]]:
    """{application: {deployment: (replicas running, status)}} from Ray Serve's controller."""
    from ray import serve

    out: dict[str, dict[str, tuple[int, str]]] = {}
    for app, overview in serve.status().applications.items():
        out[app] = {name: (sum(n for state, n in d.replica_states.items() if str(getattr(state, "value", state))
                                == "RUNNING"), str(getattr(d.status, "value", d.status)))
                    for name, d in overview.deployments.items()}
    return out
