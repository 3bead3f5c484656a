"""weir: retrieval and reranking with learned term weighting."""

__version__ = "0.1.0"
