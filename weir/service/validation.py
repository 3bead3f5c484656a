"""What a server answers and what a request may ask: the pipelines served (canonical names, the default among them),
and each request's fields checked against the limits (k, depth, pipeline name, query length and distinct words,
batch size). A bad field is INVALID_ARGUMENT naming it, in a message that never repeats the input at length."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import grpc

from weir.core.types import InputError
from weir.ranker import registry
from weir.service.config import Limits
from weir.service.failures import Failure

DEFAULT_K = 10


@functools.lru_cache(maxsize=256)  # every call's pipeline (its check, its metrics label): the same few names
def canonical(spec: str) -> str:
    """Pipeline ``spec`` as the service names it: its stages joined by ``>>`` (InputError for a bad one)."""
    return ">>".join(registry.parse(spec))


def served_pipelines(configured: Sequence[str] | None, default: str, supported: Callable[[], list[str]],
                     check: Callable[[str], None] | None = None) -> tuple[str, ...]:
    """The pipelines a server answers: the ``configured`` ones (each passed to ``check``, which raises InputError
    for one the server can not run), else every one ``supported()`` gives; InputError unless ``default`` is among
    them."""
    if configured is None:
        allowed = supported()
    else:
        allowed = [canonical(p) for p in configured]
        for spec in allowed:
            if check is not None:
                check(spec)
    default = canonical(default)
    if default not in allowed:
        raise InputError(f"the default pipeline {default!r} is not among the served ones: {', '.join(allowed)}")
    return tuple(dict.fromkeys(allowed))


def short(text: str, limit: int = 60) -> str:
    """``text`` quoted, cut to ``limit`` characters (error messages never repeat an input at length)."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def check_request(request, limits: Limits, default_pipeline: str,
                  allowed: Sequence[str]) -> tuple[str, int, int | None]:
    """(pipeline, k, depth) of a valid request; Failure(INVALID_ARGUMENT) naming the first bad field."""
    k = request.k if request.HasField("k") else DEFAULT_K
    if not 1 <= k <= limits.max_k:
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT, f"k must be between 1 and {limits.max_k} (got {k})")
    if not 0 <= request.depth <= limits.max_depth:
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                      f"depth must be between 0 and {limits.max_depth} (got {request.depth})")
    return served_pipeline(request, limits, default_pipeline, allowed), k, request.depth or None


def served_pipeline(request, limits: Limits, default_pipeline: str, allowed: Sequence[str]) -> str:
    """The canonical name of the served pipeline ``request`` asks for (``default_pipeline`` when it names none);
    Failure(INVALID_ARGUMENT) for a name too long, not valid or not served."""
    spec = request.pipeline.strip() or default_pipeline
    if len(spec) > limits.max_pipeline_chars:
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                      f"pipeline name is longer than {limits.max_pipeline_chars} characters ({len(spec)})")
    try:
        spec = canonical(spec)
    except InputError as e:
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
    if spec not in allowed:
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                      f"pipeline {short(spec)} is not served here; served: {', '.join(allowed)}")
    return spec


def check_min_relevance(request, spec: str, calibrated: Sequence[str]) -> float | None:
    """The request's ``min_relevance`` (None when not set); Failure(INVALID_ARGUMENT) for a value outside 0..1 or a
    pipeline ``spec`` that is not among the ``calibrated`` ones (it has no relevance to cut at)."""
    if not request.HasField("min_relevance"):
        return None
    value = request.min_relevance
    if not 0.0 <= value <= 1.0:
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT, f"min_relevance is a probability, 0 to 1 (got {value:g})")
    if spec not in calibrated:
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                      f"pipeline {short(spec)} is not calibrated on this server, so its hits have no relevance for "
                      f"min_relevance to cut at; calibrated: {', '.join(calibrated) or 'none'} "
                      "(`weir tune calibration` calibrates a pipeline over an index)")
    return float(value)


def check_query(text: str, limits: Limits) -> str:
    """``text`` stripped; Failure(INVALID_ARGUMENT) when it is empty, too long or of too many distinct words."""
    from weir.indexer.weighting.terms import words

    text = text.strip()
    if not text:
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT, "query is empty")
    if len(text) > limits.max_query_chars:
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                      f"query is longer than {limits.max_query_chars} characters ({len(text)})")
    terms = len({w.lower() for w in words(text)})
    if terms > limits.max_query_terms:
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                      f"query has {terms} distinct words; at most {limits.max_query_terms}")
    return text


def check_batch(n: int, limits: Limits) -> None:
    """Failure(INVALID_ARGUMENT) unless a batch of ``n`` queries is within the limit."""
    if not 1 <= n <= limits.max_batch_queries:
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT,
                      f"a batch holds 1 to {limits.max_batch_queries} queries (got {n})")
