"""Forward passes of the transformer backbones weir runs, on a chosen backend, behind one interface: a
:class:`Forward` takes ``input_ids``, ``attention_mask`` and ``token_type_ids`` (numpy int64, (B, L), right-padded)
and returns float32 numpy arrays: ``last_hidden_state`` (B, L, dim) and, when asked for at load, ``attentions``
(B, K, L, L), the attention probabilities of K selected (layer, head) pairs.

Backends (``BACKENDS``):

- ``torch``: the model as Hugging Face loads it, fp32 on the CPU, fp16 on a GPU. The reference every export is
  checked against, and what a GPU runs.
- ``onnx``: ONNX Runtime, fp32, on a graph exported here; equal to fp32 torch within 1e-5.
- ``onnx-int8``: the same graph with its weight matrices quantized to int8 per output channel and activations
  quantized dynamically (ONNX Runtime's ``quantize_dynamic``), but for the feed-forward output projections, kept
  fp32 (:func:`_kept_fp32`: all int8 put SciFact's DeepImpact nDCG@10 0.0051 below fp32, p = 0.015; with them kept,
  0.0029, p = 0.12). The CPU default: close to fp32 (cosine about 0.995), not equal, so an index built with it is
  searched with it only (:func:`check_compatible`). Dynamic quantization takes one activation scale per tensor, i.e.
  per batch, padding included, so a row's output would move with its neighbours: this backend runs **one input per
  forward, cut to its real length** (:attr:`OnnxForward.per_input`), so that what it computes for an input never
  depends on what it was batched with; that is also its fastest way here (SciFact passages, 2 cores, all int8: 21 ms
  a passage alone, 25 ms in padded batches of 32; ``onnx`` 41 ms). Not chosen: static QDQ int8 calibrated on SciFact passages (cosine 0.90-0.92 to fp32, no faster than fp32),
  per-token dynamic scales written into the graph (cosine 0.996 but 35 ms: its ops are not fused), 8-bit
  ``MatMulNBits`` (cosine 0.999, 39-47 ms).

Why the export is written here rather than taken from optimum or ``transformers.onnx``: the known ways a BERT export
goes wrong are each closed by construction (``../shared/notes``, B3): inputs are passed by name to a wrapper whose
signature fixes their order; ``token_type_ids`` is always an input (zeros when a text has one segment); attention is
computed by hand, eagerly, from an additive mask built from ``attention_mask`` (no SDPA, no traced mask creation of
transformers 5); position ids come from the input's own shape; batch and sequence axes are dynamic and the trace runs
on a padded batch of two. The wrapper is put in eval mode before tracing: ``torch.onnx.export`` restores the module's
mode afterwards, and a wrapper left in training mode had turned the live model's dropout on (hidden states off by 6).

Every export is checked when it is made (:func:`verify`): its outputs against fp32 torch on a padded batch of texts
of 3 to 250 word pieces, single and paired, and each text alone against its row of that batch. An export outside its
backend's tolerance is refused (:class:`ExportError`) and never written. The check's figures and the export's sha256
are written beside it (``<backend>.json``); an export whose bytes no longer match that record is refused when opened.
Exports live in ``$WEIR_CACHE/exports/<fingerprint of the weights and outputs>/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from weir.core.export_check import check_batch, compare
from weir.core.provenance import sha256_file
from weir.core.runtime import cache_dir, cpu_threads
from weir.core.types import InputError

BACKENDS = ("torch", "onnx", "onnx-int8")
OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
SEQUENCE_AXES = {"last_hidden_state": (1,), "attentions": (2, 3)}  # (B, L, dim), (B, K, L, L)
# what each backend must meet against fp32 torch on the check batch
TOLERANCE = {"onnx": {"max_abs_diff": 1e-3, "min_cosine": 0.9999},
             "onnx-int8": {"max_abs_diff": None, "min_cosine": 0.98}}
# the exact family (equal to fp32 torch within 1e-3): an index built with one is searched with another
EXACT = ("torch", "onnx")
# how each backend's export is made; an export of another recipe is made again when opened
RECIPES = {"onnx-int8": "dynamic int8 weights per channel, every FFN output projection fp32 (v2)"}


class ExportError(InputError):
    """An export that does not match fp32 torch, or whose file changed after it was checked."""


def default_backend(device: str) -> str:
    """``$WEIR_BACKEND`` when set, else ``onnx-int8`` on the CPU and ``torch`` on a GPU."""
    chosen = os.environ.get("WEIR_BACKEND") or ("onnx-int8" if device == "cpu" else "torch")
    return check_backend(chosen, device)


def exact_backend(device: str) -> str:
    """The fastest backend of the exact family on ``device`` (``onnx`` on the CPU, ``torch`` on a GPU): what training
    runs on, whatever the default, so that a model trained again from its recipe is the model shipped."""
    return "onnx" if device == "cpu" else "torch"


def check_backend(backend: str | None, device: str) -> str:
    """``backend`` validated for ``device`` (None: the default)."""
    if backend is None:
        return default_backend(device)
    if backend not in BACKENDS:
        raise InputError(f"unknown inference backend {backend!r}; known: {', '.join(BACKENDS)}")
    if backend != "torch" and device != "cpu":
        raise InputError(f"the {backend} backend runs on the CPU; on {device} use --backend torch")
    return backend


def check_compatible(built: str | None, asked: str, what: str) -> None:
    """Refuse to search an index component built with backend ``built`` (None: before backends were recorded,
    i.e. torch) with ``asked`` unless both are in the exact family or they are the same."""
    built = built or "torch"
    if built != asked and not (built in EXACT and asked in EXACT):
        raise InputError(f"{what} was encoded with the {built} backend and cannot be searched with {asked}: their "
                         f"vectors differ; use --backend {built}, or rebuild the index with --backend {asked}")


def feed(enc) -> dict[str, np.ndarray]:
    """A tokenizer's output (numpy or torch) as the int64 inputs of a forward pass, ``token_type_ids`` added as zeros
    where the tokenizer gave none."""
    out = {k: np.asarray(enc[k].cpu() if hasattr(enc[k], "cpu") else enc[k], dtype=np.int64)
           for k in ("input_ids", "attention_mask")}
    types = enc.get("token_type_ids") if hasattr(enc, "get") else None
    out["token_type_ids"] = (np.zeros_like(out["input_ids"]) if types is None else
                             np.asarray(types.cpu() if hasattr(types, "cpu") else types, dtype=np.int64))
    return out


class Forward:
    """One backend's forward pass: ``forward(inputs) -> {"last_hidden_state": ..., ["attentions": ...]}``."""

    backend: str
    dim: int
    heads: tuple[tuple[int, int], ...]

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"backend": self.backend}


class TorchForward(Forward):
    """The Hugging Face model (eager attention when attentions are read), fp16 on a GPU, fp32 otherwise."""

    backend = "torch"

    def __init__(self, model, device: str, *, heads: Sequence[tuple[int, int]] = (), fp16: bool | None = None):
        self.model, self.device, self.heads = model, device, tuple(map(tuple, heads))
        self.fp16 = device.startswith("cuda") if fp16 is None else fp16
        model.to(device)
        if self.fp16:
            model.half()
        model.eval()
        if self.heads and getattr(model.config, "_attn_implementation", "eager") != "eager":
            model.set_attn_implementation("eager")  # SDPA does not give attention probabilities
        self.dim = int(model.config.hidden_size)

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        with torch.inference_mode():
            x = {k: torch.from_numpy(np.ascontiguousarray(inputs[k])).to(self.device) for k in INPUTS}
            out = self.model(**x, output_attentions=bool(self.heads))
            result = {"last_hidden_state": out.last_hidden_state.float().cpu().numpy()}
            if self.heads:
                result["attentions"] = torch.stack([out.attentions[layer][:, head] for layer, head in self.heads],
                                                   dim=1).float().cpu().numpy()
        return result


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
        mask = np.asarray(inputs["attention_mask"])
        if not self.per_input or (len(mask) == 1 and mask.all()):
            return self._run(inputs)
        batch, width = mask.shape
        lengths = mask.sum(1)
        if not (mask == (np.arange(width) < lengths[:, None])).all():
            raise ValueError("a batch run one input at a time must be right-padded (its mask a run of ones, then "
                             "zeros)")
        rows = self._rows([{k: inputs[k][i:i + 1, :n] for k in INPUTS} for i, n in enumerate(lengths.tolist())])
        out: dict[str, np.ndarray] = {}
        for i, row in enumerate(rows):
            for name, value in row.items():
                if name not in out:
                    shape = [batch, *value.shape[1:]]
                    for axis in SEQUENCE_AXES[name]:
                        shape[axis] = width
                    out[name] = np.zeros(shape, dtype=value.dtype)
                out[name][(slice(i, i + 1), *(slice(0, d) for d in value.shape[1:]))] = value
        return out

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


def open_forward(model, tokenizer, backend: str, device: str, *, heads: Sequence[tuple[int, int]] = (),
                 threads: int | None = None, fp16: bool | None = None) -> Forward:
    """The forward pass of a loaded Hugging Face ``model`` on ``backend`` (exported and checked on first use, then
    opened from the cache)."""
    backend = check_backend(backend, device)
    if backend == "torch":
        return TorchForward(model, device, heads=heads, fp16=fp16)
    model.float().eval()
    directory = cache_dir("exports", fingerprint(model, heads))
    path, record_path = directory / f"{backend}.onnx", directory / f"{backend}.json"
    if not path.is_file() or not record_path.is_file() or \
            json.loads(record_path.read_text(encoding="utf-8")).get("recipe") != RECIPES.get(backend):
        export(model, tokenizer, backend, path, heads=heads)  # none yet, or one made by an earlier recipe
    record = json.loads(record_path.read_text(encoding="utf-8"))
    if sha256_file(path) != record.get("sha256"):
        raise ExportError(f"{path}: the export changed after it was checked (sha256 differs from {record_path}); "
                          f"it is not used. Delete {directory} to export and check it again")
    return OnnxForward(path, record, threads)


def fingerprint(model, heads: Sequence[tuple[int, int]] = ()) -> str:
    """sha256 (first 24 hex digits) over the model's parameters and buffers and the outputs asked for: an export is
    reused only for the very weights it was made from (a fine-tuned backbone has its own)."""
    digest = hashlib.sha256(json.dumps({"class": type(model).__name__, "heads": [list(h) for h in heads],
                                        "opset": OPSET}).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + b"\0")
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:24]


def _graph(model, heads: Sequence[tuple[int, int]]):
    """The BERT encoder as an exportable module: embeddings, then each layer by hand with eager attention."""
    import torch

    from weir.core.layers import layer_forward

    class Graph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            positions = torch.cumsum(torch.ones_like(input_ids), 1) - 1
            hidden = self.model.embeddings(input_ids=input_ids, token_type_ids=token_type_ids,
                                           position_ids=positions)
            add = (1.0 - attention_mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
            wanted: dict[int, list[int]] = {}
            for layer, head in heads:
                wanted.setdefault(layer, []).append(head)
            selected = {}
            for i, layer in enumerate(self.model.encoder.layer):
                hidden, probs = layer_forward(layer, hidden, add)
                for head in wanted.get(i, []):
                    selected[(i, head)] = probs[:, head]
            if not heads:
                return hidden
            return hidden, torch.stack([selected[tuple(h)] for h in heads], dim=1)

    return Graph().eval()


def export(model, tokenizer, backend: str, path: Path, *, heads: Sequence[tuple[int, int]] = ()) -> dict:
    """Export ``model`` for ``backend`` to ``path``, check it against fp32 torch (:func:`verify`) and write it with its
    record, or raise :class:`ExportError` and write nothing."""
    import torch

    was_training = model.training
    model.float().eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    outputs = ["last_hidden_state"] + (["attentions"] if heads else [])
    sample = feed(tokenizer(["an example of a passage that is longer", "short"], padding=True, return_tensors="np"))
    axes = {name: {0: "batch", 1: "sequence"} for name in (*INPUTS, *outputs)}
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        with torch.inference_mode(False), torch.no_grad(), _quiet():
            torch.onnx.export(_graph(model, heads), tuple(torch.from_numpy(sample[k]) for k in INPUTS), str(fp32),
                              input_names=list(INPUTS), output_names=outputs, dynamic_axes=axes,
                              opset_version=OPSET, dynamo=False)
        model.train(was_training)
        made = fp32
        if backend == "onnx-int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            made = Path(tmp) / "int8.onnx"
            # weight matrices only (MatMulConstBOnly): the attention products of two activations stay fp32
            quantize_dynamic(str(fp32), str(made), weight_type=QuantType.QInt8, per_channel=True,
                             nodes_to_exclude=_kept_fp32(fp32, model.config),
                             extra_options={"MatMulConstBOnly": True})
        record = {"backend": backend, "recipe": RECIPES.get(backend), "dim": int(model.config.hidden_size),
                  "heads": [list(h) for h in heads], "opset": OPSET, "versions": _versions()}
        record["check"] = verify(model, tokenizer, OnnxForward(made, record, threads=None), backend)
        record["sha256"] = sha256_file(made)
        # the export, then its record, each renamed into place whole (processes exporting at once write the same)
        os.replace(made, path)
        written = Path(tmp) / "record.json"
        written.write_text(json.dumps(record, indent=2), encoding="utf-8")
        os.replace(written, path.with_suffix(".json"))
    return record


def _kept_fp32(path: Path, config) -> list[str]:
    """The MatMuls int8 leaves in fp32: every layer's feed-forward output projection (weights intermediate x hidden),
    where int8's error is largest. SciFact test, all-MiniLM-L6-v2 term weights, nDCG@10 against fp32 torch (paired t):
    all int8, DeepImpact -0.0051 (p 0.015) and DeepCT -0.0049 (p 0.09); the first half kept, -0.0035 (p 0.015) and
    -0.0022; all kept, -0.0029 (p 0.12) and -0.0020 (p 0.30), at 1.5x all-int8's time (token-vector cosine to fp32
    0.9908, 0.9946, 0.9954)."""
    import onnx

    graph = onnx.load(str(path)).graph
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    ffn_out = [n.name for n in graph.node if n.op_type == "MatMul"
               and shapes.get(n.input[1]) == (config.intermediate_size, config.hidden_size)]
    return ffn_out


def verify(model, tokenizer, candidate: Forward, backend: str) -> dict:
    """Check ``candidate`` against fp32 torch on :func:`check_batch` (padded) and on each of its rows alone; the figures,
    or :class:`ExportError` when a tolerance of :data:`TOLERANCE` is not met."""
    batch, lengths = check_batch(tokenizer)
    reference = TorchForward(model, "cpu", heads=candidate.heads, fp16=False)(batch)
    padded = compare(reference, candidate(batch), batch["attention_mask"])
    alone = {"max_abs_diff": 0.0, "min_cosine": 1.0}
    for i, n in enumerate(lengths):  # a row alone, no padding: catches shapes baked in by the trace
        row = {k: v[i:i + 1, :n] for k, v in batch.items()}
        ref_row = {k: v[i:i + 1, :n] for k, v in reference.items() if k == "last_hidden_state"}
        if "attentions" in reference:
            ref_row["attentions"] = reference["attentions"][i:i + 1, :, :n, :n]
        figures = compare(ref_row, candidate(row), row["attention_mask"])
        alone = {k: (max if k != "min_cosine" else min)(alone.get(k, figures[k]), figures[k]) for k in figures}
    tolerance = TOLERANCE[backend]
    check = {"rows": len(lengths), "lengths": lengths, "padded": padded, "alone": alone, "tolerance": tolerance}
    for name, figures in (("padded", padded), ("alone", alone)):
        too_far = tolerance["max_abs_diff"] is not None and (
            figures["max_abs_diff"] > tolerance["max_abs_diff"]
            or figures.get("attentions_max_abs_diff", 0.0) > tolerance["max_abs_diff"])
        if too_far or figures["min_cosine"] < tolerance["min_cosine"]:
            raise ExportError(f"the {backend} export does not match fp32 torch ({name} batch: {figures}; tolerance "
                              f"{tolerance}); it is not used")
    return check


def _versions() -> dict:
    from importlib.metadata import version

    return {p: version(p) for p in ("torch", "onnxruntime", "onnx", "transformers")}


@contextlib.contextmanager
def _quiet():
    """Silence the tracer's warnings about Python values (the graph's shapes are checked by :func:`verify`)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


__all__: list[Any] = ["BACKENDS", "EXACT", "ExportError", "Forward", "OnnxForward", "TorchForward", "check_backend",
                      "check_compatible", "default_backend", "exact_backend", "export", "feed", "fingerprint",
                      "open_forward", "verify"]
