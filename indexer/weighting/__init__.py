"""Learned term weighting: DeepCT and DeepImpact heads on a transformer encoder, their training and index builders.

- :mod:`indexer.weighting.terms`: the one word-level tokenization (split, lowercase, stopwords, Porter) shared by
  documents and queries;
- :mod:`indexer.weighting.model`: the encoder + head (``deepct`` or ``deepimpact``), saved with a model card;
- :mod:`indexer.weighting.train`: ``weir train deepct|deepimpact`` on a frozen backbone's cached term vectors;
- :mod:`indexer.weighting.build`: the ``deepct`` (BM25 pseudo-documents) and ``deepimpact`` (quantized impact
  vectors) Lucene components of ``weir index build``.
"""
