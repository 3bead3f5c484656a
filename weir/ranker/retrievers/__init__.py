"""First stages over an opened index: BM25 and the learned sparse indexes through Lucene (:mod:`.lucene`), dense
retrieval through faiss, and the fusion of several first stages (:mod:`.hybrid`)."""
