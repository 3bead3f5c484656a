"""The Ray side of a distributed build, run in a child process of the build (``python -m weir.indexer.distributed
JOB``): start a local Ray instance or join a cluster, check that it has room for the workers asked for, count the
collection statistics and then run the pending blocks of one phase through Ray Data actor pools, and report to the
driver (``job-result.json``, or ``job-error.txt`` beside the job).

Ray runs apart from the driver: Ray's signal handlers and the JVM's (Lucene, the analyzer) do not share one process
safely (a Ray driver started after the JVM was seen to crash it with SIGSEGV here), and the driver's own memory stays
clear of Ray's. The child stops, and Ray's workers with it, when the build that started it is gone.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import time
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from weir.core.types import InputError
from weir.indexer.distributed.blocks import block_path, collection_statistics
from weir.indexer.distributed.plan import LOCAL, STATISTICS, Block, RayOptions
from weir.indexer.distributed.workers import BlockWorker, StatisticsWorker

JOB, RESULT, ERROR = "job.pkl", "job-result.json", "job-error.txt"  # in the work directory


def cpus_per_worker(ray_options: RayOptions) -> float:
    if ray_options.cpus_per_worker:
        return float(ray_options.cpus_per_worker)
    return float(max(1, (os.cpu_count() or 1) // ray_options.workers))


def start_ray(ray_options: RayOptions) -> bool:
    """Start a local Ray instance or join the cluster of ``ray_options.address``; whether this process started it
    (and so must stop it)."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        return False
    if ray_options.address == LOCAL:
        cpus = ray_options.workers * cpus_per_worker(ray_options)
        ray.init(address="local", num_cpus=max(1, math.ceil(cpus)), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    else:
        ray.init(address=ray_options.address, log_to_driver=False)
    return True


def _restartable() -> dict:
    """A worker that dies is restarted and its block retried (Ray actor restarts and task retries)."""
    return {"max_restarts": -1, "max_task_retries": -1}


def _exit_with_parent() -> None:
    """Stop (Ray and its workers with us, by SIGTERM's handler) when the build that started this process is gone:
    a driver killed outright must not leave its workers computing."""
    import signal
    import threading

    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker_resources(ray_options: RayOptions, neural: bool) -> tuple[float, int]:
    """CPUs and GPUs per worker: one GPU each when the cluster has GPUs and the steps are neural (LightGBM is not),
    else the CPUs asked for; an InputError when the cluster has no room for the workers."""
    import ray

    resources = ray.cluster_resources()
    gpus = 1 if resources.get("GPU", 0) >= 1 and neural else 0
    cpus = cpus_per_worker(ray_options) if not gpus else 1.0
    if gpus and resources.get("GPU", 0) < ray_options.workers:
        raise InputError(f"--ray-workers {ray_options.workers}: the cluster has {resources['GPU']:g} GPUs (one per "
                         "worker); ask for fewer workers")
    if ray_options.workers * cpus > resources.get("CPU", 0):
        raise InputError(f"--ray-workers {ray_options.workers} x {cpus:g} CPUs: the cluster has "
                         f"{resources.get('CPU', 0):g} CPUs; ask for fewer workers or --ray-cpus-per-worker")
    return cpus, gpus


def _actor_pool(items: list[dict], actor, kwargs: dict, ray_options: RayOptions, cpus: float,
                gpus: int | None = None):
    """``items`` (one block each) mapped by a pool of ``ray_options.workers`` ``actor``s made with ``kwargs``, one
    block in flight per actor, an actor that dies restarted and its block retried."""
    import ray.data

    resources = {"num_cpus": cpus, **({"num_gpus": gpus} if gpus is not None else {})}
    return ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
        actor, batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=ray_options.workers, max_tasks_in_flight_per_actor=1),
        fn_constructor_kwargs=kwargs, ray_remote_args_fn=_restartable, **resources)


def _count_statistics(work: Path, blocks: list[Block], ray_options: RayOptions, cpus: float, kwargs: dict):
    """Every block's statistics counted by an actor pool (those counted by an interrupted run kept), then summed; and
    the step's record (worker-seconds, documents, the sum's seconds)."""
    pending = [asdict(b) for b in blocks if not block_path(work, b.index, STATISTICS).is_file()]
    seconds = documents = 0.0
    if pending:
        ds = _actor_pool(pending, StatisticsWorker, kwargs, ray_options, cpus)
        with tqdm(total=len(blocks), initial=len(blocks) - len(pending), desc="ray: collection statistics",
                  unit="block", mininterval=1.0) as bar:
            for row in ds.iter_rows():
                seconds += float(row["seconds"])
                documents += int(row["documents"])
                bar.update(1)
    started = time.perf_counter()
    total = collection_statistics(work, blocks)
    record = {"worker_seconds": round(seconds, 3), "documents": int(documents), "blocks_counted": len(pending),
              "sum_seconds": round(time.perf_counter() - started, 3)}
    if seconds > 0:
        record["passages_per_worker_second"] = round(documents / seconds, 2)
    return total, record


def _steps(worker: dict) -> str:
    """The steps the workers run, for the progress bar (``deepct+dense``, ``quality (learned)``)."""
    return "+".join([*worker["kinds"], *(["dense"] if worker["dense"] is not None else []),
                     *(["attention states"] if worker.get("states") else []),
                     *([f"quality ({worker['quality']['estimator']})"] if worker.get("quality") else [])])


def _run_blocks(job: dict, ray_options: RayOptions, cpus: float, gpus: int, keep, stats) -> list[dict]:
    """The phase's pending blocks through a pool of :class:`BlockWorker` actors; one row per block computed."""
    worker = job["worker"]
    kwargs = {**worker, "keep": keep, "stats": stats, "threads": None if gpus else max(1, int(cpus)),
              "device": "cuda" if gpus else (worker["device"] or "cpu")}
    ds = _actor_pool(job["pending"], BlockWorker, kwargs, ray_options, cpus, gpus)
    rows = []
    with tqdm(total=job["total"], initial=job["initial"], desc=f"ray: {_steps(worker)} on {ray_options.workers} "
              "worker(s)", unit="doc", mininterval=1.0) as bar:
        for row in ds.iter_rows():
            rows.append({k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()})
            bar.update(int(row["documents"]))
    return rows


def run_job(spec: Path) -> None:
    """Start or join Ray, count the collection statistics when the job asks for them, run the pending blocks of one
    phase through the actor pool, and write the report beside the job."""
    import ray
    import ray.data

    with open(spec, "rb") as f:
        job = pickle.load(f)
    work = spec.parent
    _exit_with_parent()
    ray_options = RayOptions(**job["ray"])
    started = time.perf_counter()
    started_here = start_ray(ray_options)
    try:
        cpus, gpus = _worker_resources(ray_options, job.get("neural", True))
        ray.data.DataContext.get_current().enable_progress_bars = False
        keep = ray.put(job["keep"]) if job["keep"] is not None else None
        stats, counted = None, None
        if job.get("statistics"):
            worker = job["worker"]
            stats, counted = _count_statistics(work, [Block(**b) for b in job["statistics"]], ray_options, cpus,
                                               {"corpus": worker["corpus"], "skip_empty": worker["skip_empty"],
                                                "keep": keep, "work_dir": worker["work_dir"]})
            stats = ray.put(stats)
        rows = _run_blocks(job, ray_options, cpus, gpus, keep, stats)
    finally:
        if started_here:
            ray.shutdown()
    (work / RESULT).write_text(json.dumps({"cpus": cpus, "gpus": gpus, "rows": rows, "statistics": counted,
                                           "seconds": round(time.perf_counter() - started, 3)}))


def main(argv: list[str]) -> int:
    """``python -m weir.indexer.distributed JOB``: run the job; on a failure, write what went wrong beside it for the
    driver (the block files done are kept for a resume) and return 1."""
    import sys
    import traceback

    if len(argv) != 2:
        print("usage: python -m weir.indexer.distributed WORK_DIR/job.pkl (run by `weir index build --ray`)",
              file=sys.stderr)
        return 2
    spec = Path(argv[1])
    try:
        run_job(spec)
    except BaseException as e:  # noqa: BLE001 (the driver reports it, with the block files kept for a resume)
        message = str(e) if isinstance(e, InputError) else "".join(traceback.format_exception_only(e)).strip()
        (spec.parent / ERROR).write_text(message, encoding="utf-8")
        traceback.print_exc()
        return 1
    return 0
