"""The gRPC stubs are generated from the proto, never edited by hand."""

from __future__ import annotations

from weir.service import stubs
from tests.conftest import ROOT


def test_generated_stubs_are_up_to_date(tmp_path):
    stubs.generate(tmp_path)
    for name in ("search_pb2.py", "search_pb2_grpc.py"):
        assert (tmp_path / "weir" / "v1" / name).read_text() == (ROOT / "weir" / "v1" / name).read_text(), \
            f"weir/v1/{name} is stale: run `make stubs`"
