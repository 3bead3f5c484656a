"""``duplicates``: near-duplicate detection as a pruning signal. A passage that repeats an earlier one (in corpus
order) adds nothing an index needs: its score is ``1 - J``, where ``J`` is its largest Jaccard similarity of word
shingles with any earlier passage (0 for an exact copy of the normalized text, 1 when nothing earlier is near it).

Exact copies are found by hashing the normalized text (lowercased words); near copies with MinHash signatures and
locality-sensitive hashing (datasketch: ``MinHash`` of word ``shingle``-grams, ``MinHashLSH`` at ``threshold``),
whose candidates are then scored by their MinHash Jaccard estimate. Seeds are fixed, so the scores are deterministic
for a given corpus order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from tqdm import tqdm

from weir.indexer.quality.base import QualityEstimator
from weir.indexer.weighting.terms import words
from weir.core.types import Document


class DuplicateQuality(QualityEstimator):
    name = "duplicates"
    per_document = False  # a passage is scored against every earlier one

    def __init__(self, shingle: int = 3, num_perm: int = 128, threshold: float = 0.7, seed: int = 1):
        self.shingle, self.num_perm, self.threshold, self.seed = shingle, num_perm, threshold, seed

    def describe(self) -> dict:
        return {"name": self.name, "shingle_words": self.shingle, "num_perm": self.num_perm,
                "lsh_threshold": self.threshold, "seed": self.seed, "order": "corpus order: the first copy keeps 1"}

    def _shingles(self, ws: list[str]) -> list[bytes]:
        n = self.shingle
        if len(ws) <= n:
            return [" ".join(ws).encode()]
        return [" ".join(ws[i:i + n]).encode() for i in range(len(ws) - n + 1)]

    def score(self, documents: Sequence[Document], *, progress: bool = False) -> np.ndarray:
        from datasketch import MinHash, MinHashLSH

        lsh = MinHashLSH(threshold=self.threshold, num_perm=self.num_perm)
        first = MinHash(num_perm=self.num_perm, seed=self.seed)
        permutations, scheme = first.permutations, first.scheme  # drawn once, not per document
        seen: set[bytes] = set()
        signatures: dict[int, MinHash] = {}
        scores = np.ones(len(documents), dtype=np.float64)
        for i, doc in enumerate(tqdm(documents, desc="near duplicates", unit="doc", disable=not progress,
                                     mininterval=1.0)):
            ws = [w.lower() for w in words(doc.contents)]
            exact = hashlib.blake2b(" ".join(ws).encode(), digest_size=16).digest()
            if exact in seen:
                scores[i] = 0.0
                continue
            seen.add(exact)
            m = MinHash(num_perm=self.num_perm, seed=self.seed, permutations=permutations, scheme=scheme)
            m.update_batch(self._shingles(ws))
            near = lsh.query(m)
            if near:
                scores[i] = 1.0 - max(m.jaccard(signatures[j]) for j in near)
            lsh.insert(i, m)
            signatures[i] = m
        return scores
