"""Helpers shared by the benchmarks: where the collections are, and a summary of repeated timings."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
COLLECTIONS = Path(os.environ.get("WEIR_COLLECTIONS", ROOT.parent / "shared" / "collections"))


def summary(values: list[float]) -> str:
    """median [min-max] of repeated measurements."""
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def corpus(path: Path) -> tuple[list[str], list[str]]:
    """A collection's ids and flat texts (title + text, BEIR's convention), as the peer engines index them."""
    ids, texts = [], []
    with open(path / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            ids.append(d["id"])
            texts.append(f"{d.get('title') or ''} {d.get('text') or ''}".strip())
    return ids, texts


def stop(process, grace: float) -> None:
    """End a server the bench started: SIGTERM (it drains), SIGKILL after ``grace`` seconds."""
    import subprocess

    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
