# weir: `make demo` sets everything up, indexes a real collection, evaluates it and serves it over gRPC;
# `make test` runs the test suite. Both create or refresh .venv by themselves (a no-op when nothing changed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.weir-installed
STUBS := weir/v1/__init__.py weir/v1/search_pb2.py weir/v1/search_pb2_grpc.py weir/v1/search_pb2.pyi
COLLECTION ?= ../shared/collections/beir-scifact
PORT ?= 50051

.PHONY: install stubs test test-fast reproduce demo bench clean

install: $(STAMP) $(STUBS)

# torch first, from its CPU wheel (a plain `torch` would pull a multi-GB CUDA build), then weir with exact pins.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
	touch $@

stubs: $(STUBS)

# gRPC stubs are generated from the proto by the pinned grpcio-tools, never edited by hand.
$(STUBS) &: proto/weir/v1/search.proto $(STAMP)
	$(PY) -m weir.service.stubs

# the architecture contract (import-linter, configured in pyproject.toml) first: it takes seconds; then every test,
# the data tests included (CI: WEIR_REQUIRE_DATA=1 makes them fail instead of skip without ../shared), slowest listed
test: install
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -m "not reproduce" --durations=25

# the published figures reproduced in fp32 on whole collections (SciFact dense, DL 2019 attention): minutes each;
# `make test` checks the same code paths on smaller collections with the int8 default
reproduce: install
	WEIR_REQUIRE_DATA=1 $(PY) -m pytest -q -m reproduce --durations=10

# the tier for the minute before a commit: no shared collection, no Ray, no training run, no multi-thousand-call load
test-fast: install
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -m "not data and not slow" --durations=10

demo: install
	COLLECTION="$(COLLECTION)" PORT="$(PORT)" PY="$(PY)" bash scripts/demo.sh

bench: install
	$(PY) bench/sparse_throughput.py
	$(PY) bench/grpc_latency.py

clean:
	rm -rf $(VENV) weir/v1 indexes runs .pytest_cache
