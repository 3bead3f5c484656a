"""What every export of :mod:`weir.core.inference` is checked on against fp32 torch: a padded batch of texts of 3 to
250 words, single and paired (:func:`check_batch`), and the figures that judge it (:func:`compare`). Pure numpy over
a tokenizer's output, so that the checking and the backends stay two concepts."""

from __future__ import annotations

import numpy as np

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
CHECK_TEXT = (
    "Passage retrieval ranks the passages of a collection by how well they answer a query. A first stage scores every "
    "passage cheaply with an inverted index, and a second stage rereads the best few hundred with a transformer that "
    "sees query and passage together. Learned term weights move part of that reading to index time: each term of a "
    "passage gets a weight from its context, so the inverted index itself knows that a word is central to one passage "
    "and incidental in another. Static pruning leaves out passages that no query is likely to need, judged by a "
    "quality estimator; a smaller index is faster to search and cheaper to keep. Dense retrieval encodes passages and "
    "queries into vectors whose inner product approximates relevance, and a hybrid fuses the two rankings. Each of "
    "these steps is checked on test collections with relevance judgments, such as SciFact, ArguAna and the TREC deep "
    "learning track, and an index is only as good as the weakest of its components on data it never saw in training. "
    "The clinical trial enrolled 1,204 patients (aged 18-65) across 14 sites; p < 0.001 for the primary endpoint.")
CHECK_WORDS = (3, 12, 40, 120, 250)


def check_batch(tokenizer) -> tuple[dict[str, np.ndarray], list[int]]:
    """The padded, mixed-length batch an export is checked on: the check text cut to 3 to 250 words, single, and two
    (query, passage) pairs; with each row's real length."""
    words = CHECK_TEXT.split()
    singles = [" ".join(words[:n]) for n in CHECK_WORDS]
    queries, passages = ["what does a quality estimator judge", "dense retrieval"], [singles[2], singles[4]]
    a = tokenizer(singles, truncation=True, max_length=256)
    b = tokenizer(queries, passages, truncation="only_second", max_length=256)
    rows = [{k: enc[k][i] for k in enc} for enc in (a, b) for i in range(len(enc["input_ids"]))]
    width = max(len(r["input_ids"]) for r in rows)
    pad = tokenizer.pad_token_id or 0
    batch = {k: np.zeros((len(rows), width), dtype=np.int64) for k in INPUTS}
    batch["input_ids"][:] = pad
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        batch["input_ids"][i, :n] = r["input_ids"]
        batch["attention_mask"][i, :n] = 1
        if "token_type_ids" in r:
            batch["token_type_ids"][i, :n] = r["token_type_ids"]
    return batch, [len(r["input_ids"]) for r in rows]


def compare(reference: dict[str, np.ndarray], other: dict[str, np.ndarray], mask: np.ndarray) -> dict:
    """Largest absolute difference of the outputs over real positions, and the smallest cosine of the rows' mean-pooled
    hidden states."""
    m = mask[..., None].astype(np.float32)
    a, b = reference["last_hidden_state"] * m, other["last_hidden_state"] * m
    pa, pb = a.sum(1) / m.sum(1), b.sum(1) / m.sum(1)
    cos = (pa * pb).sum(1) / (np.linalg.norm(pa, axis=1) * np.linalg.norm(pb, axis=1))
    out = {"max_abs_diff": float(np.abs(a - b).max()), "min_cosine": float(cos.min())}
    if "attentions" in reference:
        keep = (mask[:, None, :, None] * mask[:, None, None, :]).astype(bool)
        diff = np.abs(reference["attentions"] - other["attentions"])
        out["attentions_max_abs_diff"] = float(np.where(keep, diff, 0).max())
    return out
