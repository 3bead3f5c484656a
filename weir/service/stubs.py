"""The Python stubs generated from ``proto/weir/v1/search.proto`` (into ``weir/v1/``, by ``make stubs``).

``python -m weir.service.stubs [OUT_DIR]`` generates them; the Makefile, the Dockerfile and the tests use this one recipe.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (proto/ and the generated weir/v1/)
PROTO_ROOT = ROOT / "proto"
PROTO = PROTO_ROOT / "weir" / "v1" / "search.proto"


def generate(out: Path = ROOT) -> None:
    """Run protoc (from grpcio-tools, so the stubs match the pinned grpcio/protobuf) on the service contract."""
    from grpc_tools import protoc

    args = ["protoc", f"-I{PROTO_ROOT}", f"--python_out={out}", f"--grpc_python_out={out}", f"--pyi_out={out}", str(PROTO)]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTO}")
    (out / "weir" / "v1" / "__init__.py").write_text('"""Generated from proto/weir/v1 by `make stubs`."""\n')


try:
    from weir.v1 import search_pb2, search_pb2_grpc  # noqa: F401
except ImportError:  # pragma: no cover - only before `make stubs`
    if __name__ != "__main__":
        raise ImportError("the gRPC stubs are not generated: run `make stubs` "
                          "(or `python -m weir.service.stubs`) in the weir checkout") from None


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
