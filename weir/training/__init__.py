"""Everything that fits a model or tunes a setting: LightGBM LTR (:mod:`.ltr`), the attention rerankers (late and
joint interaction, the cross-encoder baseline), DeepCT / DeepImpact term weighting heads (:mod:`.term_weighting`),
passage-quality estimators (:mod:`.quality`), hybrid fusion settings, and what they share (:mod:`.common`: the
training-set type, members' seeds, cross-validation). Training imports the inference code it fits and evaluation;
nothing below it (retrievers, rerankers, the registry, evaluation) imports training."""
