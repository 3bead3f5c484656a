"""BM25's arithmetic, written once: Anserini's default parameters and the idf of Lucene's ``BM25Similarity``.

Every place that scores BM25 (the in-process search, the LTR features, the BM25 prior of the learned term weights and
their training) takes its idf from :func:`idf`; each passes the ``log`` of its own number type (numpy arrays, Python
floats, torch tensors), so that the value is computed in the same operations as before, bit for bit.
"""

from __future__ import annotations

import numpy as np

K1, B = 0.9, 0.4  # Anserini's defaults, and those of the published BEIR BM25 figures


def idf(n_docs, df, log=np.log):
    """Lucene's BM25 idf, ``log(1 + (N - df + 0.5) / (df + 0.5))``, of ``df`` (a number or an array) among ``n_docs``
    documents."""
    return log(1 + (n_docs - df + 0.5) / (df + 0.5))
