"""Forward passes of the transformer backbones weir runs, on a chosen backend, behind one interface: a
:class:`Forward` takes ``input_ids``, ``attention_mask`` and ``token_type_ids`` (numpy int64, (B, L), right-padded)
and returns float32 numpy arrays: ``last_hidden_state`` (B, L, dim) and, when asked for at load, ``attentions``
(B, K, L, L), the attention probabilities of K selected (layer, head) pairs.

Backends (``BACKENDS``):

- ``torch``: the model as Hugging Face loads it, fp32 on the CPU, fp16 on a GPU. The reference every export is
  checked against, and what a GPU runs.
- ``onnx``: ONNX Runtime, fp32, on a graph exported here; equal to fp32 torch within 1e-5.
- ``onnx-int8`` (:mod:`weir.core.inference_onnx`): the same graph with its weight matrices quantized to int8 per
  output channel and activations quantized dynamically (ONNX Runtime's ``quantize_dynamic``), but for the
  feed-forward output projections, kept fp32 (:func:`_kept_fp32`: all int8 put SciFact's DeepImpact nDCG@10 0.0051
  below fp32, p = 0.015; with them kept, 0.0029, p = 0.12). Close to fp32 (cosine about 0.995), not equal.
  Dynamic quantization takes one activation scale per tensor, i.e. per batch, padding included, so a row's output
  would move with its neighbours: this backend runs **one input per forward, cut to its real length**
  (:meth:`Forward.per_row`). Not chosen: static QDQ int8 calibrated on SciFact passages (cosine 0.90-0.92 to fp32,
  no faster than fp32), per-token dynamic scales written into the graph (cosine 0.996, its ops not fused), 8-bit
  ``MatMulNBits`` (cosine 0.999, no faster than fp32).
- ``openvino-bf16`` (:mod:`weir.core.inference_openvino`): OpenVINO over the fp32 export, computing in bfloat16,
  one input per inference as well. The CPU default where the CPU has native bf16: faster than ``onnx-int8`` here
  (SciFact passages, 2 cores: 60 against 51 a second) and next to fp32 (cosine 0.99997). Elsewhere the default is
  ``onnx-int8`` (:func:`default_backend`). An index built with either inexact backend is searched with that backend
  only (:func:`check_compatible`).

Why the export is written here rather than taken from optimum or ``transformers.onnx``: the known ways a BERT export
goes wrong are each closed by construction (``../shared/notes``, B3): inputs are passed by name to a wrapper whose
signature fixes their order; ``token_type_ids`` is always an input (zeros when a text has one segment); attention is
computed by hand, eagerly, from an additive mask built from ``attention_mask`` (no SDPA, no traced mask creation of
transformers 5); position ids come from the input's own shape; batch and sequence axes are dynamic and the trace runs
on a padded batch of two. The wrapper is put in eval mode before tracing: ``torch.onnx.export`` restores the module's
mode afterwards, and a wrapper left in training mode had turned the live model's dropout on (hidden states off by 6).

Every export is checked when it is made (:func:`verify`): its outputs against fp32 torch on a padded batch of texts
of 3 to 250 word pieces, single and paired, and each text alone (a backend run one input at a time must give it the
same, to 1e-5, alone and in the batch). An export outside its
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from weir.core import layers
from weir.core.export_check import check_batch, compare
from weir.core.forward import INPUTS, Forward, TorchForward, feed
from weir.core.inference_onnx import OnnxForward
from weir.core.provenance import sha256_file
from weir.core.runtime import cache_dir
from weir.core.types import InputError

BACKENDS = ("torch", "onnx", "onnx-int8", "openvino-bf16")
OPSET = 17
# what each backend must meet against fp32 torch on the check batch
TOLERANCE = {"onnx": {"max_abs_diff": 1e-3, "min_cosine": 0.9999},
             "onnx-int8": {"max_abs_diff": None, "min_cosine": 0.98},
             "openvino-bf16": {"max_abs_diff": None, "min_cosine": 0.999}}
# the exact family (equal to fp32 torch within 1e-3): an index built with one is searched with another
EXACT = ("torch", "onnx")
# how each backend's export is made; an export of another recipe is made again when opened
RECIPES = {"onnx-int8": "dynamic int8 weights per channel, every FFN output projection fp32 (v2)",
           "openvino-bf16": "OpenVINO CPU, bf16 inference precision, over the fp32 export (v1)"}


class ExportError(InputError):
    """An export that does not match fp32 torch, or whose file changed after it was checked."""


def default_backend(device: str) -> str:
    """``$WEIR_BACKEND`` when set, else on the CPU ``openvino-bf16`` where the CPU computes bf16 natively and
    ``onnx-int8`` elsewhere, and ``torch`` on a GPU."""
    if device != "cpu":
        chosen = os.environ.get("WEIR_BACKEND") or "torch"
    else:
        from weir.core.inference_openvino import unusable_reason

        chosen = os.environ.get("WEIR_BACKEND") or ("onnx-int8" if unusable_reason() else "openvino-bf16")
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
    if backend == "openvino-bf16":
        from weir.core.inference_openvino import unusable_reason

        if unusable_reason():
            raise InputError(f"the openvino-bf16 backend cannot run here: {unusable_reason()}; use --backend "
                             f"onnx-int8 (or onnx for fp32)")
    return backend


def check_compatible(built: str | None, asked: str, what: str) -> None:
    """Refuse to search an index component built with backend ``built`` (None: before backends were recorded,
    i.e. torch) with ``asked`` unless both are in the exact family or they are the same."""
    built = built or "torch"
    if built != asked and not (built in EXACT and asked in EXACT):
        raise InputError(f"{what} was encoded with the {built} backend and cannot be searched with {asked}: their "
                         f"vectors differ; use --backend {built}, or rebuild the index with --backend {asked}")


def open_forward(model, tokenizer, backend: str, device: str, *, heads: Sequence[tuple[int, int]] = (),
                 threads: int | None = None, fp16: bool | None = None) -> Forward:
    """The forward pass of a loaded Hugging Face ``model`` on ``backend`` (exported and checked on first use, then
    opened from the cache)."""
    backend = check_backend(backend, device)
    if backend == "torch":
        return TorchForward(model, device, heads=heads, fp16=fp16)
    if backend == "openvino-bf16":
        return _open_openvino(model, tokenizer, heads, threads)
    path, record = _checked_export(model, tokenizer, backend, heads)
    return OnnxForward(path, record, threads)


def _checked_export(model, tokenizer, backend: str, heads: Sequence[tuple[int, int]]) -> tuple[Path, dict]:
    """The ONNX file of ``backend`` for ``model`` and its record: exported and checked when there is none (or one of an
    earlier recipe), refused when its bytes changed after the check."""
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
    return path, record


def _open_openvino(model, tokenizer, heads: Sequence[tuple[int, int]], threads: int | None) -> Forward:
    """OpenVINO over the checked fp32 export, itself checked against fp32 torch once per export and OpenVINO version
    (the figures in ``openvino-bf16.json`` beside the export)."""
    from weir.core import inference_openvino

    backend = "openvino-bf16"
    path, fp32 = _checked_export(model, tokenizer, "onnx", heads)
    record = {"backend": backend, "recipe": RECIPES[backend], "dim": fp32["dim"], "heads": fp32["heads"],
              "export_sha256": fp32["sha256"], "versions": {"openvino": inference_openvino.version()}}
    record_path = path.with_name(f"{backend}.json")
    saved = json.loads(record_path.read_text(encoding="utf-8")) if record_path.is_file() else {}
    forward = inference_openvino.OpenVinoForward(path, {**record, "check": saved.get("check")}, threads)
    if any(saved.get(k) != v for k, v in record.items()):  # not checked yet, or for another export or version
        record["check"] = verify(model, tokenizer, forward, backend)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".json", delete=False, encoding="utf-8") as f:
            json.dump(record, f, indent=2)
        os.replace(f.name, record_path)
        forward.record = record
    return forward


def fingerprint(model, heads: Sequence[tuple[int, int]] = ()) -> str:
    """sha256 (first 24 hex digits) over the model's parameters and buffers and the outputs asked for: an export is
    reused only for the very weights it was made from (a fine-tuned backbone has its own)."""
    digest = hashlib.sha256(json.dumps({"class": type(model).__name__, "heads": [list(h) for h in heads],
                                        "opset": OPSET}).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + b"\0")
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:24]


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
            torch.onnx.export(layers.export_graph(model, heads), tuple(torch.from_numpy(sample[k]) for k in INPUTS),
                              str(fp32), input_names=list(INPUTS), output_names=outputs, dynamic_axes=axes,
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
    together = candidate(batch)
    padded = compare(reference, together, batch["attention_mask"])
    alone, moved = {"max_abs_diff": 0.0, "min_cosine": 1.0}, 0.0
    for i, n in enumerate(lengths):  # a row alone, no padding: catches shapes baked in by the trace
        row = {k: v[i:i + 1, :n] for k, v in batch.items()}
        ref_row = {k: v[i:i + 1, :n] for k, v in reference.items() if k == "last_hidden_state"}
        if "attentions" in reference:
            ref_row["attentions"] = reference["attentions"][i:i + 1, :, :n, :n]
        own = candidate(row)
        figures = compare(ref_row, own, row["attention_mask"])
        alone = {k: (max if k != "min_cosine" else min)(alone.get(k, figures[k]), figures[k]) for k in figures}
        moved = max(moved, float(np.abs(own["last_hidden_state"][0] - together["last_hidden_state"][i, :n]).max()))
    if getattr(candidate, "per_input", False) and moved > 1e-5:  # it promises what an input gets, whatever its batch
        raise ExportError(f"the {backend} backend gives a row {moved:.2g} apart alone and in a padded batch; it is "
                          f"not used")
    tolerance = TOLERANCE[backend]
    check = {"rows": len(lengths), "lengths": lengths, "padded": padded, "alone": alone,
             "alone_vs_padded_max_abs_diff": moved, "tolerance": tolerance}
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
