"""What weir records about where a result came from: file fingerprints, package versions, the creation time, and the
model card every trained artifact carries (one header, written one way)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any



def sha256_file(path: str | os.PathLike) -> str:
    """sha256 of a file, streamed: the fingerprint weir records for collections, topics, qrels, runs and models."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def utc_now() -> str:
    """The ``created`` stamp of manifests, records and model cards: UTC, ISO 8601, to the second."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def weir_version() -> str:
    """The installed weir's version (from its package metadata: pyproject.toml is the one place it is written)."""
    try:
        return metadata.version("weir")
    except metadata.PackageNotFoundError:  # a checkout on sys.path, never installed
        return "0+unknown"


def versions(*dists: str) -> dict[str, str]:
    """weir's and Python's versions, plus those of the given distributions that are installed."""
    out = {"weir": weir_version(), "python": platform.python_version()}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def model_card(kind: str, *, training_data: Any, parameters: dict, command: list[str], dists: tuple[str, ...] = (),
               **fields: Any) -> dict[str, Any]:
    """The header every model card starts with: what it is, which data trained it, with which command and
    parameters, under which versions; ``metrics`` is filled in by the trainer, ``created`` by :func:`write_card`."""
    return {"kind": kind, **fields, "training_data": training_data, "parameters": parameters, "command": command,
            "versions": versions(*dists), "metrics": {}}


def write_json(path: str | os.PathLike, data: Any, *, indent: int = 1) -> Path:
    """Write ``data`` as JSON (UTF-8, a final newline), atomically: a crash never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=indent, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def portable(value: Any, base: str | os.PathLike | None = None) -> Any:
    """``value`` with every absolute path in it (strings, also inside lists and dicts) made relative to ``base``
    (default: the working directory, where the command that trained the model ran), so that a model card names no
    machine's directories: ``/home/me/weir/../shared/collections/adi`` -> ``../shared/collections/adi``; a path in
    weir's cache (an index a recipe built) is named from it: ``$WEIR_CACHE/indexes/adi-bm25-dense-66a13af87a16``."""
    from weir.core.runtime import cache_dir

    base = os.fspath(base or os.getcwd())
    if isinstance(value, str):
        if os.path.isabs(value) and len(value) < 4096 and "\n" not in value:
            cache = os.path.abspath(cache_dir())
            if os.path.commonpath([value, cache]) == cache:
                return "$WEIR_CACHE/" + os.path.relpath(value, cache)
            return os.path.relpath(value, base)
        return value
    if isinstance(value, dict):
        return {portable(k, base): portable(v, base) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v, base) for v in value]
    return value


def write_card(directory: str | os.PathLike, card: dict[str, Any], name: str = "card.json") -> dict[str, Any]:
    """Stamp ``card`` with its creation time and write it to ``directory/name``, its paths made relative
    (:func:`portable`); return it."""
    card["created"] = utc_now()
    card.update(portable(card))
    write_json(Path(directory) / name, card)
    return card
