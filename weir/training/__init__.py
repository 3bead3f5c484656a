"""Everything that fits a model or tunes a setting: LightGBM LTR, the attention rerankers (late and joint
interaction, the cross-encoder baseline), DeepCT / DeepImpact term weighting heads, hybrid fusion settings, and what
they share (:mod:`.common`: training sets, query folds, cross-validation). Training imports the inference code it
fits; nothing below it (retrievers, rerankers, the registry, evaluation) imports training."""
