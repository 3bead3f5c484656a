"""Build hook: a wheel of weir carries the gRPC stubs generated from ``proto/`` (``weir/v1``, never committed).

Everything else about the package is declared in ``pyproject.toml``. An editable install (``make install``) leaves
the stubs to ``make stubs``, which writes them into the checkout; a regular ``pip install .`` generates them here,
with the grpcio-tools pinned in ``[build-system] requires`` (the version the runtime pins too).
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        from grpc_tools import protoc

        root = Path(__file__).resolve().parent
        proto_root = root / "proto"
        out = Path(self.build_lib)
        proto = proto_root / "weir" / "v1" / "search.proto"
        args = ["protoc", f"-I{proto_root}", f"--python_out={out}", f"--grpc_python_out={out}", f"--pyi_out={out}",
                str(proto)]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {proto}")
        (out / "weir" / "v1" / "__init__.py").write_text('"""Generated from proto/weir/v1 at build time."""\n')


setup(cmdclass={"build_py": BuildPyWithStubs})
