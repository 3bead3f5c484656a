"""Evaluation: measures (ir-measures), paired significance tests, TREC-style experiments over many pipelines, and
their reports (tables and plots)."""
