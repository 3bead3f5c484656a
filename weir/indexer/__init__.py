"""Offline indexing: collections in, an index directory out."""
