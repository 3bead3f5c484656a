"""Which input the one backbone pass reads (issue 52, item 3): every shared collection indexed with the shipped deepct
and deepimpact heads twice, once over each passage's words (runs of letters and digits, the heads' training input)
and once over its own text (punctuation included, the input a separate dense encoder and the attention reranker read),
and ``deepct``, ``deepimpact`` and ``deepimpact+bm25`` compared by nDCG@10 per query (paired t-test).

The dense vector and the attention states need no such run: with the ``text`` input the pass's first window is what
a separate dense encoder reads (the same vector), and ``research/attention_states.py`` measures the states.

A head trained on the text input (``weir train --recipe deepct --set input=text --out DIR``) is compared with the shipped
one on words by ``--text-deepct DIR`` (the text indexes then hold bm25 and that deepct only, under ``text-NAME``).

Usage: python research/pass_input.py [--work DIR] [--collections beir-scifact,adi,...] [--text-deepct DIR]
Indexes are kept under ``$WEIR_CACHE/pass-input`` (built once), the table printed and written beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from research.transfer_common import COLLECTIONS, SOURCES  # noqa: E402

PIPELINES = ("deepct", "deepimpact", "deepimpact+bm25")
INPUTS = ("words", "text")


def per_query(index_dir: Path, collection: Path, pipeline: str, min_rel: int, remove_identical: bool) -> dict:
    import weir
    from weir.evaluation.measures import evaluate

    topics = weir.read_topics(collection / "queries.tsv")
    qrels = weir.read_qrels(collection / "qrels.txt")
    run = weir.pipeline(pipeline, weir.Index(index_dir)).search(topics, k=100).to_dict()
    if remove_identical:
        run = {q: {d: s for d, s in docs.items() if d != q} for q, docs in run.items()}
    return evaluate(run, qrels, ["nDCG@10"], min_rel=min_rel, per_query=True)[1]["nDCG@10"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path(os.environ.get("WEIR_CACHE", Path.home() / ".cache" / "weir"))
                   / "pass-input")
    p.add_argument("--collections", default=",".join(SOURCES))
    p.add_argument("--text-deepct", type=Path, default=None,
                   help="a deepct head trained on the text input: the text side reads it (deepct only)")
    args = p.parse_args()
    pipelines = ("deepct",) if args.text_deepct else PIPELINES
    import numpy as np

    import weir
    from weir.evaluation.significance import paired_test

    rows = []
    for name in args.collections.split(","):
        collection = COLLECTIONS / name
        min_rel, remove_identical = SOURCES[name][2], "--remove-identical" in SOURCES[name][3]
        scores = {}
        for input in INPUTS:
            index = args.work / name / input
            components, learned = ("bm25", "deepct", "deepimpact"), {"input": input}
            if input == "text" and args.text_deepct:
                index = args.work / name / f"text-{args.text_deepct.name}"
                components, learned = ("bm25", "deepct"), {"input": input, "deepct_model": str(args.text_deepct)}
            if not (index / "manifest.json").is_file():
                started = time.perf_counter()
                weir.build_index(collection, index, components=components, overwrite=True, skip_empty=True,
                                 learned=learned)
                print(f"{name} {input}: built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
            scores[input] = {pl: per_query(index, collection, pl, min_rel, remove_identical) for pl in pipelines}
        for pl in pipelines:
            a, b = scores["words"][pl], scores["text"][pl]
            ids = sorted(set(a) | set(b))
            x, y = [a.get(i, 0.0) for i in ids], [b.get(i, 0.0) for i in ids]
            _, pvalue = paired_test(y, x)
            rows.append((name, pl, float(np.mean(x)), float(np.mean(y)), pvalue, len(ids)))
            print(f"| {name} | {pl} | {rows[-1][2]:.4f} | {rows[-1][3]:.4f} | {rows[-1][3] - rows[-1][2]:+.4f} | "
                  f"{pvalue:.3f} | {len(ids)} |", flush=True)
    table = ["| collection | pipeline | words | text | text - words | p (paired t) | queries |", "|---|---|---:|---:|---:|---:|---:|"]
    table += [f"| {n} | {pl} | {x:.4f} | {y:.4f} | {y - x:+.4f} | {pv:.3f} | {q} |" for n, pl, x, y, pv, q in rows]
    for pl in pipelines:
        diffs = [y - x for _, p_, x, y, _, _ in rows if p_ == pl]
        table.append(f"| mean | {pl} | | | {np.mean(diffs):+.4f} | | |")
    print("\n".join(table))
    tag = f"-{args.text_deepct.name}" if args.text_deepct else ""
    (args.work / f"table{tag}.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    (args.work / f"rows{tag}.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
