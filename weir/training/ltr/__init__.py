"""`weir train ltr`: LightGBM lambdarank over :mod:`weir.ranker.rerankers.ltr_features`, the number of rounds chosen by
inner cross-validation (or early stopping on held-out queries), optional k-fold cross-validation over queries, and a
model card.

Training data are one or more sets of (index, topics, qrels, candidates): candidates come from a TREC run
(``candidates``) or from a first stage run over the index (``first_stage``, default ``hybrid``), top ``depth``
each. Labels are the qrels grades (unjudged = 0). Queries with no relevant candidate carry no ranking signal and are
left out of training and validation (never out of a cross-validated run, which scores every query).

Cross-validation (``folds``): the queries of the first set are split into ``folds`` folds (seeded shuffle); each fold
is scored by a model trained on the other folds (plus any further sets, which never contain the first set's
queries); the scored folds are concatenated into one run. The saved model is then trained on every query.

The modules: :mod:`.examples` (a training set's candidates, features and labels), :mod:`.boosting` (one lambdarank
fit, LightGBM's nDCG@10), :mod:`.config` (the settings, the members' seeds, the LightGBM parameters they make),
:mod:`.rounds` (the number of rounds by inner cross-validation) and :mod:`.trainer` (a fit of the members on some
queries, their scores, `train`: cross-validation, the final fit, the model and its card).
"""

from weir.training.ltr.config import TrainConfig, init_column
from weir.training.ltr.examples import Examples, load_examples
from weir.training.ltr.trainer import fit_on, rounds_note, score_boosters, train

# the command's (TrainConfig, train, rounds_note) and what research scripts build on: a set's examples, the members
# fitted on some queries, their scores
__all__ = ["Examples", "TrainConfig", "fit_on", "init_column", "load_examples", "rounds_note", "score_boosters", "train"]
