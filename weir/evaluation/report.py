"""The report of an experiment (:mod:`weir.evaluation.experiment`): the Markdown table, results.md/.json/.csv,
per_query.csv, and plots (matplotlib, Agg backend: no display needed): effectiveness against a cost (latency per
query, index size) as a labelled scatter, or effectiveness per system as bars when no cost is known."""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

MARK = "†"  # significantly different from the baseline after Holm's correction


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


def reliability_plot(curves: Sequence[tuple[str, Sequence[Mapping]]], title: str, path: str | os.PathLike) -> Path:
    """A reliability diagram: for each (label, bins of :func:`weir.evaluation.calibration.reliability`), the share
    of relevant hits against the mean predicted probability of each non-empty bin (marker size: the bin's hits),
    beside the diagonal of a perfect calibration."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 5), dpi=120)
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfectly calibrated")
    for label, bins in curves:
        used = [b for b in bins if b["hits"]]
        total = sum(b["hits"] for b in used) or 1
        ax.plot([b["predicted"] for b in used], [b["observed"] for b in used], marker="o", linewidth=1, label=label)
        ax.scatter([b["predicted"] for b in used], [b["observed"] for b in used],
                   s=[8 + 400 * b["hits"] / total for b in used], alpha=0.3)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted P(relevant)")
    ax.set_ylabel("share relevant")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
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


def _significant(record: dict, label: str, measure: str) -> bool:
    result = record["significance"]["results"].get(measure, {}).get(label)
    return bool(result and result["significant"])


def _risk_note(record: dict) -> str:
    """The systems' URisk against the baseline, in words (none in a record of before it was kept)."""
    risk = record.get("risk")
    if not risk or not risk["urisk"]:
        return ""
    values = ", ".join(f"{label} {value:+.4f}" for label, value in risk["urisk"].items())
    return (f" URisk of {risk['measure']} against {record['baseline']} (the mean change per query, each loss counted "
            f"{1 + risk['alpha']:g} times; 0: never worse): {values}.")


def table(record: dict, digits: int = 4) -> str:
    """The Markdown table: one row per system, the measures (``†`` where significantly different from the
    baseline after correction), mean latency per query and per stage, and the size of the index components each
    pipeline reads."""
    names = record["config"]["measures"]
    several = any(s.get("index_bytes") is not None for s in record["systems"])  # pipelines over an index
    timed = any(s["ms_per_query"] is not None for s in record["systems"])
    head = ["system"] + names + (["ms/query", "stages (ms/query)"] if timed else []) + (["index MiB"] if several else [])
    rows = []
    for s in record["systems"]:
        label = s["label"] + (" (baseline)" if s["label"] == record["baseline"] else "")
        cells = [label]
        for m in names:
            cells.append(f"{s['means'][m]:.{digits}f}" + (MARK if _significant(record, s["label"], m) else ""))
        if timed:
            ms = s["ms_per_query"]
            cells.append("–" if ms is None else f"{ms:.2f}")
            cells.append(", ".join(f"{st} {t:.2f}" for st, t in s["stage_ms_per_query"].items()) or "–")
        if several:
            cells.append("–" if s["index_bytes"] is None else f"{s['index_bytes'] / 2**20:.1f}")
        rows.append(cells)
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths))) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if i else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|"
    sig = record["significance"]
    compared = len(record["systems"]) - 1
    note = (f"{MARK} significantly different from {record['baseline']} ({sig['test']}, Holm-corrected over "
            f"{compared} comparison{'s' * (compared != 1)} per measure, p < {sig['alpha']})."
            + (" Latency: wall time of one batch over all topics, divided by the number of topics." if timed else "")
            + (" Index MiB: the index components the pipeline reads." if several else "")
            + _risk_note(record))
    return "\n".join([line(head), rule] + [line(r) for r in rows]) + "\n\n" + note


def write_outputs(record: dict, systems: list[dict], out: Path) -> None:
    """results.md, results.json, results.csv (one row per system), per_query.csv (values and deltas against the
    baseline), and the plots."""
    out.mkdir(parents=True, exist_ok=True)
    names = record["config"]["measures"]
    baseline = record["baseline"]
    base_values = next(s for s in systems if s["label"] == baseline)["per_query"]

    plots = {}
    marked = {s["label"]: s["label"] + (MARK if _significant(record, s["label"], names[0]) else "")
              for s in record["systems"]}
    points = [(marked[s["label"]], s["ms_per_query"], s["means"][names[0]], s["index_bytes"])
              for s in record["systems"]]
    if any(p[1] is not None for p in points):
        plots["latency"] = tradeoff([(p[0], p[1], p[2]) for p in points if p[1] is not None],
                                           "mean latency per query (ms)", names[0], out / "effectiveness-latency.png")
    else:
        plots["effectiveness"] = bars([(marked[s["label"]], s["means"][names[0]], s["per_query"][names[0]])
                                              for s in systems], names[0], out / "effectiveness.png")
    if len({p[3] for p in points if p[3] is not None}) > 1:
        plots["index_size"] = tradeoff([(p[0], p[3] / 2**20, p[2]) for p in points if p[3] is not None],
                                               "index size (MiB)", names[0], out / "effectiveness-index-size.png")
    record["outputs"] = {"markdown": "results.md", "json": "results.json", "csv": "results.csv",
                         "per_query_csv": "per_query.csv", "runs": "runs/",
                         "plots": {k: Path(v).name for k, v in plots.items()}}

    markdown = table(record)
    (out / "results.md").write_text(markdown + "\n", encoding="utf-8")
    with open(out / "results.json", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, ensure_ascii=False, default=str)
        f.write("\n")
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["system", "kind", "index", "pipeline", "queries"] + names + [f"{m} p_holm" for m in names]
                   + ["ms_per_query", "index_bytes", "run_file"])
        for s in record["systems"]:
            tested = [record["significance"]["results"].get(m, {}).get(s["label"]) for m in names]
            w.writerow([s["label"], s["kind"], s.get("index", ""), s.get("pipeline", ""), s["queries"]]
                       + [s["means"][m] for m in names] + ["" if t is None else t["p_holm"] for t in tested]
                       + ["" if s["ms_per_query"] is None else s["ms_per_query"],
                          "" if s["index_bytes"] is None else s["index_bytes"], s["run_file"]])
    with open(out / "per_query.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["system", "measure", "qid", "value", "baseline", "delta"])
        for s in systems:
            for m in names:
                values, base = s["per_query"][m], base_values[m]
                for qid in sorted(set(values) | set(base)):
                    v, b = values.get(qid, 0.0), base.get(qid, 0.0)
                    w.writerow([s["label"], m, qid, v, b, v - b])

