"""Learned term weighting at index time: DeepCT and DeepImpact heads on a transformer encoder, and their index builders.

- :mod:`indexer.weighting.terms`: the one word-level tokenization (split, lowercase, stopwords, Porter) shared by
  documents and queries;
- :mod:`indexer.weighting.model`: the encoder + head (``deepct`` or ``deepimpact``), read from and saved to a model
  directory with its card;
- :mod:`indexer.weighting.cache`: the frozen backbone's term vectors of a corpus, computed once;
- :mod:`indexer.weighting.build`: the ``deepct`` (BM25 pseudo-documents) and ``deepimpact`` (quantized impact
  vectors) Lucene components of ``weir index build``.

Training the heads (``weir train deepct|deepimpact``) is :mod:`ranker.training.term_weighting`.
"""
