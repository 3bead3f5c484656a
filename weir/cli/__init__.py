"""The `weir` command line: index builds, searches, runs, evaluations, training and the gRPC server, one module per
command group. Every subcommand reports bad input (a missing file, a malformed line, an unknown pipeline) as one
clear error line and exit status 2, never a traceback."""

from __future__ import annotations

import argparse
import os
import sys

from weir.cli import evaluate, explain, index, quality, search, serve, train, tune
from weir.core.types import InputError

GROUPS = (index, search, explain, evaluate, serve, tune, train, quality)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="weir", description="Retrieval and reranking with learned term weighting: build indexes, search, "
        "write TREC runs, evaluate them, train models, and serve pipelines over gRPC.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        argv = train.with_model_from_recipe(argv)  # `weir train --recipe NAME` names no MODEL: the recipe does
    except InputError as e:
        print(f"weir: error: {e}", file=sys.stderr)
        return 2
    p = parser()
    args, unknown = p.parse_known_args(argv)
    if unknown:  # a retired flag gets the --set that replaces it; anything else argparse's own message
        hint = train.retired_setting_hint(argv, unknown)
        if hint:
            print(f"weir: error: {hint}", file=sys.stderr)
            return 2
        p.parse_args(argv)
    args.argv = argv  # as given, for records of what produced a result
    if getattr(args, "backend", None):  # every model the command loads, in this process and the ones it starts
        os.environ["WEIR_BACKEND"] = args.backend
    try:
        return args.func(args)
    except InputError as e:
        print(f"weir: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("weir: interrupted", file=sys.stderr)
        return 130
