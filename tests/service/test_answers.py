"""The service's answers written in bulk from a run's arrays (weir.service.answers, weir.service.wire) are, byte for
byte, what protobuf writes when the response is filled one ``search_pb2.Hit`` per ``Hit`` (how the service answered
before), but for the order of a hit's ``stage_scores`` entries (protobuf sets none; upb writes its hash table's, the
bulk writer the stages' order): float32 and float64 scores, stage scores missing (NaN) for some hits, zero and
negative zero scores, non-ASCII ids and ids with a NUL, ranks and lengths whose varints take two and three bytes,
stored text or none, a calibrated pipeline's relevance (an optional field: written when zero) or none."""

from __future__ import annotations

import numpy as np
import pytest

from weir.core.hits import DocIds, Ranked
from weir.core.types import Document, Hit, Run
from weir.service import wire
from weir.service.answers import NO_HITS, Answer, batch_response, ranked, responses, search_response
from weir.service.batching import Item
from weir.service.stubs import search_pb2

TIMINGS = {"bm25": 0.0125, "attention": 1.5}


def per_hit(spec: str, hits: list[Hit], documents: dict, timings: dict, batch: int) -> search_pb2.SearchResponse:
    """The response as the service made it before: a ``search_pb2.Hit`` appended per hit."""
    response = search_pb2.SearchResponse(pipeline=spec, batch_size=batch)
    for h in hits:
        doc = documents.get(h.doc_id)
        response.hits.append(search_pb2.Hit(doc_id=h.doc_id, score=h.score, rank=h.rank, stage_scores=h.stage_scores,
                                            title=doc.title if doc else "", text=doc.text if doc else "",
                                            relevance=h.relevance))
    for stage, seconds in timings.items():
        response.timings.append(search_pb2.StageTiming(stage=stage, milliseconds=seconds * 1000))
    return response


def same(got: bytes, expected, message=search_pb2.SearchResponse) -> bool:
    """The same message, bit for bit in every value: equal, and equal bytes with map entries in key order."""
    parsed = message.FromString(got)
    return parsed == expected and (parsed.SerializeToString(deterministic=True)
                                   == expected.SerializeToString(deterministic=True))


def rankings(rng: np.random.Generator) -> dict[str, Ranked]:
    ids = DocIds([f"d{i}" for i in range(30_000)] + ["é-ü", "日本語", "x" * 200, ""])
    n = 20_000  # ranks of one, two and three varint bytes
    docs = rng.permutation(len(ids))[:n].astype(np.int32)
    first = np.sort(rng.normal(10, 4, n).astype(np.float32))[::-1]
    first[[5, 6, 7]] = [0.0, -0.0, -3.25]
    fused = np.sort(rng.random(n))[::-1] * 1e-3
    partial = np.where(rng.random(n) < 0.3, np.nan, rng.normal(size=n))
    with_nul = DocIds(["a\0b", "c", "ä"])
    return {
        "one stage, float32": Ranked.of_stage(ids, docs, first, "bm25"),
        "fusion, float64, a stage missing for some hits": Ranked(
            ids, docs, fused, {"bm25": partial, "dense": rng.normal(size=n), "hybrid": fused}),
        "no stage scores": Ranked(ids, docs[:50], first[:50]),
        "the special ids": Ranked(ids, np.arange(len(ids) - 4, len(ids), dtype=np.int32),
                                  np.array([3, 2, 1, 0], dtype=np.float32), {"bm25": np.array([3.0, 2, 1, 0])}),
        "an id with a NUL": Ranked.of_stage(with_nul, np.array([2, 0, 1]), np.array([1.5, 1, 0.5]), "bm25"),
        "calibrated, a relevance of 0 included": Ranked.of_stage(ids, docs[:300], first[:300], "bm25").with_relevance(
            np.r_[np.sort(rng.random(299))[::-1], 0.0]),
        "no hits": NO_HITS,
    }


def documents_of(r: Ranked) -> dict[str, Document | None]:
    docs = {}
    for i, d in enumerate(r.doc_ids()):
        if i % 7 == 3:
            continue  # not stored
        docs[d] = Document(d, "" if i % 5 == 0 else f"Title {i} ñ", "long text " * (i % 40) * 50 if i % 3 else "")
    return docs


@pytest.mark.parametrize("include_text", [False, True])
def test_a_search_response_is_the_bytes_of_the_per_hit_response(include_text):
    for name, r in rankings(np.random.default_rng(7)).items():
        r = r.take(slice(2000)) if include_text else r
        docs = documents_of(r) if include_text else {}
        answer = Answer.of(Item("q", include_text), r, docs, TIMINGS, 3)
        expected = per_hit("bm25>>attention", Run({"q": r})["q"], answer.documents, TIMINGS, 3)
        got = search_response("bm25>>attention", answer)
        assert same(got, expected), name
        if len(r.stages) < 2:
            assert got == expected.SerializeToString(), name


def test_a_batch_response_is_the_bytes_of_the_per_hit_batch_response():
    answers = [Answer.of(Item("q"), r, {}, TIMINGS, 6) for r in rankings(np.random.default_rng(3)).values()]
    expected = search_pb2.BatchSearchResponse(pipeline="hybrid", results=[
        per_hit("hybrid", Run({"q": a.hits})["q"], {}, TIMINGS, 6) for a in answers])
    assert same(batch_response("hybrid", answers), expected, search_pb2.BatchSearchResponse)
    assert batch_response("hybrid", []) == search_pb2.BatchSearchResponse(pipeline="hybrid").SerializeToString()


def test_the_answers_of_a_batch_written_together_are_each_answers_bytes():
    """Answers over one table and over others, float32 and float64 scores, with text and without, empty, and what
    is not an answer: each answer's bytes are those of its own per-hit response."""
    rng = np.random.default_rng(11)
    ids = DocIds([f"doc-{i}" for i in range(5000)])
    other = rankings(rng)
    batch = [Ranked.of_stage(ids, rng.permutation(5000)[:n], np.sort(rng.random(n))[::-1].astype(dtype), "bm25")
             for n, dtype in ((1000, np.float32), (129, np.float64), (1, np.float32), (1000, np.float32))]
    batch += [other["one stage, float32"], NO_HITS, other["fusion, float64, a stage missing for some hits"],
              batch[0].with_relevance(np.linspace(0.9, 0.1, 1000)), other["calibrated, a relevance of 0 included"]]
    results = [Answer.of(Item("q", i == 2), r, documents_of(r), TIMINGS, len(batch)) for i, r in enumerate(batch)]
    results.insert(2, ValueError("abandoned"))
    written = responses("bm25", results)
    assert written[2] is results[2]
    for got, answer in zip(written[:2] + written[3:], results[:2] + results[3:]):
        expected = per_hit("bm25", Run({"q": answer.hits})["q"], answer.documents, TIMINGS, len(batch))
        assert same(got.response, expected)


def test_hits_given_as_a_list_answer_as_their_arrays():
    hits = [Hit("b", 2.5, 1, {"bm25": 2.5}), Hit("a", 1.0, 2, {"bm25": 1.0, "ltr": -1.0}), Hit("c", 0.5, 3)]
    answer = Answer.of(Item("q", True), hits, {"a": Document("a", "A", "text a")}, {}, 1)
    expected = per_hit("bm25", hits, answer.documents, {}, 1)
    assert same(search_response("bm25", answer), expected)
    assert ranked([]) is NO_HITS


@pytest.mark.parametrize("n", [1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28, 2**35 - 1])
def test_varints_are_protobufs(n):
    encoded = search_pb2.Pruning(documents_scored=n).SerializeToString()  # an int64 field: tag 0x28, then the varint
    assert encoded == b"\x28" + wire.varint(n)
    rows, lengths = wire.varints(np.array([n, 5, 0]))
    lengths = np.full(3, len(rows)) if lengths is None else lengths  # None: every varint as wide as the rows
    assert rows[:lengths[0], 0].tobytes() == wire.varint(n) and rows[:lengths[1], 1].tobytes() == b"\x05"
    assert rows[:lengths[2], 2].tobytes() == b"\x00"


@pytest.mark.parametrize("n", [1, 127, 128, 129, 16383, 16384, 16385])
def test_the_rank_field_of_every_length(n):
    wire.ranks(20_000)  # the cache longer than asked for
    rows, lengths = wire.ranks(n)
    lengths = np.full(n, len(rows)) if lengths is None else lengths
    assert [rows[:lengths[i], i].tobytes() for i in (0, n - 1)] == [b"\x18" + wire.varint(r) for r in (1, n)]
    assert len(rows) == int(lengths.max())


def test_explained_hits_are_the_bytes_of_the_per_hit_response_with_their_reasons():
    ids = DocIds(["a", "b", "c"])
    hits = Ranked(ids, np.array([2, 0, 1]), np.array([3.0, 2.0, 1.0]), {"hybrid": np.array([3.0, 2.0, 1.0])}, None,
                  {"hybrid:bm25": np.array([2.0, 0.5, 1.0]), "hybrid:dense": np.array([1.0, 1.5, 0.0])})
    answer = Answer.of(Item("q", True), hits, {"c": Document("c", "C", "text c")}, {}, 1)
    expected = per_hit("hybrid", Run({"q": hits})["q"], answer.documents, {}, 1)
    for h, reasons in zip(expected.hits, hits.top_reasons()):
        h.reasons.extend(search_pb2.Reason(stage=s, part=p, contribution=v) for s, p, v in reasons)
    assert same(search_response("hybrid", answer), expected)
    assert [(r.part, r.contribution) for r in expected.hits[0].reasons] == [("bm25", 2.0), ("dense", 1.0)]
