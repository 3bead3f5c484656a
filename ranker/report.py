"""Plots of experiment results (matplotlib, Agg backend: no display needed): effectiveness against a cost
(latency per query, index size) as a labelled scatter, or effectiveness per system as bars when no cost is known."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def tradeoff(points: Sequence[tuple[str, float, float]], x_label: str, y_label: str,
             path: str | os.PathLike) -> Path:
    """A scatter of (label, cost, effectiveness), each point labelled; log-scaled cost when it spans > 20x."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    xs, ys = [p[1] for p in points], [p[2] for p in points]
    ax.scatter(xs, ys, s=40, zorder=3)
    for label, x, y in points:
        ax.annotate(label, (x, y), xytext=(5, 5), textcoords="offset points", fontsize=8)
    positive = [x for x in xs if x > 0]
    if positive and max(positive) / min(positive) > 20:
        ax.set_xscale("log")
    ax.set_xlabel(x_label + " (lower is better)")
    ax.set_ylabel(y_label + " (higher is better)")
    ax.set_title(f"{y_label} against {x_label}")
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.25, y=0.15)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")  # labels near the edge stay inside the image
    plt.close(fig)
    return Path(path)


def bars(items: Sequence[tuple[str, float, Mapping[str, float]]], label: str, path: str | os.PathLike) -> Path:
    """Horizontal bars of (system, mean, {qid: value}) with a 95% normal interval of the mean (1.96 standard
    errors over queries)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.45 * len(items)), dpi=120)
    names = [i[0] for i in items][::-1]
    means = [i[1] for i in items][::-1]
    errors = []
    for _, mean, values in items[::-1]:
        v = list(values.values())
        sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
        errors.append(1.96 * sd / math.sqrt(len(v)) if v else 0.0)
    ax.barh(names, means, xerr=errors, capsize=3, color="#4c72b0", alpha=0.85)
    for y, (mean, err) in enumerate(zip(means, errors)):
        ax.text(mean + err + 0.005, y, f"{mean:.4f}", va="center", fontsize=8)
    ax.set_xlabel(f"{label} (mean over queries, 95% interval)")
    ax.set_xlim(0, min(1.05, max(m + e for m, e in zip(means, errors)) * 1.2) if means else 1)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")  # labels near the edge stay inside the image
    plt.close(fig)
    return Path(path)
