"""What a `weir serve` runs with: address, TLS and tokens, the pipelines it answers, the limits it enforces, how it
batches concurrent requests, and the pipeline options; from a TOML file (``--config``), overridden by flags.

```toml
index = "indexes/scifact"
host = "127.0.0.1"
port = 50051
metrics_port = 9464                 # Prometheus metrics over HTTP (omit: none)
default_pipeline = "bm25"
pipelines = ["bm25", "bm25>>ltr", "hybrid>>ltr"]    # omit: every first stage the index supports, alone or + one reranker
warm = "served"                     # built and run once before SERVING: every served pipeline; "default": that one alone

[limits]
max_k = 1000
max_depth = 1000
max_query_chars = 4096
max_query_terms = 1024             # distinct words; Lucene refuses more than 1024 clauses
max_batch_queries = 100
max_in_flight = 16                 # requests admitted and not finished, queued ones included...
max_queued = 64                    # ...plus these; beyond: RESOURCE_EXHAUSTED at once
default_budget_ms = 10000          # a call without a deadline that would wait longer to start: RESOURCE_EXHAUSTED
admit_sigmas = 2.0                 # a call is admitted when it would end in time even if batches ran this many
                                   # standard deviations slower than their mean (0: at the mean)

[batching]
max_batch = 16                     # queries of one pipeline run together at most
max_wait_ms = 2.0                  # how long the first query of a batch waits for others
expensive = ["attention", "crossencoder"]   # a pipeline with one of these stages runs in a lane of its own...
expensive_workers = 1              # ...on these threads, so that a flood of it does not hold up the others

[tls]
cert = "server.crt"
key = "server.key"
client_ca = "ca.crt"               # omit: no client certificates asked

[auth]
token_file = "tokens.txt"          # one bearer token a line; omit: no authentication

[options]                           # pipeline options, as `weir serve` flags and experiment brackets take them
device = "cpu"
```

A sharded server (:mod:`weir.service.sharded`) names its shards instead of ``index``, and may set how Ray Serve runs
them:

```toml
shards = ["indexes/scifact-0", "indexes/scifact-1"]   # every shard of one `weir index build --shard I/N`

[ray]
address = "local"                  # "local": a Ray instance of this process; "auto" or an address: join a cluster
num_cpus = 2                       # CPUs of a local instance (omit: all)
shard_replicas = 1                 # replicas of each shard's searcher deployment
reranker_replicas = 1              # replicas of each reranker deployment
shard_num_cpus = 0.5               # CPUs reserved per shard replica
reranker_num_cpus = 1.0            # CPUs reserved per reranker replica
reranker_num_gpus = "auto"         # GPUs per reranker replica; "auto": 1 when the cluster has a GPU, else 0
reranker_max_batch = 16            # queries per @serve.batch call of a reranker replica
reranker_batch_wait_ms = 2.0       # how long a reranker batch waits for more queries
health_check_period_s = 2.0        # how often Ray Serve checks each replica (a dead one is restarted once seen)
```
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weir.core.types import InputError


@dataclass(frozen=True)
class Limits:
    max_k: int = 1000
    max_depth: int = 1000
    max_query_chars: int = 4096
    max_query_terms: int = 1024
    max_batch_queries: int = 100
    max_pipeline_chars: int = 200
    max_in_flight: int = 16
    max_queued: int = 64
    default_budget_ms: int = 10000
    # admission's margin: a call must end in time with the batches' cost this many standard deviations above its mean
    # (weir.service.admission.Costs.spread)
    admit_sigmas: float = 2.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not value >= (0 if f.name in ("max_queued", "admit_sigmas") else 1) or value == float("inf"):
                raise InputError(f"limit {f.name} must be positive (got {value})")


@dataclass(frozen=True)
class Batching:
    max_batch: int = 16
    max_wait_ms: float = 2.0
    expensive: tuple[str, ...] = ("attention", "crossencoder")
    expensive_workers: int = 1

    def __post_init__(self):
        if self.max_batch < 1 or self.max_wait_ms < 0 or self.expensive_workers < 1:
            raise InputError(f"batching needs max_batch >= 1, max_wait_ms >= 0 and expensive_workers >= 1 (got {self})")
        object.__setattr__(self, "expensive", tuple(self.expensive))

    def lane(self, pipeline: str) -> str:
        """``"expensive"`` for a pipeline with a stage of :attr:`expensive`, else the default lane ``""``."""
        stages = {part.split("[", 1)[0].strip() for part in pipeline.replace("+", ">>").split(">>")}
        return "expensive" if stages & set(self.expensive) else ""


@dataclass(frozen=True)
class RayConfig:
    address: str = "local"
    num_cpus: int | None = None
    shard_replicas: int = 1
    reranker_replicas: int = 1
    shard_num_cpus: float = 0.5
    reranker_num_cpus: float = 1.0
    reranker_num_gpus: float | str = "auto"
    reranker_max_batch: int = 16
    reranker_batch_wait_ms: float = 2.0
    health_check_period_s: float = 2.0  # Ray Serve's default, 10 s, leaves a dead replica's shard down that long

    def __post_init__(self):
        if self.shard_replicas < 1 or self.reranker_replicas < 1:
            raise InputError(f"replicas must be at least 1 (got shards {self.shard_replicas}, rerankers "
                             f"{self.reranker_replicas})")
        if self.shard_num_cpus < 0 or self.reranker_num_cpus < 0 or (self.num_cpus is not None and self.num_cpus < 1):
            raise InputError(f"CPU counts must not be negative (got {self})")
        if self.reranker_num_gpus != "auto" and not (isinstance(self.reranker_num_gpus, (int, float))
                                                     and self.reranker_num_gpus >= 0):
            raise InputError(f"reranker_num_gpus is a number >= 0 or \"auto\" (got {self.reranker_num_gpus!r})")
        if not self.health_check_period_s > 0:
            raise InputError(f"health_check_period_s must be positive (got {self.health_check_period_s})")
        if self.reranker_max_batch < 1 or self.reranker_batch_wait_ms < 0:
            raise InputError(f"reranker batching needs max_batch >= 1 and batch_wait_ms >= 0 (got {self})")


@dataclass(frozen=True)
class TLS:
    cert: str
    key: str
    client_ca: str | None = None

    def read(self) -> tuple[bytes, bytes, bytes | None]:
        """(certificate chain, private key, client CA) as bytes; a missing file is an InputError."""
        out = []
        for name in ("cert", "key", "client_ca"):
            path = getattr(self, name)
            if path is None:
                out.append(None)
                continue
            if not Path(path).is_file():
                raise InputError(f"TLS {name} {path}: no such file")
            out.append(Path(path).read_bytes())
        return out[0], out[1], out[2]


WARM = ("served", "default")


@dataclass(frozen=True)
class ServiceConfig:
    index: str = ""  # the index served; or ``shards``
    shards: tuple[str, ...] | None = None  # shard index directories served together on Ray Serve (weir.service.sharded)
    ray: RayConfig = field(default_factory=RayConfig)
    host: str = "127.0.0.1"
    port: int = 50051
    metrics_port: int | None = None
    workers: int = 2  # threads running pipeline batches
    default_pipeline: str = "bm25"
    pipelines: tuple[str, ...] | None = None  # None: every first stage the index supports, alone or + one reranker
    warm: str = "served"  # built and run once before SERVING: served (every served pipeline) | default (that one alone)
    limits: Limits = field(default_factory=Limits)
    batching: Batching = field(default_factory=Batching)
    tls: TLS | None = None
    token_file: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # pipeline options (weir.ranker.options keys)
    grace_seconds: float = 10.0
    verify_checksums: bool = True
    access_log: bool = True

    def __post_init__(self):
        if self.warm not in WARM:
            raise InputError(f"warm = {self.warm!r}: expected one of {', '.join(WARM)} (served: every served pipeline "
                             "is built and run once before the server says SERVING; default: the default one alone)")

    def tokens(self) -> tuple[str, ...]:
        """The bearer tokens of ``token_file`` (one a line; blank lines and # comments skipped)."""
        if self.token_file is None:
            return ()
        path = Path(self.token_file)
        if not path.is_file():
            raise InputError(f"token file {path}: no such file")
        tokens = tuple(t for t in (line.strip() for line in path.read_text().splitlines()) if t and not t.startswith("#"))
        if not tokens:
            raise InputError(f"token file {path} holds no token")
        return tokens

    @classmethod
    def load(cls, path: str | os.PathLike | None = None, **overrides: Any) -> ServiceConfig:
        """The settings of the TOML file ``path`` (relative paths in it are relative to the file), then
        ``overrides`` (flags; ``None`` values skipped; ``limits`` and ``batching`` given as dicts merge into the
        file's)."""
        values: dict[str, Any] = {}
        if path is not None:
            values = _read_toml(Path(path))
        for key, value in overrides.items():
            if value is None:
                continue
            if key in ("limits", "batching", "options", "ray"):
                values[key] = {**values.get(key, {}), **{k: v for k, v in value.items() if v is not None}}
            else:
                values[key] = value
        if not values.get("index") and not values.get("shards"):
            raise InputError("the service needs an index (--index, or 'index' in --config) or shards (--shards, or "
                             "'shards' in --config)")
        if values.get("index") and values.get("shards"):
            raise InputError("give an index or shards, not both")
        try:
            values["limits"] = Limits(**values.get("limits", {}))
            values["batching"] = Batching(**values.get("batching", {}))
            values["ray"] = RayConfig(**values.get("ray", {}))
            if values.get("shards") is not None:
                values["shards"] = tuple(values["shards"])
            tls = values.pop("tls", None)
            values["tls"] = TLS(**tls) if tls else None
            if values.get("pipelines") is not None:
                values["pipelines"] = tuple(values["pipelines"])
            return cls(**values)
        except TypeError as e:
            raise InputError(f"bad service setting: {e}") from None


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"{path}: no such service config file")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a valid TOML file: {e}") from None
    known = {f.name for f in dataclasses.fields(ServiceConfig)} | {"auth"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise InputError(f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")

    def resolve(p: str) -> str:
        return str(p if os.path.isabs(p) else path.parent / p)

    auth = raw.pop("auth", {}) or {}
    if "token_file" in auth:
        raw["token_file"] = resolve(auth["token_file"])
    if "index" in raw:
        raw["index"] = resolve(raw["index"])
    if "shards" in raw:
        if not isinstance(raw["shards"], list) or not all(isinstance(p, str) for p in raw["shards"]):
            raise InputError(f"{path}: 'shards' is a list of index directories")
        raw["shards"] = [resolve(p) for p in raw["shards"]]
    if raw.get("tls"):
        raw["tls"] = {k: resolve(v) if isinstance(v, str) else v for k, v in raw["tls"].items()}
    return raw
