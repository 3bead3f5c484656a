"""Second-stage rerankers, one module per backend (``ltr``, ``attention``, ``crossencoder``), and what they share: the
transformer backbone and its model directories (:mod:`.backbone`), the late-interaction relevance layer
(:mod:`.relevance_attention`) and the learning-to-rank features (:mod:`.ltr_features`). Every reranker puts its scores
on the top ``depth`` candidates through :func:`weir.ranker.stage.apply_scores`, which never drops or invents one."""
