"""Evaluation of runs with ir-measures (pytrec_eval underneath): measures are declarative values, not our code."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence

import ir_measures
from ir_measures import Measure

from weir.core.types import InputError, Run

DEFAULT_MEASURES = ("nDCG@10", "RR@10", "AP", "R@100", "R@1000")
# measures whose relevance is binary: with graded qrels they count a document relevant at grade >= rel
_BINARY = {"AP", "RR", "R", "P", "Success", "Rprec", "Bpref", "NumRelRet", "SetP", "SetR", "SetF"}


class RunDepthWarning(UserWarning):
    """A measure whose cutoff is deeper than the run: it measures only the run's depth (R@1000 of a top-10 run is the
    run's R@10)."""


def beyond_depth(named: dict[str, Measure], run: dict[str, dict[str, float]]) -> tuple[int, list[str]]:
    """The run's depth (most hits of a query) and the names of the measures whose cutoff is deeper."""
    depth = max((len(docs) for docs in run.values()), default=0)
    return depth, [name for name, m in named.items() if (m.params.get("cutoff") or 0) > depth]


def measures(names: Iterable[str], min_rel: int = 1) -> dict[str, Measure]:
    """Parse ir-measures names (``nDCG@10``, ``AP``, ``R@1000`` ...) into {name as given: measure}; binary measures
    get ``rel=min_rel`` (TREC DL counts grade >= 2 as relevant)."""
    out = {}
    for name in names:
        try:
            m = ir_measures.parse_measure(name.strip())
        except (ValueError, NameError, SyntaxError, TypeError):
            raise InputError(f"unknown measure {name!r} (ir-measures syntax, e.g. nDCG@10, RR@10, AP, R@100)") from None
        if min_rel != 1 and m.NAME in _BINARY and "rel" in m.SUPPORTED_PARAMS and "rel" not in m.params:
            m = m(rel=min_rel)
        out[name.strip()] = m
    return out


def evaluate(run: Run | dict, qrels: dict[str, dict[str, int]], names: Sequence[str] = DEFAULT_MEASURES,
             *, min_rel: int = 1, per_query: bool = False):
    """Mean of each measure over the judged queries (those in ``qrels``): a judged query the run has no hits for
    counts 0 (ir-measures' convention, as ``trec_eval -c``; plain pytrec_eval leaves it out); unjudged queries of the
    run are ignored.

    A measure whose cutoff is deeper than the run (``R@1000`` of a top-10 run) is computed over what the run holds
    and named in a :class:`RunDepthWarning`.

    Returns ``{label: mean}``, or with ``per_query`` also ``{label: {qid: value}}``."""
    named = measures(names, min_rel)
    label = {m: name for name, m in named.items()}
    run_dict = run.to_dict() if isinstance(run, Run) else run
    run_dict = {qid: docs for qid, docs in run_dict.items() if qid in qrels}
    if not run_dict:
        raise InputError("the run and the qrels share no query id: wrong qrels for this run?")
    depth, deeper = beyond_depth(named, run_dict)
    if deeper:
        warnings.warn(f"the run holds at most {depth} hits a query: {', '.join(deeper)} measure only those (a run as "
                      f"deep as the cutoff measures them; e.g. -k {max(named[n].params['cutoff'] for n in deeper)})",
                      RunDepthWarning, stacklevel=2)
    means: dict[str, float] = {}
    by_query: dict[str, dict[str, float]] = {name: {} for name in named}
    for metric in ir_measures.iter_calc(list(named.values()), qrels, run_dict):
        by_query[label[metric.measure]][metric.query_id] = metric.value
    for name, values in by_query.items():
        means[name] = sum(values.values()) / len(values) if values else 0.0
    return (means, by_query) if per_query else means


def format_table(rows: dict[str, dict[str, float]], digits: int = 4) -> str:
    """A Markdown table: one row per system, one column per measure."""
    names = list(next(iter(rows.values())).keys()) if rows else []
    width = max([len("system")] + [len(r) for r in rows])
    head = f"| {'system'.ljust(width)} | " + " | ".join(n.rjust(max(len(n), digits + 2)) for n in names) + " |"
    rule = "|" + "-" * (width + 2) + "|" + "|".join("-" * (max(len(n), digits + 2) + 2) for n in names) + "|"
    lines = [head, rule]
    for system, values in rows.items():
        cells = " | ".join(f"{values[n]:.{digits}f}".rjust(max(len(n), digits + 2)) for n in names)
        lines.append(f"| {system.ljust(width)} | {cells} |")
    return "\n".join(lines)
