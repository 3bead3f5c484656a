"""Does a linear ranker beat the attention reranker on DL 2019 where LightGBM does not? A nested check, not a model.

The candidates are the DL pool's BM25 top-100 for the 43 DL 2019 topics. Each query's attention score
(``runs/late/cv1.trec``, the cross-validated attention run of research/notebook.md), MiniLM cosine and BM25 are
standardized within the query, as ``weir train ltr --init-from`` standardizes its feature. The score is
``z(attention) + a z(dense_cos) + b z(bm25)``, with a and b chosen on a 6 x 6 grid by the nDCG@10 of the training
folds. The folds are those of ``weir train ltr --folds 5`` (seed 13), and
each test fold is scored by its own choice. It prints every fold and the mean over queries, beside attention alone.

Usage: python research/dl_linear_cv.py    (needs indexes/msmarco-passage-trec-dl-pool with bm25 and dense)
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from weir.evaluation.measures import evaluate
from weir.ranker.rerankers.ltr import base_scores, query_groups
from weir.ranker.rerankers.ltr_features import FEATURES
from weir.ranker.stage import apply_scores
from weir.evaluation.folds import folds_of
from weir.training.common import TrainingSet
from weir.training.ltr import load_examples
from weir.core.trec import read_qrels
from weir.core.types import Run

D = ROOT.parent / "shared" / "collections" / "msmarco-passage-trec-dl-pool"
GRID = (0, 0.05, 0.1, 0.2, 0.3, 0.5)


def main() -> None:
    ds = TrainingSet(index=str(ROOT / "indexes" / "msmarco-passage-trec-dl-pool"), topics=str(D / "queries.tsv"),
                     qrels=str(D / "qrels.txt"), candidates=str(D / "runs" / "BM25_dl19.top100.trec"), depth=100,
                     stage_runs=f"attention:{ROOT / 'runs' / 'late' / 'cv1.trec'}")
    ex = load_examples(ds, log=lambda m: print(m, file=sys.stderr))
    qrels = read_qrels(ds.qrels)
    qids = np.asarray(ex.qids)
    groups = query_groups(ex.qids)
    z = {n: base_scores(ex.X, groups, FEATURES.index(n)) for n in ("attention", "dense_cos", "bm25")}  # as ltr does

    def ndcg(score: np.ndarray, keep: set[str]) -> float:
        queries = [q for q in ex.queries if q.id in keep]
        scores = {q.id: score[qids == q.id].tolist() for q in queries}  # rows in candidate order, as the run's hits
        run = apply_scores(queries, Run({q.id: ex.run[q.id][:ds.depth] for q in queries}), ds.depth, scores, "linear")
        return evaluate(run, {q: qrels[q] for q in keep if q in qrels}, ["nDCG@10"], min_rel=2)["nDCG@10"]

    def linear(a: float, b: float) -> np.ndarray:
        return z["attention"] + a * z["dense_cos"] + b * z["bm25"]

    every = set(ex.qids)
    rows = []
    for f, test in enumerate(folds_of(every, 5, 13)):
        _, _, a, b = max((ndcg(linear(a, b), every - test), -(a + b), a, b) for a, b in itertools.product(GRID, GRID))
        rows.append((ndcg(linear(a, b), test), ndcg(z["attention"], test), len(test)))
        print(f"fold {f + 1}: a {a}, b {b}: linear {rows[-1][0]:.4f}, attention {rows[-1][1]:.4f}")
    n = [r[2] for r in rows]
    print(f"mean over queries: linear {np.average([r[0] for r in rows], weights=n):.4f}, attention "
          f"{np.average([r[1] for r in rows], weights=n):.4f}")


if __name__ == "__main__":
    main()
