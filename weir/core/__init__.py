"""The ground floor every other part of weir stands on: the shared types (documents, queries, hits, runs), topics and
qrels files, the JVM bootstrap, where models come from and where they run, and provenance records."""
