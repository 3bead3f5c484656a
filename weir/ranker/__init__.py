"""Online ranking: retrievers, rerankers, pipelines and the evaluation of runs."""
