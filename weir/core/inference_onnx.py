"""The ``onnx`` and ``onnx-int8`` backends of :mod:`weir.core.inference`: ONNX Runtime CPU sessions over a checked
export (how the export is made and checked is :func:`weir.core.inference.export`)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from weir.core.forward import Forward
from weir.core.runtime import cpu_threads


class OnnxForward(Forward):
    """An ONNX Runtime session over a checked export (CPU; intra-op threads = usable cores, no spinning, so that
    other work on the same cores is not starved between calls). ``per_input`` (the default for ``onnx-int8``): each
    row of a right-padded batch runs alone, cut to its real length, and its outputs are put back in place (zeros at
    padded positions)."""

    def __init__(self, path: Path, record: dict, threads: int | None = None, per_input: bool | None = None):
        self.threads = threads or int(os.environ.get("WEIR_TORCH_THREADS", 0)) or cpu_threads()
        self.session = _session(path, self.threads)
        self.path, self.record = path, record
        self.backend, self.dim = record["backend"], int(record["dim"])
        self.heads = tuple(tuple(h) for h in record.get("heads", []))
        self.outputs = [o.name for o in self.session.get_outputs()]
        # the graph's own inputs: the exporter drops one the model never reads (no mask when no layer is kept)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.per_input = self.backend == "onnx-int8" if per_input is None else per_input
        self._lanes: tuple | None = None  # (single-threaded sessions, their threads), made on first use
        self._lanes_lock = threading.Lock()

    def _run(self, inputs: dict[str, np.ndarray], session=None) -> dict[str, np.ndarray]:
        values = (session or self.session).run(None, {k: np.ascontiguousarray(inputs[k], dtype=np.int64)
                                                      for k in self.inputs})
        return dict(zip(self.outputs, values))

    def _rows(self, jobs: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Inputs run one by one: on ``threads`` single-threaded sessions at once, each taking every ``threads``-th
        (the same bits as one session of ``threads`` threads, and 1.3x its speed on SciFact passages here)."""
        if self.threads == 1 or len(jobs) == 1:
            return [self._run(job) for job in jobs]
        with self._lanes_lock:
            if self._lanes is None:
                from concurrent.futures import ThreadPoolExecutor

                self._lanes = ([_session(self.path, 1) for _ in range(self.threads)],
                               ThreadPoolExecutor(self.threads, thread_name_prefix="weir-onnx"))
        sessions, pool = self._lanes
        results: list = [None] * len(jobs)
        lanes = pool.map(lambda j: [self._run(job, sessions[j]) for job in jobs[j::self.threads]], range(self.threads))
        for j, done in enumerate(lanes):
            results[j::self.threads] = done
        return results

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.per_row(inputs, self._rows) if self.per_input else self._run(inputs)

    def describe(self) -> dict:
        return {"backend": self.backend, "recipe": self.record.get("recipe"), "export": str(self.path),
                "export_sha256": self.record["sha256"], "check": self.record["check"]}


def _session(path: Path, threads: int):
    """An ONNX Runtime CPU session of ``threads`` intra-op threads, no spinning, every graph optimization."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
