"""Learned term weighting at index time, on a tiny hand-made corpus: tokenization shared by documents and queries,
DeepCT pseudo-document frequencies, DeepImpact quantization and impact scores, checked against the formulas."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from weir.indexer.weighting.build import deepct_tf, impact_scale, pseudo_document, quantize
from weir.indexer.weighting.terms import terms, unique_terms, word_terms
from tests.conftest import WEIGHTING_DOCS, WEIGHTING_QUERIES, learned_index, weighting_collection


def test_formulas_by_hand():
    assert deepct_tf(np.array([0.004, 0.005, 0.123, 1.5, -0.2])).tolist() == [0, 0, 12, 150, -20]  # half to even; < 1 dropped later
    assert deepct_tf(np.array([0.0151])).tolist() == [2]
    assert impact_scale(2.0) == 128.0
    assert quantize(np.array([0.0, 0.001, 1.0, 2.0]), 128.0).tolist() == [0, 1, 128, 256]
    assert pseudo_document(["a", "b", "c"], np.array([2, 0, 3])) == "a a c c c"


def test_query_and_document_tokenization_agree():
    words, pairs = word_terms("The proteins of p53-dependent U.S. mice")
    assert words == ["The", "proteins", "of", "p53", "dependent", "U", "S", "mice"]
    assert [t for _, t in pairs] == ["protein", "p53", "depend", "u", "s", "mice"]  # "the", "of": stopwords
    doc = set(terms(WEIGHTING_DOCS[0]["title"] + " " + WEIGHTING_DOCS[0]["text"]))
    assert {"protein", "misfold", "aggreg"} <= doc and set(unique_terms(WEIGHTING_QUERIES[0][1])) <= doc
    assert unique_terms("Running RUNS running") == ["run"]
    assert unique_terms("") == [] and unique_terms("the of and") == []


def _postings(path) -> dict[str, dict[str, int]]:
    """docid -> {term: stored frequency} of a Lucene index, read term by term."""
    from jnius import autoclass

    from weir.indexer.lucene import open_reader

    reader = open_reader(path)
    try:
        ids = (path / "docids.txt").read_text(encoding="utf-8").splitlines()
        out: dict[str, dict[str, int]] = {d: {} for d in ids}
        te = autoclass("org.apache.lucene.index.MultiTerms").getTerms(reader, "contents").iterator()
        no_more = autoclass("org.apache.lucene.search.DocIdSetIterator").NO_MORE_DOCS
        while (ref := te.next()) is not None:
            term = ref.utf8ToString()
            pe = te.postings(None, 8)  # PostingsEnum.FREQS
            while (doc := pe.nextDoc()) != no_more:
                out[ids[doc]][term] = pe.freq()
        return out
    finally:
        reader.close()


def _expected(models, kind):
    from weir.indexer.weighting.model import TermWeighter

    m = TermWeighter(models[kind])
    return {d["id"]: dict(zip(*m.weights([(d["title"] + " " + d["text"]) if d["title"] else d["text"]])[0]))
            for d in WEIGHTING_DOCS}


def test_deepct_pseudo_documents_hold_round_100w(learned_tiny):
    _, models, index = learned_tiny
    weights = _expected(models, "deepct")
    postings = _postings(index / "deepct")
    for doc_id, w in weights.items():
        want = {t: int(round(v * 100)) for t, v in w.items() if round(v * 100) >= 1}
        assert postings[doc_id] == want
    manifest = json.loads((index / "manifest.json").read_text())
    card_sha = manifest["components"]["deepct"]["model"]["card_sha256"]
    import hashlib

    assert card_sha == hashlib.sha256((models["deepct"] / "card.json").read_bytes()).hexdigest()


def test_impact_index_and_scores_follow_the_formulas(learned_tiny):
    from weir.indexer.index_dir import Index
    from weir.ranker.retrievers.learned_sparse import ImpactRetriever
    from weir.core.types import Query

    _, models, index = learned_tiny
    impacts = _expected(models, "deepimpact")
    max_impact = max(max(w.values()) for w in impacts.values())
    manifest = json.loads((index / "manifest.json").read_text())
    q = manifest["components"]["deepimpact"]["parameters"]["quantization"]
    assert q["max_impact"] == pytest.approx(max_impact, rel=1e-6)
    assert q["scale"] == pytest.approx(256 / max_impact, rel=1e-6)
    quantized = {d: {t: math.ceil(v * q["scale"]) for t, v in w.items() if math.ceil(v * q["scale"]) >= 1}
                 for d, w in impacts.items()}
    assert _postings(index / "deepimpact") == quantized
    assert max(max(w.values()) for w in quantized.values()) == 256
    run = ImpactRetriever(Index(index))([Query(q, t) for q, t in WEIGHTING_QUERIES], k=10)
    for qid, text in WEIGHTING_QUERIES:
        qt = set(unique_terms(text))
        want = {d: sum(v for t, v in w.items() if t in qt) for d, w in quantized.items()}
        got = {h.doc_id: h.score for h in run[qid]}
        assert got == {d: float(s) for d, s in want.items() if s > 0}


@pytest.mark.parametrize("component", ["deepct", "deepimpact"])
def test_postings_written_from_the_weighted_stream_are_what_lucene_holds(learned_tiny, component):
    """The learned components' arrays, written from the stream Lucene indexed, equal what the export reads back from
    Lucene (terms, offsets, docs, freqs, norms, statistics), and the manifest says where they came from."""
    from weir.indexer.postings import export, open_postings

    _, _, index = learned_tiny
    stored, lucene = open_postings(index / component), export(index / component, progress=False)
    assert stored.terms == lucene.terms and list(stored.docids) == list(lucene.docids)
    for name in ("offsets", "docs", "freqs", "norms"):
        mine, theirs = getattr(stored, name), getattr(lucene, name)
        assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs), name
    assert (stored.max_doc, stored.doc_count, stored.sum_total_term_freq, stored.num_docs) == \
        (lucene.max_doc, lucene.doc_count, lucene.sum_total_term_freq, lucene.num_docs)
    entry = json.loads((index / "manifest.json").read_text())["components"][component]["postings_arrays"]
    assert entry["from"].startswith("the weighted term stream") and entry["postings"] == len(lucene.docs)


def test_streamed_postings_that_are_not_lucenes_are_refused(learned_tiny, tmp_path):
    """A stream that is not what Lucene indexed (a frequency changed) is refused by Lucene's statistics."""
    import shutil

    from weir.indexer.postings import export
    from weir.indexer.weighting.postings import StreamedPostings

    _, _, index = learned_tiny
    copy = tmp_path / "deepct"
    shutil.copytree(index / "deepct", copy)
    lucene = export(copy, progress=False)
    documents = []
    for d, doc in enumerate(lucene.docids):
        held = [t for t in range(len(lucene.terms)) if d in lucene.docs[lucene.offsets[t]:lucene.offsets[t + 1]]]
        freqs = [int(lucene.freqs[lucene.offsets[t]:lucene.offsets[t + 1]][
            list(lucene.docs[lucene.offsets[t]:lucene.offsets[t + 1]]).index(d)]) for t in held]
        documents.append((doc, [lucene.terms[t] for t in held], np.array(freqs)))
    def streamed(documents) -> StreamedPostings:
        stream = StreamedPostings()
        for document in documents:
            stream.add(*document)
        return stream

    assert streamed(documents).write(copy)["postings"] == len(lucene.docs)  # the stream itself: accepted
    documents[0][2][0] += 1
    with pytest.raises(RuntimeError, match="not Lucene's"):
        streamed(documents).write(copy)


def test_learned_pipelines_run(learned_tiny):
    from weir.indexer.index_dir import Index
    from weir.ranker import registry
    from weir.core.types import Query

    _, _, index = learned_tiny
    idx = Index(index)
    for name in ("deepct", "deepimpact", "deepimpact+bm25"):
        run = registry.build(name, idx)([Query("q3", "vitamin D bone")], k=3)
        assert run["q3"] and {h.doc_id for h in run["q3"]} <= {d["id"] for d in WEIGHTING_DOCS}
        assert name != "deepimpact+bm25" or run["q3"][0].doc_id == "d4"  # BM25's half ranks the vitamin D paper first


@pytest.fixture(scope="module")
def untrained_bm25_shaped(tmp_path_factory):
    """Both heads in the BM25 shape, untrained (their last layer at zero), and an index of the tiny corpus."""
    import torch

    from weir.indexer.weighting.model import make_head, save

    root = tmp_path_factory.mktemp("bm25-shaped")
    coll = weighting_collection(root)
    models = {}
    for kind in ("deepct", "deepimpact"):
        torch.manual_seed(1)
        models[kind] = save(root / kind, make_head(kind, 384, "bm25"),
                            {"kind": kind, "shape": "bm25", "base_model": "all-MiniLM-L6-v2", "max_length": 32})
    return learned_index(coll, models, root / "index")


def test_an_untrained_bm25_shaped_impact_head_ranks_as_its_bm25_baseline(untrained_bm25_shaped):
    """Impacts = BM25 weights (the collection's own idf and lengths, k1 0.9, b 0.4) quantized to 8 bits: the
    deepimpact ranking is the sum of those over the query's terms, each as often as the query has it (as BM25 scores
    it), computed here from the formula."""
    from weir.indexer.index_dir import Index
    from weir.indexer.weighting.model import TermStatistics
    from weir.ranker.retrievers.learned_sparse import ImpactRetriever
    from weir.core.types import Query

    texts = {d["id"]: f"{d['title']} {d['text']}" if d["title"] else d["text"] for d in WEIGHTING_DOCS}
    stats = TermStatistics(texts.values())
    doc_ids = list(texts)
    bm25 = {}
    for i, d in enumerate(doc_ids):
        doc_terms = list(dict.fromkeys(terms(texts[d])))
        n, df = stats.n_docs, np.array([stats.df[t] for t in doc_terms], dtype=float)
        tf = np.array([stats.counts[i][t] for t in doc_terms], dtype=float)
        dl, avgdl = sum(stats.counts[i].values()), sum(sum(c.values()) for c in stats.counts) / n
        w = np.log(1 + (n - df + 0.5) / (df + 0.5)) * tf * 1.9 / (tf + 0.9 * (0.6 + 0.4 * dl / avgdl))
        bm25[d] = dict(zip(doc_terms, w.astype(np.float32)))  # the index holds float32 weights
    scale = 256 / float(max(max(w.values()) for w in bm25.values()))
    quantized = {d: {t: math.ceil(float(v) * scale) for t, v in w.items()} for d, w in bm25.items()}
    assert _postings(untrained_bm25_shaped / "deepimpact") == quantized
    queries = [*WEIGHTING_QUERIES, ("repeats", "bone bone bone vitamin")]  # a term counts as often as BM25 counts it
    retriever = ImpactRetriever(Index(untrained_bm25_shaped))
    run = retriever([Query(q, t) for q, t in queries], k=10)
    assert retriever.describe()["query_weights"] == "count"
    for qid, text in queries:
        qt = Counter(terms(text))
        want = sorted(((sum(v * qt[t] for t, v in w.items() if t in qt), d) for d, w in quantized.items()),
                      key=lambda x: (-x[0], x[1]))
        assert [h.doc_id for h in run[qid]] == [d for s, d in want if s > 0]
        assert [h.score for h in run[qid]] == [float(s) for s, _ in want if s > 0]


def test_an_untrained_bm25_shaped_deepct_head_writes_ten_times_the_term_frequencies(untrained_bm25_shaped):
    from weir.indexer.index_dir import Index
    from weir.ranker.retrievers.learned_sparse import DeepCTRetriever

    postings = _postings(untrained_bm25_shaped / "deepct")
    for d in WEIGHTING_DOCS:
        text = f"{d['title']} {d['text']}" if d["title"] else d["text"]
        counts = {}
        for t in terms(text):
            counts[t] = counts.get(t, 0) + 1
        assert postings[d["id"]] == {t: 10 * c for t, c in counts.items()}
    stage = DeepCTRetriever(Index(untrained_bm25_shaped))
    assert (stage.k1, stage.b) == (9.0, 0.4)  # BM25 k1 0.9 in units ten times finer: ranks as BM25 over tf


@pytest.mark.parametrize("shape", ["bm25", "free"])
def test_a_head_of_several_members_averages_them(tmp_path, shape):
    """`weir train --members N` writes N heads as one: a BM25-shaped head multiplies its prior by the geometric mean of
    the members' factors (so still within [1/2, 2], and exactly 1 when every member is untrained); a free head's
    weight is the mean of theirs. Checked against each member run alone, through the saved artifact."""
    import torch

    from weir.indexer.weighting.backbone import Backbone
    from weir.indexer.weighting.model import TermWeighter, factor, make_head, save

    backbone = Backbone(max_length=32)
    torch.manual_seed(3)
    heads = [make_head("deepimpact", backbone.dim, shape) for _ in range(3)]
    for h in heads:  # trained-looking members: the BM25 shape's last layer starts at zero
        torch.nn.init.normal_(h[2].weight, std=0.5)
    joined = make_head("deepimpact", backbone.dim, shape, members=3)
    for slot, h in zip(joined.members, heads, strict=True):
        slot.load_state_dict(h.state_dict())
    card = {"kind": "deepimpact", "shape": shape, "base_model": "all-MiniLM-L6-v2", "max_length": 32, "members": 3}
    model = TermWeighter(save(tmp_path / "m", joined, card), backbone=backbone)
    assert model.members == 3 and model.describe()["members"] == 3

    vectors = np.random.default_rng(0).normal(size=(50, backbone.dim)).astype(np.float32)
    prior = np.random.default_rng(1).uniform(0.1, 3.0, size=50)
    with torch.inference_mode():
        outputs = np.stack([h(torch.from_numpy(vectors)).squeeze(-1).numpy().astype(np.float64) for h in heads])
    got = model.apply(vectors, prior=prior if shape == "bm25" else None)
    if shape == "bm25":
        want = prior * np.exp(np.log(factor(outputs)).mean(axis=0))
        assert np.all(got >= prior / 2 * (1 - 1e-6)) and np.all(got <= prior * 2 * (1 + 1e-6))
        assert np.ptp(np.log(factor(outputs)), axis=0).max() > 0.1  # the members do disagree
    else:
        want = outputs.mean(axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    if shape == "bm25":  # untrained members: the prior exactly
        untrained = make_head("deepimpact", backbone.dim, shape, members=3)
        model = TermWeighter(save(tmp_path / "u", untrained, card), backbone=backbone)
        assert np.array_equal(model.apply(vectors, prior=prior), prior.astype(np.float32))


def test_members_shrunk_towards_the_prior_by_their_disagreement(tmp_path):
    """`weir train --members N --shrink`: each term's mean log-factor m is kept in the share tau2 / (tau2 + v) of it,
    v the members' variance on that term over N; members that agree keep the geometric mean, tau2 = 0 gives the prior
    exactly. Through the saved artifact, against numpy."""
    import torch

    from weir.indexer.weighting.members import shrinkage_prior
    from weir.indexer.weighting.backbone import Backbone
    from weir.indexer.weighting.model import TermWeighter, factor, make_head, save
    from weir.core.types import InputError

    backbone = Backbone(max_length=32)
    torch.manual_seed(5)
    heads = [make_head("deepimpact", backbone.dim, "bm25") for _ in range(3)]
    for h in heads:
        torch.nn.init.normal_(h[2].weight, std=0.5)
    vectors = np.random.default_rng(0).normal(size=(60, backbone.dim)).astype(np.float32)
    prior = np.random.default_rng(1).uniform(0.1, 3.0, size=60)
    with torch.inference_mode():
        outputs = np.stack([h(torch.from_numpy(vectors)).squeeze(-1).numpy().astype(np.float64) for h in heads])
    logs = np.log(factor(outputs))

    def artifact(name, members, tau2):
        joined = make_head("deepimpact", backbone.dim, "bm25", members=len(members))
        for slot, h in zip(joined.members, members, strict=True):
            slot.load_state_dict(h.state_dict())
        card = {"kind": "deepimpact", "shape": "bm25", "base_model": "all-MiniLM-L6-v2", "max_length": 32,
                "members": len(members), "shrink": {"tau2": tau2}}
        return TermWeighter(save(tmp_path / name, joined, card), backbone=backbone)

    tau2 = 0.01
    model = artifact("s", heads, tau2)
    assert model.describe()["shrink"] == tau2
    v = logs.var(axis=0, ddof=1) / 3
    want = prior * np.exp(logs.mean(axis=0) * tau2 / (tau2 + v))
    np.testing.assert_allclose(model.apply(vectors, prior=prior), want, rtol=1e-5, atol=1e-6)
    kept = tau2 / (tau2 + v)
    assert kept.min() < 0.5 < kept.max() <= 1  # the terms they disagree on fall back towards the prior, not all alike

    same = artifact("a", [heads[0]] * 3, tau2)  # members that agree: their mean, unshrunk
    np.testing.assert_allclose(same.apply(vectors, prior=prior), prior * factor(outputs[0]), rtol=1e-5, atol=1e-6)
    none = artifact("z", heads, 0.0)  # no spread of true corrections: the prior itself
    np.testing.assert_allclose(none.apply(vectors, prior=prior), prior, rtol=1e-6)

    # tau2 by the method of moments: true corrections of variance 0.04 seen by 3 members with noise of variance 0.03
    rng = np.random.default_rng(7)
    true = rng.normal(0, 0.2, size=200_000)
    record = shrinkage_prior(true + rng.normal(0, np.sqrt(0.03), size=(3, true.size)))
    assert record["tau2"] == pytest.approx(0.04, rel=0.03) and record["rows"] == true.size
    assert record["mean_noise_variance"] == pytest.approx(0.01, rel=0.03)
    with pytest.raises(InputError, match="2 members"):
        make_head("deepimpact", backbone.dim, "bm25", members=1, shrink=0.01)


def test_the_dense_vectors_of_a_document_pass_are_those_of_a_separate_pass(tmp_path, monkeypatch):
    """A build with deepct and dense on the same backbone: by default (``auto``) the heads read the words and the dense
    vector the text, in a pass of its own that gives every passage exactly the vector a separate pass gives. Asked to
    read words (``--pass-input words``), the one pass serves both: a passage within one window whose words are its
    whole input (no punctuation) gets the separate pass's vector; the others are counted, and a passage without terms
    is encoded on its own."""
    from weir.indexer.build import build_index
    from weir.indexer.dense import DenseIndex
    from weir.indexer.encoder import Encoder
    from weir.indexer.index_dir import Index

    monkeypatch.delenv("WEIR_BACKEND", raising=False)
    monkeypatch.setenv("WEIR_CACHE", str(tmp_path / "cache"))  # no term vectors cached: the pass runs
    docs = [{"id": "plain", "title": "Vitamin D", "text": "Vitamin D deficiency and bone density in elderly women"},
            {"id": "punct", "title": "", "text": "p53-dependent apoptosis after DNA damage (3.5 mg/kg)."},
            {"id": "long", "title": "", "text": "misfolded proteins aggregate in neurons " * 60},
            {"id": "none", "title": "", "text": "... !!! ---"}]
    (tmp_path / "coll").mkdir()
    (tmp_path / "coll" / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    vectors, entries = {}, {}
    for name, shared, learned in (("words", True, {"input": "words"}), ("auto", True, None), ("separate", False, None)):
        build_index(tmp_path / "coll", tmp_path / name, components=("deepct", "dense"), dense={"shared_pass": shared},
                    learned=learned)
        index = Index(tmp_path / name)
        entries[name] = entry = index.manifest["components"]["dense"]
        dense = DenseIndex(index.component_path("dense"), entry)
        vectors[name] = {d: np.asarray(dense.vectors[dense.rows([d])[0]], dtype=np.float32) for d in dense.docids}
    assert entries["words"]["shared_pass"]["passages"] == 3  # "none" has no terms, so no window
    assert entries["words"]["shared_pass"]["input_differs_from_a_separate_pass"] == 2  # punctuation; cut at 256 pieces
    assert entries["words"]["shared_pass"]["encoded_separately"] == 1
    assert entries["auto"]["shared_pass"]["input_differs_from_a_separate_pass"] == 0
    assert "shared_pass" not in entries["separate"]
    encoder = Encoder()
    alone = encoder.encode_passages(["Vitamin D Vitamin D deficiency and bone density in elderly women"])[0]
    assert np.abs(vectors["words"]["plain"] - alone.astype(np.float16)).max() <= 1e-3  # stored as float16
    for doc in vectors["separate"]:
        assert np.array_equal(vectors["auto"][doc], vectors["separate"][doc]), doc
    assert np.array_equal(vectors["words"]["plain"], vectors["separate"]["plain"])
    assert np.array_equal(vectors["words"]["none"], vectors["separate"]["none"])
    assert not np.array_equal(vectors["words"]["punct"], vectors["separate"]["punct"])
