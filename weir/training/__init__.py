"""Everything that fits a model or tunes a setting, one floor above inference and evaluation: LightGBM LTR
(:mod:`.ltr`), the attention rerankers (:mod:`.attention`: late and joint interaction, the cross-encoder baseline),
DeepCT / DeepImpact term weighting heads (:mod:`.term_weighting`), passage-quality estimators (:mod:`.quality`), fusion
weights (:mod:`.fusion`), recipes (:mod:`.recipes`: the whole of what trains a shipped model) and what they share
(:mod:`.common`: the training-set type, members' seeds, cross-validation). Training imports the inference code it
fits and evaluation; nothing below it imports training."""
