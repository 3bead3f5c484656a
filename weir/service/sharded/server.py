"""The sharded server: a :class:`weir.service.server.Server` whose servicer is the front
(:mod:`weir.service.sharded.front`). Starting, it plans what to deploy (:func:`weir.service.sharded.pipelines.plan`),
starts a local Ray instance or joins a cluster, and deploys one Ray Serve application per shard and per reranker;
draining, it removes them (and stops Ray when it started it)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading

from grpc_health.v1 import health_pb2
from ray import serve

from weir.service.config import RayConfig, ServiceConfig
from weir.service.server import SERVICE_NAME, SearchService, Server
from weir.service.sharded.deployments import RerankerDeployment, ShardSearcher
from weir.service.sharded.front import ShardedSearchService
from weir.service.sharded.pipelines import Plan, plan
from weir.service.sharded.replicas import ReplicaWatch

log = logging.getLogger("weir.service.sharded")

_app_counter = 0
_app_lock = threading.Lock()


def _app_prefix() -> str:
    """A prefix of this server's application names, unique in the Ray cluster (process id, then a counter)."""
    global _app_counter
    with _app_lock:
        _app_counter += 1
        return f"weir-{os.getpid()}-{_app_counter}"


def _reranker_gpus(settings: RayConfig) -> float:
    """GPUs of each reranker replica: as configured; ``auto``, one when the cluster has a GPU, else none."""
    import ray

    gpus = settings.reranker_num_gpus
    if gpus == "auto":
        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
    return gpus


def _targets(config: ServiceConfig, deployed: Plan, gpus: float, prefix: str) -> list:
    """One Ray Serve application per shard and per reranker of ``deployed``, to be run together."""
    settings = config.ray
    shard_class, reranker_class = serve.deployment(ShardSearcher), serve.deployment(RerankerDeployment)
    targets = []
    for j, (path, stats) in enumerate(zip(deployed.paths, deployed.statistics)):
        deployment = shard_class.options(name=f"shard-{j}", num_replicas=settings.shard_replicas,
                                         health_check_period_s=settings.health_check_period_s,
                                         ray_actor_options={"num_cpus": settings.shard_num_cpus})
        targets.append(serve.RunTarget(deployment.bind(path, stats, dict(config.options), deployed.stages,
                                                       config.verify_checksums),
                                       name=f"{prefix}-shard-{j}", route_prefix=None))
    for name in deployed.rerankers:
        deployment = reranker_class.options(
            name=name, num_replicas=settings.reranker_replicas, health_check_period_s=settings.health_check_period_s,
            ray_actor_options={"num_cpus": settings.reranker_num_cpus, "num_gpus": gpus})
        targets.append(serve.RunTarget(deployment.bind(name, deployed.paths, dict(config.options),
                                                       settings.reranker_max_batch, settings.reranker_batch_wait_ms),
                                       name=f"{prefix}-{name}", route_prefix=None))
    return targets


class ShardedServer(Server):
    """A :class:`Server` whose servicer runs over Ray Serve deployments of the configured shards. Starts a local
    Ray instance (``[ray] address = "local"``) or joins a cluster, deploys the shard searchers and rerankers, and
    removes its deployments when it drains."""

    def __init__(self, config: ServiceConfig):
        super().__init__(config)
        self.apps: list[str] = []
        self.started_ray = False
        self.watch: ReplicaWatch | None = None

    async def open_service(self) -> SearchService:
        return await asyncio.get_running_loop().run_in_executor(None, self._deploy)

    def _deploy(self) -> ShardedSearchService:
        config, settings = self.config, self.config.ray
        deployed = plan(config)  # every check before Ray starts
        self._start_ray()
        gpus = _reranker_gpus(settings)
        prefix = _app_prefix()
        targets = _targets(config, deployed, gpus, prefix)
        self.apps = [t.name for t in targets]
        try:
            handles = serve.run_many(targets)
        except BaseException:  # a replica that can not start: nothing of this server stays deployed
            self.shutdown_ray()
            raise
        shards = len(deployed.paths)
        searchers, rerankers = handles[:shards], dict(zip(deployed.rerankers, handles[shards:]))
        log.info("deployed %d shard(s) x %d replica(s), reranker(s) %s x %d replica(s) (%s GPU each)", shards,
                 settings.shard_replicas, ", ".join(deployed.rerankers) or "none", settings.reranker_replicas, gpus)
        apps = {f"shard {j}": (f"{prefix}-shard-{j}", f"shard-{j}") for j in range(shards)}
        apps.update({f"reranker {name}": (f"{prefix}-{name}", name) for name in deployed.rerankers})
        targets_of = {label: settings.shard_replicas if label.startswith("shard") else settings.reranker_replicas
                      for label in apps}
        self.watch = ReplicaWatch(apps, targets_of, self.metrics).start()
        return ShardedSearchService(config, deployed, self.metrics, searchers, rerankers, self.watch)

    async def start(self) -> int:
        """As :meth:`Server.start`; then the health service follows the replicas: NOT_SERVING while a deployment
        has none running (the watch's polls, on its thread, set it on the server's loop)."""
        port = await super().start()
        loop = asyncio.get_running_loop()

        def follow(ready: bool) -> None:
            status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
            if not self.service.admission.draining:
                for name in ("", SERVICE_NAME):
                    asyncio.run_coroutine_threadsafe(self.health.set(name, status), loop)

        self.watch.on_change = follow
        if not all(r.running > 0 for r in self.watch.replicas()):
            follow(False)
        return port

    def _start_ray(self) -> None:
        """Start a local Ray instance or join the configured cluster, unless Ray runs in this process already; then
        Ray Serve, without its HTTP proxy."""
        import ray

        settings = self.config.ray
        if not ray.is_initialized():
            if settings.address == "local":
                ray.init(address="local", num_cpus=settings.num_cpus, include_dashboard=False,
                         log_to_driver=False)
            else:
                ray.init(address=settings.address, log_to_driver=False)
            self.started_ray = True
        serve.start(proxy_location="Disabled")

    async def drain(self, grace: float | None = None) -> None:
        if self.watch is not None:
            self.watch.stop()
        await super().drain(grace)
        await asyncio.get_running_loop().run_in_executor(None, self.shutdown_ray)

    def shutdown_ray(self) -> None:
        """Delete this server's applications; stop Serve and Ray when this server started Ray."""
        import ray

        if not ray.is_initialized():
            return
        if self.started_ray:  # the whole instance goes, this server's applications with it
            serve.shutdown()
            ray.shutdown()
            self.apps = []
            return
        for app in self.apps:
            try:
                serve.delete(app)
            except Exception as e:  # already gone with its cluster
                log.warning("could not delete Ray Serve application %s: %s", app, e)
        self.apps = []
