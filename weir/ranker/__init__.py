"""Ranking at query time, one floor above the index: stages (:mod:`.stage`: a first stage or a reranker, composed with
``>>`` into a pipeline), their typed options (:mod:`.options`), the first stages (:mod:`.retrievers`), the rerankers
(:mod:`.rerankers`, one module per backend) and the registry that turns a pipeline's name into stages over an opened
index (:mod:`.registry`). Nothing here trains or evaluates: training (:mod:`weir.training`) and evaluation
(:mod:`weir.evaluation`) sit above it."""
