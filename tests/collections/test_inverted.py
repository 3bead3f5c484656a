"""The in-process first stages rank exactly as Lucene does: every SciFact test query, every rank, every score bit.

Lucene itself (``weir.ranker.retrievers.lucene``: the query Anserini builds, searched by Lucene with weir's tie-break) is
the reference. BM25 runs over the BM25 index that ``weir index build`` writes (two segments, so the postings of both
are merged). The learned stages are checked on the index formats they search (``-pretokenized`` for DeepCT, BM25
with k1=10, b=0.9; ``-impact -pretokenized`` for DeepImpact, sums of impacts) with SciFact's own terms and
frequencies or impacts drawn from a fixed hash of (document, term) over 1..300, so that scores spread and tie the
way learned ones do; the encoder that makes real weights is not what is under test, and takes minutes here.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from weir.indexer.index_dir import Index
from weir.indexer.lucene import index_pretokenized
from weir.indexer.postings import export
from weir.indexer.weighting.terms import terms as text_terms
from weir.ranker.retrievers.bm25 import BM25
from weir.ranker.retrievers.inverted import BM25Scores, ImpactScores, InvertedIndex
from weir.ranker.retrievers.learned_sparse import deepct_query, impact_query
from weir.ranker.retrievers.lucene import LuceneBM25Searcher, LuceneTermSearcher, bm25_similarity
from tests.conftest import collection
from weir.core import jvm
from weir.core.trec import read_topics

pytestmark = pytest.mark.data  # every test here reads ../shared/collections

K = 1000


def _first_difference(expected, got) -> str:
    for rank, (a, b) in enumerate(zip(expected, got), start=1):
        if a != b:
            return f"rank {rank}: Lucene {a}, weir {b}"
    return f"lengths: Lucene {len(expected)}, weir {len(got)}"


def _both(engine, weights) -> list[list[tuple[str, float]]]:
    """The engine's answer by the pruned search, then by the exhaustive scorer."""
    return [list(zip(engine.docids_of(docs), scores.tolist()))
            for docs, scores in (engine.top(weights, K, exhaustive=e) for e in (False, True))]


def _assert_same(reference, engine, queries) -> None:
    """Both scorers of the engine answer every query as Lucene does."""
    different = {}
    for qid, query in queries:
        expected = reference.search(query, K)
        for got in _both(engine, query):
            if expected != got:
                different[qid] = _first_difference(expected, got)
    assert not different, f"{len(different)}/{len(queries)} queries rank differently: {dict(list(different.items())[:3])}"


def test_bm25_ranks_every_scifact_query_as_lucene_does(index_factory):
    coll = collection("beir-scifact")
    index = Index(index_factory("beir-scifact"))
    manifest_entry = index.manifest["components"]["bm25"]["postings_arrays"]
    assert manifest_entry["postings"] > 500_000 and (index.component_path("bm25") / "postings" / "meta.json").is_file()
    bm25 = BM25(index)
    reference = LuceneBM25Searcher(index.component_path("bm25"))
    topics = read_topics(coll / "queries.tsv")
    weights = bm25.weights([q.text for q in topics])
    different = {}
    for q, w in zip(topics, weights):
        expected = reference.search(q.text, K)
        for got in _both(bm25.engine, w):
            if expected != got:
                different[q.id] = _first_difference(expected, got)
    assert not different, f"{len(different)}/{len(topics)} queries rank differently: {dict(list(different.items())[:3])}"
    run = bm25.retrieve(topics[:5], 10)
    assert [(h.doc_id, h.score) for h in run[topics[0].id]] == reference.search(topics[0].text, 10)
    # the LTR reranker's candidate BM25 feature: Lucene's score of each candidate, 0 for one without a query term
    from weir.ranker.rerankers.ltr_features import LuceneStats

    stats = LuceneStats(index)
    for q in topics[:20]:
        hits = reference.search(q.text, 100)
        unmatched = next(d for d in bm25.engine.docids if d not in dict(reference.search(q.text, 6000)))
        scores = stats.bm25(q.text, [d for d, _ in hits] + [unmatched])
        assert [scores[d] for d, _ in hits] == [s for _, s in hits] and scores[unmatched] == 0.0


def _hashed(doc_id: str, term: str) -> int:
    return 1 + int.from_bytes(hashlib.blake2b(f"{doc_id}\0{term}".encode(), digest_size=4).digest(), "big") % 300


@pytest.fixture(scope="module")
def pretokenized_scifact(tmp_path_factory):
    """SciFact's terms written in both learned index formats: {"deepct": path, "deepimpact": path}."""
    coll = collection("beir-scifact")
    docs = []
    with open(coll / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            docs.append((d["id"], f"{d.get('title', '')} {d['text']}"))

    def contents():
        for doc_id, text in docs:
            terms = dict.fromkeys(text_terms(text))
            yield doc_id, " ".join(" ".join([t] * _hashed(doc_id, t)) for t in terms)

    out = {}
    for name, args in (("deepct", []), ("deepimpact", ["-impact"])):
        path = tmp_path_factory.mktemp("pretokenized") / name
        index_pretokenized(path, contents(), args, 2)
        out[name] = path
    return out


def test_deepct_format_ranks_every_scifact_query_as_lucene_does(pretokenized_scifact):
    path = pretokenized_scifact["deepct"]
    engine = InvertedIndex(BM25Scores(export(path, progress=False), 10.0, 0.9))
    reference = LuceneTermSearcher(path, bm25_similarity(10.0, 0.9))
    topics = read_topics(collection("beir-scifact") / "queries.tsv")
    queries = [(q.id, deepct_query(q.text)) for q in topics]
    assert any(max(w.values()) > 1 for _, w in queries if w)  # boosted terms (a term twice in a query) are covered
    _assert_same(reference, engine, queries)


def test_impact_format_ranks_every_scifact_query_as_lucene_does(pretokenized_scifact):
    path = pretokenized_scifact["deepimpact"]
    postings = export(path, progress=False)
    assert postings.freqs.max() == 300 and postings.freqs.min() == 1
    engine = InvertedIndex(ImpactScores(postings))
    reference = LuceneTermSearcher(path, jvm.autoclass("io.anserini.search.similarity.ImpactSimilarity")())
    topics = read_topics(collection("beir-scifact") / "queries.tsv")
    _assert_same(reference, engine, [(q.id, impact_query(q.text)) for q in topics])


def test_batched_query_analysis_gives_each_text_its_own_terms():
    """Queries analyzed in one Java call (joined by a separator word) get exactly the terms each gets alone,
    on every topic of three collections, and a text holding the separator word itself falls back safely."""
    from weir.ranker.retrievers.lucene import EnglishAnalyzer

    analyzer = EnglishAnalyzer()
    for name in ("beir-scifact", "beir-arguana", "msmarco-passage-trec-dl-pool"):
        texts = [q.text for q in read_topics(collection(name) / "queries.tsv")]
        assert analyzer.analyze_many(texts) == [analyzer.analyze(t) for t in texts]
    tricky = ["", "the of and", f"a {EnglishAnalyzer.SEPARATOR} b", "1,000 [brackets], O'Neil's cats"]
    assert analyzer.analyze_many(tricky) == [analyzer.analyze(t) for t in tricky]
    as_array = jvm.autoclass("io.anserini.analysis.AnalyzerUtils").analyze
    for text in tricky[1:] + ["Ünïcödé naïve café, 3.5 mg/kg (p<0.05)", "x" * 300]:
        assert analyzer.analyze(text) == list(as_array(analyzer.analyzer, text).toArray())


def test_words_analyzed_together_give_the_terms_each_gives_alone():
    """A text's new words analyzed in one call (joined by a mark word) give each word's terms as analyzing it alone
    does, for the first 300 queries of every shared collection and SciFact's first 200 passages."""
    from weir.core.trec import read_topics
    from weir.indexer.weighting import terms as word_analysis

    texts = [q.text for name in ("beir-scifact", "beir-arguana", "msmarco-passage-trec-dl-pool", "cacm", "cranfield",
                                 "adi") for q in read_topics(collection(name) / "queries.tsv")[:300]]
    with open(collection("beir-scifact") / "corpus.jsonl", encoding="utf-8") as f:
        texts += [json.loads(line)["text"] for _, line in zip(range(200), f)]
    texts.append("the weirwordbreak and WeirWordBreaks words go word by word")
    word_analysis._cache.clear()  # noqa: SLF001 (every word new: analyzed together)
    together = [word_analysis.word_terms(t) for t in texts]
    alone = {w: tuple(word_analysis._analyzer()(w)) for t in texts for w in word_analysis.words(t)}  # noqa: SLF001
    assert alone["weirwordbreak"] == (word_analysis.MARK,)
    for text, (ws, pairs) in zip(texts, together):
        assert pairs == [(i, t) for i, w in enumerate(ws) for t in alone[w]], text
