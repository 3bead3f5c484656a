"""The gRPC service on a small index, in-process on loopback: answers, every bad request's status code and message,
overload, deadlines that stop work before the next stage, a taken port, tokens, TLS, draining, metrics."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

import grpc
import pytest

from weir.service.client import SearchClient
from weir.service.config import ServiceConfig
from weir.service.server import BackgroundServer
from weir.core.types import InputError


def _config(index, **settings) -> ServiceConfig:
    return ServiceConfig.load(index=str(index), port=0, verify_checksums=False, **settings)


@pytest.fixture(scope="module")
def server(small_index):
    with BackgroundServer(_config(small_index, pipelines=["bm25", "dense", "hybrid", "bm25>>ltr"])) as s:
        yield s


@pytest.fixture()
def client(server):
    with SearchClient(f"127.0.0.1:{server.port}", timeout=30) as c:
        yield c


def test_health_search_batch_and_info(client):
    assert client.health() == client.health("weir.v1.SearchService") == "SERVING"
    one = client.search("coffee and liver disease", k=3, include_text=True)
    assert one.pipeline == "bm25" and [h.rank for h in one.hits] == [1, 2, 3] and one.batch_size >= 1
    assert all(h.title or h.text for h in one.hits) and [t.stage for t in one.timings] == ["bm25"]
    batch = client.batch_search(["coffee and liver disease", "caffeine sleep"], k=3, pipeline="hybrid")
    alone = [client.search(q, k=3, pipeline="hybrid") for q in ("coffee and liver disease", "caffeine sleep")]
    assert [[h.doc_id for h in r.hits] for r in batch.results] == [[h.doc_id for h in r.hits] for r in alone]
    info = client.info()
    assert list(info.pipelines) == ["bm25", "dense", "hybrid", "bm25>>ltr"] and info.default_pipeline == "bm25"
    assert info.limits.max_k == 1000 and info.documents == 12 and not hasattr(info, "index_path")
    assert [(m.pipeline, list(m.models)) for m in info.models] == [("bm25>>ltr", ["ltr-cosine"])]  # the default


@pytest.mark.parametrize("kwargs, message", [
    ({"query": "   "}, "query is empty"),
    ({"query": "q", "k": 0}, "k must be between 1 and 1000"),
    ({"query": "q", "k": 10**6}, "k must be between 1 and 1000"),
    ({"query": "q", "depth": -1}, "depth must be between 0 and 1000"),
    ({"query": "q", "depth": 10_000}, "depth must be between 0 and 1000"),
    ({"query": "x" * 5000}, "query is longer than 4096 characters"),
    ({"query": " ".join(a + b for a in "abcdefghijklmnopqrstuvwxyz0123456789" for b in "abcdefghijklmnopqrstuvwxyz0123456789")[:3300]},
     "1100 distinct words; at most 1024"),
    ({"query": "q", "pipeline": "nonsense"}, "unknown first stage 'nonsense'"),
    ({"query": "q", "pipeline": "bm25>>"}, "empty stage"),
    ({"query": "q", "pipeline": "bm25>>" * 2000 + "bm25"}, "pipeline name is longer than 200 characters"),
    ({"query": "q", "pipeline": "bm25>>ltr>>ltr"}, "is not served here; served: bm25, dense, hybrid, bm25>>ltr"),
    ({"query": "q", "pipeline": "deepct"}, "is not served here"),
])
def test_bad_requests_get_invalid_argument_with_a_short_message(client, kwargs, message):
    with pytest.raises(grpc.RpcError) as info:
        client.search(**kwargs)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in info.value.details() and len(info.value.details()) < 400
    assert client.health() == "SERVING"  # the server goes on


def test_batch_limits(client):
    for queries in ([], ["q"] * 101):
        with pytest.raises(grpc.RpcError) as info:
            client.batch_search(queries)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "a batch holds 1 to 100" in info.value.details()


class _Gate:
    """Holds every pipeline batch of a server until released (to make load and timing deterministic)."""

    def __init__(self, service):
        self.batcher, self.run, self.open = service.batcher, service.batcher.run, threading.Event()
        self.started = threading.Semaphore(0)
        self.batcher.run = self._held

    def _held(self, key, items):
        self.started.release()
        self.open.wait(30)
        return self.run(key, items)

    def restore(self):
        self.open.set()
        self.batcher.run = self.run


def _in_thread(fn):
    box = {}

    def target():
        try:
            box["value"] = fn()
        except Exception as e:  # noqa: BLE001 (the test inspects it)
            box["error"] = e

    t = threading.Thread(target=target)
    t.start()
    return t, box


def test_overload_is_resource_exhausted_at_once(small_index):
    limits = {"max_in_flight": 1, "max_queued": 1}
    with BackgroundServer(_config(small_index, limits=limits, batching={"max_batch": 1})) as s, \
            SearchClient(f"127.0.0.1:{s.port}") as c:
        gate = _Gate(s.server.service)
        held = [_in_thread(lambda: c.search("coffee", k=2)) for _ in range(2)]
        assert gate.started.acquire(timeout=10)  # one batch running, one query queued: the limit (1 + 1)
        time.sleep(0.2)
        start = time.perf_counter()
        with pytest.raises(grpc.RpcError) as info:
            c.search("tea", k=2)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "limit 2" in info.value.details()
        assert time.perf_counter() - start < 1.0  # refused at once, not after waiting
        gate.restore()
        for t, box in held:
            t.join(10)
            assert "value" in box and box["value"].hits
        assert c.search("tea", k=2).hits  # below the limit again


def test_every_served_pipeline_is_ready_before_serving_and_a_cold_one_teaches_admission_nothing(small_index):
    """``warm = "served"`` (the default): each served pipeline is built and run before health says SERVING, so no
    caller's first call waits for models to load. ``warm = "default"``: the others are built by their first call,
    whose seconds of loading are not taken as the pipeline's cost (they would refuse its next calls as too slow)."""
    served = ["bm25", "dense", "bm25>>ltr"]
    with BackgroundServer(_config(small_index, pipelines=served)) as s:
        assert all(p in s.server.service.cache for p in served)
    with BackgroundServer(_config(small_index, pipelines=served, warm="default")) as s, \
            SearchClient(f"127.0.0.1:{s.port}", timeout=30) as c:
        service = s.server.service
        assert "bm25" in service.cache and "dense" not in service.cache and "bm25>>ltr" not in service.cache
        learned = service.admission.costs._per_query
        assert c.search("coffee", k=2, pipeline="bm25>>ltr").hits and "bm25>>ltr" in service.cache
        assert not [key for key in learned if key[0] == "bm25>>ltr"]  # the batch that built it: not a cost
        assert c.search("coffee", k=2, pipeline="bm25>>ltr").hits
        assert [key for key in learned if key[0] == "bm25>>ltr"]  # the next one is
    with pytest.raises(InputError, match="warm = 'all'.*served, default"):
        _config(small_index, warm="all")


def _slow_bm25_counted_ltr(server) -> list[int]:
    """Make the served bm25>>ltr take 0.6 s in BM25 and record how many queries reach LTR (the returned list)."""
    first, second = server.server.service.cache.get("bm25>>ltr").stages
    seen: list[int] = []
    retrieve, rerank = first.retrieve, second.rerank

    def slow_retrieve(queries, k):
        time.sleep(0.6)
        return retrieve(queries, k)

    def counted_rerank(queries, run, depth):
        seen.append(len(queries))
        return rerank(queries, run, depth)

    first.retrieve, second.rerank = slow_retrieve, counted_rerank
    return seen


def test_expired_request_stops_before_its_next_stage(small_index):
    """bm25>>ltr with a deadline that passes during BM25: the LTR stage never runs for it."""
    with BackgroundServer(_config(small_index, pipelines=["bm25", "bm25>>ltr"])) as s, \
            SearchClient(f"127.0.0.1:{s.port}") as c:
        seen = _slow_bm25_counted_ltr(s)
        with pytest.raises(grpc.RpcError) as info:
            c.search("coffee", k=2, pipeline="bm25>>ltr", timeout=0.3)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        time.sleep(1.0)  # the batch has finished its first stage by now
        assert seen == []  # the reranker never ran for the expired query
        assert c.search("coffee", k=2, pipeline="bm25>>ltr").hits and seen == [1]


def test_cancelled_request_stops_before_its_next_stage(small_index):
    """A caller that cancels during BM25: the LTR stage never runs for its query, and the server goes on."""
    from weir.service.stubs import search_pb2

    with BackgroundServer(_config(small_index, pipelines=["bm25", "bm25>>ltr"])) as s, \
            SearchClient(f"127.0.0.1:{s.port}") as c:
        seen = _slow_bm25_counted_ltr(s)
        call = c.stub.Search.future(search_pb2.SearchRequest(query="coffee", k=2, pipeline="bm25>>ltr"), timeout=30)
        time.sleep(0.3)
        assert call.cancel()
        time.sleep(1.0)
        assert seen == [] and s.server.service.admission.admitted == 0
        assert c.search("coffee", k=2, pipeline="bm25>>ltr").hits and seen == [1]


def test_taken_port_and_foreign_address_are_clear_errors(server, small_index, capsys):
    from weir.cli import main

    assert main(["serve", "--index", str(small_index), "--port", str(server.port), "--no-verify"]) == 2
    assert f"cannot listen on 127.0.0.1:{server.port}: the port is taken" in capsys.readouterr().err
    with pytest.raises(InputError, match="not one of this machine's"):
        with BackgroundServer(_config(small_index, host="192.0.2.1")):
            pass


def test_tokens(small_index, tmp_path):
    (tmp_path / "tokens").write_text("# tokens\nsecret-one\nsecret-two\n")
    with BackgroundServer(_config(small_index, token_file=str(tmp_path / "tokens"))) as s:
        target = f"127.0.0.1:{s.port}"
        with SearchClient(target) as anonymous, SearchClient(target, token="wrong") as wrong:
            assert anonymous.health() == "SERVING"  # health stays open
            for c in (anonymous, wrong):
                with pytest.raises(grpc.RpcError) as info:
                    c.search("coffee")
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED and "bearer token" in info.value.details()
        with SearchClient(target, token="secret-two") as good:
            assert good.search("coffee", k=1).hits


def _certificates(directory):
    """A CA, and a server and a client certificate it signed (for 127.0.0.1 / localhost)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def make(name, issuer=None, issuer_key=None, ca=False):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer or subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(issuer_key or key, hashes.SHA256())
        (directory / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (directory / f"{name}.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return subject, key

    ca_name, ca_key = make("ca", ca=True)
    make("server", ca_name, ca_key)
    make("client", ca_name, ca_key)
    return {n: str(directory / n) for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


def test_tls_with_client_certificates(small_index, tmp_path):
    files = _certificates(tmp_path)
    tls = {"cert": files["server.crt"], "key": files["server.key"], "client_ca": files["ca.crt"]}
    with BackgroundServer(_config(small_index, tls=tls)) as s:
        target = f"127.0.0.1:{s.port}"
        with SearchClient(target, ca=files["ca.crt"], cert=files["client.crt"], key=files["client.key"]) as c:
            assert c.search("coffee", k=1).hits
        for kwargs in ({}, {"ca": files["ca.crt"]}):  # plaintext; TLS without a client certificate
            with SearchClient(target, timeout=5, **kwargs) as c, pytest.raises(grpc.RpcError) as info:
                c.search("coffee", k=1)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_drain_answers_new_calls_unavailable_and_finishes_those_in_flight(small_index):
    with BackgroundServer(_config(small_index)) as s, SearchClient(f"127.0.0.1:{s.port}") as c:
        gate = _Gate(s.server.service)
        in_flight, box = _in_thread(lambda: c.search("coffee", k=2))
        assert gate.started.acquire(timeout=10)
        draining, _ = _in_thread(lambda: s.drain(grace=10))
        time.sleep(0.3)
        with pytest.raises(grpc.RpcError) as info:
            c.search("tea", k=2)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in info.value.details()
        assert c.health() == "NOT_SERVING"
        gate.restore()
        in_flight.join(10)
        draining.join(15)
        assert box["value"].hits and not draining.is_alive()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_follow_the_grpc_conventions(small_index):
    port = _free_port()
    with BackgroundServer(_config(small_index, metrics_port=port)) as s, SearchClient(f"127.0.0.1:{s.port}") as c:
        c.search("coffee", k=2)
        with pytest.raises(grpc.RpcError):
            c.search("")
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'grpc_server_handled_total{grpc_code="OK",grpc_method="Search",grpc_service="weir.v1.SearchService"' \
           ',grpc_type="unary"} 1.0' in text
    assert 'grpc_code="INVALID_ARGUMENT",grpc_method="Search"' in text
    assert "grpc_server_handling_seconds_bucket" in text and 'weir_stage_seconds_count{pipeline="bm25",stage="bm25"}' in text
    assert "weir_batch_size_bucket" in text and "weir_requests_in_flight 0.0" in text


@pytest.mark.slow  # a server process of its own: the JVM, torch and the index loaded again
def test_sigterm_drains_and_exits(small_index):
    """`weir serve` in its own process: SERVING, then SIGTERM: it stops taking calls and exits with status 0."""
    import re
    import signal
    import subprocess
    import sys
    from pathlib import Path

    weir = str(Path(sys.executable).parent / "weir")
    process = subprocess.Popen([weir, "serve", "--index", str(small_index), "--port", "0", "--no-verify"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = process.stdout.readline()
        port = int(re.search(r":(\d+)$", line.strip()).group(1))
        with SearchClient(f"127.0.0.1:{port}", timeout=10) as c:
            assert c.health() == "SERVING" and c.search("coffee", k=1).hits
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
            with pytest.raises(grpc.RpcError) as info:
                c.search("coffee", k=1)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        process.kill()


@pytest.mark.parametrize("method, data", [
    ("Search", b"\x0a\x02\xff\xfe"),  # query: two bytes that are not UTF-8
    ("Search", b"\x0a\x10ab"),  # query: 16 bytes announced, 2 sent
    ("BatchSearch", b"\x0a\x01q\x0a\x02\xc3\x28"),  # the second query not UTF-8
    ("Info", b"\xff\xff\xff"),  # a field number that never ends
])
def test_request_bytes_that_do_not_parse_get_invalid_argument(server, client, method, data):
    """Bytes no SearchService request parses from are the caller's error (INVALID_ARGUMENT, what failed to parse),
    not grpc's UNKNOWN "Unexpected DecodeError"; the server goes on."""
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        call = channel.unary_unary(f"/weir.v1.SearchService/{method}")  # raw bytes each way
        with pytest.raises(grpc.RpcError) as info:
            call(data, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert f"not a valid {method}Request message" in info.value.details()
    assert client.health() == "SERVING"


def test_explained_hits_carry_reasons_that_add_up_to_each_stage_score(client):
    """explain: a fusion's stages' shares and LTR's feature contributions, per hit, summing to the stage's score
    (float32 on the wire); the same hits as without explain; a pipeline that cannot explain answers without."""
    for pipeline, stage in (("hybrid", "hybrid"), ("bm25>>ltr", "ltr")):
        plain = client.search("coffee and liver disease", k=5, pipeline=pipeline)
        explained = client.search("coffee and liver disease", k=5, pipeline=pipeline, explain=True)
        assert [h.doc_id for h in explained.hits] == [h.doc_id for h in plain.hits]
        assert not any(h.reasons for h in plain.hits)
        for h in explained.hits:
            parts = [r for r in h.reasons if r.stage == stage]
            assert parts and sum(r.contribution for r in parts) == pytest.approx(h.stage_scores[stage], abs=1e-4)
            if stage == "ltr":  # five features, the bias, the rest
                assert [r.part for r in parts][-2:] == ["(bias)", "(other parts)"] and len(parts) == 7
    assert not any(h.reasons for h in client.search("coffee", k=3, explain=True).hits)  # bm25 has no parts
    batch = client.batch_search(["coffee and liver disease", "caffeine sleep"], k=3, pipeline="hybrid", explain=True)
    assert all(h.reasons for r in batch.results for h in r.hits)
