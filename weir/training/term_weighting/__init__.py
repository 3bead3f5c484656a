"""`weir train deepct|deepimpact`: train a head (:mod:`weir.indexer.weighting.model`) on a frozen backbone's cached term
vectors, from one or several training sources, or from pseudo-queries made from a collection itself.

The backbone runs once over each collection (:mod:`weir.indexer.weighting.cache`); training then only touches the head,
which takes minutes on a CPU.

Sources. ``--train COLLECTION:TOPICS:QRELS[:WEIGHT[:MIN_REL]]`` (repeatable; the old ``--collection --queries
--qrels`` is one such source) and ``--self-supervised COLLECTION`` (repeatable): pseudo-queries made from the
collection, deterministically (seeded): a passage's title asks for the passage without its title, and a held-out
sentence asks for the rest of the passage; a positive is then scored on the terms the rest has, with the rest's
frequencies and length, so the head learns what a query is *not* already saying. Each source's queries are split
(seeded) into a training part and a validation part. ``--draws`` says how a step draws its queries:

- ``queries`` (default): every training query equally likely, times its source's weight, so an epoch sees each query
  about once; the validation mean is over queries too (a source counts its validation queries times its weight);
  self-supervised sources are left out of it when a source is judged (their pseudo-queries validate at about 0.98
  from the untrained head on: nothing to choose an epoch by);
- ``sources``: every source equally likely, times its weight, whatever its size (the recipe of the heads shipped
  before it). An epoch then repeats a small source's queries many times (43 DL 2019 queries beside 3,000 of
  ArguAna: each about 20 times an epoch), and the head learns them by heart: its validation nDCG@10 on the
  sources' held-out queries fell from the first epoch where ``queries`` draws raised it (models/RESULTS.md).

The epoch kept is the one with the best validation nDCG@10 averaged over the sources, weighed as just said, or
with ``--validate-by sets`` each judged source by its weight alone, whatever its number of validation queries: a
head meant to carry over to collections it never saw is then kept for helping every collection, not for helping the
largest one (leaving ArguAna out, SciFact's 162 validation queries otherwise outweigh the other four sets' 71).

``--members N`` trains N heads that differ only in their seed (``--seed``, +1000, ...: the initialization and the
draws; one split, so the same validation queries), each keeping its own best epoch, and writes them as one head
(:mod:`weir.indexer.weighting.members`: a BM25-shaped head's factor is the geometric mean of theirs); the first member is
exactly the one-member head. The ``deepimpact+bm25`` weight is then chosen for the members together, and the card
records each member's seed, epoch, validation and own weight.

Heads (``--shape``, see :mod:`weir.indexer.weighting.model`): ``bm25`` (default) multiplies a BM25-shaped prior from the
collection being indexed by a learned factor in [1/2, 2]; ``free`` is the published recipe.

- DeepImpact: softmax cross-entropy over (query, positive, BM25 hard negatives); a document's score is the sum of
  its unique terms' weights that the query has.
- DeepCT, ``bm25`` shape: the same ranking loss over BM25 (k1 9, b 0.4) of the pseudo-document ``tf' = 10 tf factor``
  (its length the sum of ``tf'``), differentiable in the factor; ``free`` shape: masked MSE against query term recall
  (the share of the document's relevant training queries that contain the term; titles as pseudo-queries with
  ``--titles``).

Validation scores every document exactly as the index will (sum of impacts of matching terms; BM25 over
``round(100 w)`` for DeepCT), before quantization. For DeepImpact, the weight of ``deepimpact+bm25`` is chosen on the
validation parts (the mean nDCG@10 over sources of each grid point), never on a test split.

The modules: :mod:`.config` (the settings, the sources they name), :mod:`.data` (a source read: term vectors, priors,
training items and their BM25 negatives, pseudo-queries), :mod:`.validation` (every document scored as the index
will), :mod:`.loop` (the head, its optimizer, the epochs of both losses, the epoch kept, the ``deepimpact+bm25``
weight), :mod:`.members` (several heads written as one, shrunk by their disagreement) and :mod:`.trainer` (`train`:
the settings checked, the sources read, the members trained, the head and its card written).
"""

from weir.training.term_weighting.config import TrainConfig
from weir.training.term_weighting.trainer import train

__all__ = ["TrainConfig", "train"]
