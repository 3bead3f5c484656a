"""The ``openvino-bf16`` backend of :mod:`weir.core.inference`: OpenVINO's CPU runtime over the checked fp32 ONNX
export, computing in bfloat16 where the CPU does so natively (AVX512-BF16 or AMX), fp32 accumulation and softmax.

Why OpenVINO: on the 2-core AVX512-BF16 machines here it is the fastest CPU backend that stays next to fp32 (SciFact
passages, one input at a time: 60 passages/s against ONNX Runtime int8's 51, cosine to fp32 0.99997 against 0.995;
sentence-transformers' own openvino backend, padded batches of 32, 55). Its int8 needs a calibration library (NNCF)
and was not tried. Where the CPU has no native bf16, OpenVINO would compute in fp32, no faster than ``onnx``: the
backend is then refused, and the default is ``onnx-int8`` (:func:`weir.core.inference.default_backend`).

Two compilations of one model, which give the same bits for an input (checked with every export): a single input
runs on one stream of all the threads (a query's latency), several run one input per request on one single-threaded
stream per thread (a batch's throughput), each cut to its real length, so that what an input gets never depends on
what it was batched with. bf16 is close to fp32, not equal: an index built with it is searched with it only.
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

import numpy as np

from weir.core.forward import Forward
from weir.core.runtime import cpu_threads

PRECISION = "bf16"


@functools.cache
def unusable_reason() -> str | None:
    """Why ``openvino-bf16`` cannot run here (None: it can)."""
    try:
        import openvino as ov
    except ImportError as e:  # an installation without it: said, and the default falls back
        return f"openvino is not installed ({e})"
    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if "BF16" not in capabilities:
        return f"this CPU has no native bfloat16 (OpenVINO sees {', '.join(capabilities)})"
    return None


def version() -> str:
    import openvino as ov

    return ov.get_version()


class OpenVinoForward(Forward):
    """OpenVINO over an ONNX file (the fp32 export), bf16, one input per inference (:meth:`Forward.per_row`)."""

    backend = "openvino-bf16"
    per_input = True

    def __init__(self, path: Path, record: dict, threads: int | None = None):
        import openvino as ov

        self.threads = threads or int(os.environ.get("WEIR_TORCH_THREADS", 0)) or cpu_threads()
        self.path, self.record = path, record
        self.dim, self.heads = int(record["dim"]), tuple(tuple(h) for h in record.get("heads", []))
        self._core = ov.Core()
        self._model = self._core.read_model(str(path))
        self.latency = self._compile(NUM_STREAMS="1", PERFORMANCE_HINT="LATENCY")
        self.inputs = [i.get_any_name() for i in self.latency.inputs]
        self.outputs = [o.get_any_name() for o in self.latency.outputs]
        self._local = threading.local()  # one latency request per calling thread (a service's request threads)
        self._queue = None  # the throughput compilation's requests, made at the first batch (queries never need it)
        self._queue_lock = threading.Lock()

    def _compile(self, **config: str):
        return self._core.compile_model(self._model, "CPU", {"INFERENCE_PRECISION_HINT": PRECISION,
                                                             "INFERENCE_NUM_THREADS": str(self.threads), **config})

    def _feed(self, row: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: np.ascontiguousarray(row[k], dtype=np.int64) for k in self.inputs}

    def _one(self, row: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.latency.create_infer_request()
        request.infer(self._feed(row))
        return {name: request.get_output_tensor(i).data.copy() for i, name in enumerate(self.outputs)}

    def _rows(self, rows: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        if len(rows) == 1:
            return [self._one(rows[0])]
        results: list = [None] * len(rows)

        def done(request, i):
            results[i] = {name: request.get_output_tensor(j).data.copy() for j, name in enumerate(self.outputs)}

        with self._queue_lock:
            if self._queue is None:
                import openvino as ov

                self._queue = ov.AsyncInferQueue(self._compile(NUM_STREAMS=str(self.threads)), self.threads)
            self._queue.set_callback(done)
            for i, row in enumerate(rows):
                self._queue.start_async(self._feed(row), i)
            self._queue.wait_all()
        return results

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.per_row(inputs, self._rows)

    def describe(self) -> dict:
        return {"backend": self.backend, "recipe": self.record.get("recipe"), "export": str(self.path),
                "export_sha256": self.record["export_sha256"], "check": self.record["check"]}
