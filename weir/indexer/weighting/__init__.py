"""Learned term weighting at index time: DeepCT and DeepImpact heads on a transformer encoder, and their index builders.

- :mod:`weir.indexer.weighting.terms`: the one word-level tokenization (split, lowercase, stopwords, Porter) shared by
  documents and queries;
- :mod:`weir.indexer.weighting.model`: the encoder + head (``deepct`` or ``deepimpact``), read from and saved to a model
  directory with its card;
- :mod:`weir.indexer.weighting.cache`: the frozen backbone's term vectors of a corpus, computed once;
- :mod:`weir.indexer.weighting.build`: the ``deepct`` (BM25 pseudo-documents) and ``deepimpact`` (quantized impact
  vectors) Lucene components of ``weir index build``.

Training the heads (``weir train deepct|deepimpact``) is :mod:`weir.training.term_weighting`.
"""
