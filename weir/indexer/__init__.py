"""Offline indexing: a collection in, an index directory out (:mod:`.build`, :mod:`.index_dir`). Its components: the
Lucene BM25 index and its postings as arrays (:mod:`.lucene`, :mod:`.postings`), learned term weights
(:mod:`.weighting`: DeepCT, DeepImpact), the dense component (:mod:`.encoder`, :mod:`.dense`, :mod:`.dense_build`);
passage quality for static pruning (:mod:`.quality`); index shards (:mod:`.shards`) and the build on Ray
(:mod:`.distributed`, block by block). Training the models this floor runs is :mod:`weir.training`."""
