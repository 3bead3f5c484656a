"""What the SearchService answers, made from a run's arrays: a query's :class:`Answer` (its hits as
:class:`weir.core.hits.Ranked`, never a ``Hit`` object a hit), the wire bytes of its ``SearchResponse`` written in
bulk from them (:mod:`weir.service.wire`; on the worker thread that ran the batch, the hits of all the batch's
answers in one pass), a ``BatchSearchResponse`` put together from those bytes, and the method handlers that send
the bytes as they are. A deep answer (k=1000) so costs a fraction of what scoring it does, where a
``search_pb2.Hit`` message a hit (with its ``stage_scores`` map) cost several times that."""

from __future__ import annotations

from typing import NamedTuple

import grpc
import numpy as np

from weir.core.hits import DocIds, Ranked
from weir.core.types import Document, Hit, Run
from weir.service import wire
from weir.service.batching import Item
from weir.service.stubs import search_pb2

NO_HITS = Ranked(DocIds([]), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32))


def ranked(hits: list[Hit]) -> Ranked:
    """A list of hits (best first, ranked from 1) as arrays."""
    return Run({"": hits}).ranking("") if hits else NO_HITS


class Answer(NamedTuple):
    """One query's result of a batch: its hits, the stored documents of its hits (when it asked for their text), the
    batch's stage timings and size, and (once :func:`responses` wrote it) its ``SearchResponse`` as wire bytes."""

    hits: Ranked
    documents: dict[str, Document | None]
    timings: dict[str, float]
    batch: int
    response: bytes = b""

    @classmethod
    def of(cls, item: Item, hits: Ranked | list[Hit], documents: dict[str, Document], timings: dict[str, float],
           batch: int) -> Answer:
        hits = hits if isinstance(hits, Ranked) else ranked(hits)
        stored = {d: documents.get(d) for d in hits.doc_ids()} if item.include_text else {}
        return cls(hits, stored, timings, batch)

    def texts(self) -> tuple[list[str], list[str]] | tuple[None, None]:
        """The title and text of each hit (empty for a document not stored), or None, None when not asked for."""
        if not self.documents:
            return None, None
        docs = [self.documents.get(d) for d in self.hits.doc_ids()]
        return [(d.title or "") if d else "" for d in docs], [(d.text or "") if d else "" for d in docs]


def responses(spec: str, results: list) -> list:
    """``results`` (a batch's, in order) with each :class:`Answer`'s ``SearchResponse`` written as wire bytes: the
    hits of the answers without text in one pass (:func:`weir.service.wire.hits_fields`), then protobuf's own bytes
    of the rest of the response (timings, pipeline, batch size; the same for a batch's answers, serialized once),
    appended (concatenated messages merge). Whatever is not an answer, or has its bytes already, is left as it is."""
    todo = [i for i, a in enumerate(results) if isinstance(a, Answer) and not a.response]
    plain = [i for i in todo if not results[i].documents and results[i].hits.reasons is None]
    fields = dict(zip(plain, wire.hits_fields([results[i].hits for i in plain])))
    rest: dict[tuple, bytes] = {}
    out = list(results)
    for i in todo:
        a = results[i]
        key = (tuple(a.timings.items()), a.batch)
        if key not in rest:
            rest[key] = search_pb2.SearchResponse(pipeline=spec, batch_size=a.batch, timings=[
                search_pb2.StageTiming(stage=s, milliseconds=seconds * 1000) for s, seconds in a.timings.items()
            ]).SerializeToString()
        if i in fields:
            hits = fields[i]
        elif a.hits.reasons is not None:
            hits = explained_hits(a)
        else:
            hits = wire.hits_field(a.hits, *a.texts())
        out[i] = a._replace(response=hits + rest[key])
    return out


def explained_hits(answer: Answer) -> bytes:
    """The ``hits`` field of an answer whose hits carry reasons, written by protobuf a ``Hit`` message each (a
    request that asks to explain asks for a few hits, each with a handful of reasons: their bytes cost little)."""
    titles, texts = answer.texts()
    reasons = answer.hits.top_reasons()
    response = search_pb2.SearchResponse()
    for i, h in enumerate(Run({"": answer.hits})[""]):
        response.hits.append(search_pb2.Hit(
            doc_id=h.doc_id, score=h.score, rank=h.rank, stage_scores=h.stage_scores, relevance=h.relevance,
            title=titles[i] if titles else "", text=texts[i] if texts else "",
            reasons=[search_pb2.Reason(stage=s, part=p, contribution=v) for s, p, v in reasons[i]]))
    return response.SerializeToString()


def search_response(spec: str, answer: Answer) -> bytes:
    """The ``SearchResponse`` of ``answer`` as wire bytes."""
    return responses(spec, [answer])[0].response


def batch_response(spec: str, answers: list[Answer]) -> bytes:
    """The ``BatchSearchResponse`` of ``answers`` (in order) as wire bytes."""
    return (wire.repeated(wire.BATCH_RESULTS, [a.response for a in responses(spec, answers)])
            + search_pb2.BatchSearchResponse(pipeline=spec).SerializeToString())


def _serialize(response) -> bytes:
    """A response's wire bytes: as they come when the servicer made them, else protobuf's."""
    return response if isinstance(response, bytes) else response.SerializeToString()


class Malformed:
    """Request bytes protobuf cannot parse (a string field that is not UTF-8, a truncated or garbled message): handed
    to the servicer in place of the request, which answers INVALID_ARGUMENT with :meth:`refuse` (grpc itself would
    answer UNKNOWN, "Unexpected DecodeError")."""

    def __init__(self, kind: str, error: Exception):
        self.message = f"the request is not a valid {kind} message: {error}"[:300]

    async def refuse(self):
        from weir.service.failures import Failure

        raise Failure(grpc.StatusCode.INVALID_ARGUMENT, self.message)


def _parse(request_class):
    """``request_class``'s parser that returns a :class:`Malformed` instead of raising."""
    from google.protobuf.message import DecodeError

    def parse(data: bytes):
        try:
            return request_class.FromString(data)
        except DecodeError as e:
            return Malformed(request_class.__name__, e)

    return parse


def add_to_server(servicer, server) -> None:
    """Serve ``servicer``'s SearchService methods on ``server`` (what the generated
    ``add_SearchServiceServicer_to_server`` does, with a serializer that sends the servicer's wire bytes as they
    are, and request bytes that do not parse handed over as :class:`Malformed`)."""
    requests = {"Search": search_pb2.SearchRequest, "BatchSearch": search_pb2.BatchSearchRequest,
                "Info": search_pb2.InfoRequest}
    handlers = {name: grpc.unary_unary_rpc_method_handler(getattr(servicer, name),
                                                          request_deserializer=_parse(request),
                                                          response_serializer=_serialize)
                for name, request in requests.items()}
    service = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)
