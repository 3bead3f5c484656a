"""weir: retrieval and reranking with learned term weighting.

The public API, five names for the whole flow (the rest is in the subpackages, one floor each; ARCHITECTURE.md)::

    import weir

    weir.build_index("../shared/collections/beir-scifact", "indexes/scifact", components=("bm25", "dense"))
    index = weir.Index("indexes/scifact")
    run = weir.pipeline("hybrid>>ltr", index).search(weir.read_topics("queries.tsv"), k=10)
    print(weir.evaluate(run, weir.read_qrels("qrels.txt")))           # {'nDCG@10': ..., 'R@100': ...}

    with weir.SearchClient("127.0.0.1:50051") as client:               # a running `weir serve`
        answer = client.search("statins and heart disease", k=5, pipeline="hybrid>>ltr")

Names are imported when first used, so ``import weir`` is cheap and loads no model, JVM or torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from weir.core.provenance import weir_version

__version__ = weir_version()

# public name -> the module that owns it
_API = {
    "Document": "weir.core.types", "Query": "weir.core.types", "Hit": "weir.core.types", "Run": "weir.core.types",
    "InputError": "weir.core.types",
    "read_topics": "weir.core.trec", "read_qrels": "weir.core.trec",
    "build_index": "weir.indexer.build",
    "Index": "weir.indexer.index_dir",
    "pipeline": "weir.ranker.registry",
    "PipelineOptions": "weir.ranker.options",
    "evaluate": "weir.evaluation.measures",
    "SearchClient": "weir.service.client",
}
__all__ = sorted(_API) + ["__version__"]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from weir.core.trec import read_qrels, read_topics
    from weir.core.types import Document, Hit, InputError, Query, Run
    from weir.evaluation.measures import evaluate
    from weir.indexer.build import build_index
    from weir.indexer.index_dir import Index
    from weir.ranker.options import PipelineOptions
    from weir.ranker.registry import pipeline
    from weir.service.client import SearchClient


def __getattr__(name: str):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'weir' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
