"""Evaluation: measures (ir-measures), paired significance tests, TREC-style experiments over many pipelines, and
their reports (tables and plots); seeded query folds (:mod:`.folds`, shared with training's cross-validation); the
static pruning sweep (:mod:`.pruning`: indexes pruned at several fractions, tested against the unpruned one)."""
