"""The pipeline options every searching command shares (``--pipeline``, BM25, dense and hybrid, rerankers), turned
into typed stage options (:class:`weir.ranker.options.PipelineOptions`) in one place."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from weir.ranker.options import PipelineOptions
from weir.core.types import InputError

# argparse destination -> pipeline option key (weir.ranker.options.FLAT_KEYS)
OPTION_KEYS = {"k1": "k1", "b": "b", "fusion": "fusion", "fusion_weights": "fusion_weights",
         "depth_per_stage": "depth_per_stage", "rrf_k": "rrf_k", "hybrid_stages": "hybrid_stages",
         "dense_model": "dense_model", "ef_search": "ef_search", "nprobe": "nprobe", "rerank_depth": "depth",
         "ltr_model": "ltr_model", "attention_model": "attention_model", "crossencoder_model": "crossencoder_model",
         "ltr_risk": "ltr_risk", "device": "device", "batch_size": "batch_size"}


def add_backend_option(p) -> None:
    """``--backend``: the inference backend of every transformer the command runs (:mod:`weir.core.inference`)."""
    from weir.core.inference import BACKENDS

    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="inference backend of the transformers (dense encoder, term weighting, quality estimator, "
                   "rerankers; training and the quality reader always run fp32): openvino-bf16 (OpenVINO in bfloat16, "
                   "one input per inference; the CPU default where the CPU has native bf16), onnx-int8 (int8 weights, "
                   "one input per forward; the CPU default elsewhere), onnx (ONNX Runtime fp32, exported and checked "
                   "against torch on first use), torch (fp32; fp16 on a GPU, the GPU default). The two inexact "
                   "backends give vectors close to fp32 but not equal: an index built with one is searched with it "
                   "only. Default: $WEIR_BACKEND, else as said; an index built in fp32 is queried in fp32. The "
                   "manifest records what built each component")


def add_pipeline_options(p: argparse.ArgumentParser, *, depth: bool = True, pipeline: bool = True) -> None:
    """The options of :func:`pipeline_options`; ``depth=False`` where the command has a ``--depth`` of its own,
    ``pipeline=False`` where it takes no ``--pipeline``."""
    if pipeline:
        p.add_argument("--pipeline", default="bm25",
                       help="first stage and rerankers joined by '>>' (default: bm25; with `weir run --candidates`, "
                       "none: the candidates pass through). Known stages: see `weir pipelines`")
    p.add_argument("--k1", type=float, default=0.9, help="BM25 k1 (default 0.9)")
    p.add_argument("--b", type=float, default=0.4, help="BM25 b (default 0.4)")
    h = p.add_argument_group("dense and hybrid first stages")
    h.add_argument("--fusion", choices=("rrf", "minmax", "zscore", "linear"), default=None,
                   help="hybrid fusion: reciprocal rank fusion, or a weighted sum of min-max or z-score normalized "
                   "scores ('linear' = minmax) (default: as tuned by `weir tune fusion`, else zscore)")
    h.add_argument("--fusion-weights", "--fusion-weight", dest="fusion_weights", default=None,
                   help="hybrid and deepimpact+bm25 weights, one per stage: '0.3,0.7' or 'bm25=0.3,dense=0.7'; ';' "
                   "for ',' inside a pipeline's brackets: 'deepimpact+bm25[fusion_weights=0.3;0.7]' (default: tuned, "
                   "else equal)")
    h.add_argument("--depth-per-stage", type=int, default=None, help="hybrid: candidates per fused stage (default 1000)")
    h.add_argument("--rrf-k", type=int, default=None, help="hybrid: the RRF constant k (default: tuned, else 60)")
    h.add_argument("--hybrid-stages", default=None, help="hybrid: first stages to fuse (default: bm25,dense)")
    h.add_argument("--dense-model", default=None,
                   help="dense: query encoder (default: the model recorded in the index manifest)")
    h.add_argument("--ef-search", type=int, default=None, help="dense over HNSW: efSearch (default: as built)")
    h.add_argument("--nprobe", type=int, default=None, help="dense over IVF-PQ: lists probed (default: as built)")
    g = p.add_argument_group("rerankers (ltr, attention, crossencoder)")
    if depth:
        g.add_argument("--depth", dest="rerank_depth", type=int, default=None,
                       help="candidates each reranker rescores (default: the reranker's, 100); -k is how many "
                       "are returned")
    g.add_argument("--ltr-model", default=None, help="ltr: LightGBM model directory, or a shipped model's name (ltr, "
                   "ltr-cosine, ltr-members: five seeds, ranking by risk) (default: the shipped model of the "
                   "stages before it: models/ltr-cosine after a lexical first stage or --candidates over an index "
                   "with dense vectors, else models/ltr)")
    g.add_argument("--ltr-risk", type=float, default=None, metavar="LAMBDA",
                   help="ltr, with a model of several members: rank by their mean score minus LAMBDA times their "
                   "spread (standard deviation), so that a candidate the trees lift only by luck moves less "
                   "(default: the model's own, chosen on its training queries; 0: the mean)")
    g.add_argument("--attention-model", default=None, help="attention: trained model directory (default: "
                   "models/attention, else the one `weir train attention` wrote to $WEIR_MODELS)")
    g.add_argument("--crossencoder-model", default=None, help="crossencoder: trained model directory")
    g.add_argument("--device", default=None,
                   help="device of the dense query encoder and the rerankers (default: cuda when available, else cpu)")
    g.add_argument("--rerank-batch-size", dest="batch_size", type=int, default=None,
                   help="pairs per forward pass (default: 64 on CPU, 256 on GPU)")
    add_backend_option(g)


def option_values(args: argparse.Namespace) -> dict:
    """The pipeline options given on the command line, as weir.ranker.options keys (those not given left out)."""
    return {key: getattr(args, dest) for dest, key in OPTION_KEYS.items() if getattr(args, dest, None) is not None}


def pipeline_options(args: argparse.Namespace) -> PipelineOptions:
    """The typed stage options of the parsed command line (raises InputError for a bad value)."""
    return PipelineOptions.from_mapping(option_values(args))


def key_values(items: list[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` strings of a repeatable flag -> {key: value}, values read as JSON where they are (numbers,
    true/false), else kept as text."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{flag} {item!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def fractions(text: str, flag: str = "--fractions") -> list[float]:
    """``0.1,0.25`` -> [0.1, 0.25]."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected numbers such as 0.1,0.25,0.4,0.5") from None
    if not all(math.isfinite(v) for v in values):
        raise InputError(f"{flag} {text!r}: expected finite numbers")
    return [v for v in values if v != 0.0]


class Deprecated(argparse.Action):
    """An old spelling of an option, kept one release: it works as the new one and says so on stderr once a call.
    ``parser.add_argument("--old", action=Deprecated, new="--new", dest="new", ...)``."""

    def __init__(self, option_strings, dest, *, new: str, nargs=None, **kwargs):
        self.new = new
        kwargs.setdefault("help", argparse.SUPPRESS)
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"weir: warning: {option_string} is deprecated and will be removed in the next release; use "
              f"{self.new}", file=sys.stderr)
        setattr(namespace, self.dest, True if self.nargs == 0 else values)


def add_deprecated(p: argparse.ArgumentParser, old: str, new: str, dest: str, *, flag: bool = False, **kwargs) -> None:
    """``old`` as a deprecated spelling of ``new`` (stored in ``dest``; ``flag`` for an option without a value)."""
    p.add_argument(old, action=Deprecated, new=new, dest=dest, nargs=0 if flag else None, **kwargs)


def add_min_rel(p: argparse.ArgumentParser, what: str = "binary measures (AP, RR, R)", default: int | None = 1) -> None:
    """``--min-rel``: the lowest grade counted relevant (2 for TREC DL's graded judgments), one spelling everywhere;
    ``--binary-min-rel`` is its deprecated spelling."""
    p.add_argument("--min-rel", dest="min_rel", type=int, default=default,
                   help=f"the lowest grade counted relevant by {what} (default 1; 2 for TREC DL)")
    add_deprecated(p, "--binary-min-rel", "--min-rel", "min_rel", type=int)


def add_ray_address(p, what: str) -> None:
    """``--ray [ADDRESS]``, the same flag on `index build` and `serve`: where ``what`` runs on Ray."""
    p.add_argument("--ray", metavar="ADDRESS", nargs="?", const="local", default=None,
                   help=f"run {what} on Ray: 'local' (the default when --ray is given bare) starts a Ray instance on "
                   "this machine and stops it after; 'auto' joins the running cluster (RAY_ADDRESS or `ray start`); "
                   "or a cluster address such as ray://HOST:10001")
