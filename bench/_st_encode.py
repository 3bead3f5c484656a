"""Run by bench/encode.py in a virtual environment of its own (``--st-python``): sentence-transformers' onnx and
openvino backends need optimum, which pins a transformers older than weir's. Encodes the texts of a JSON file with one
backend after a warm-up, and writes the embeddings, the passage seconds and the per-query milliseconds to an .npz.

    python bench/_st_encode.py MODEL_DIR BACKEND IN.json OUT.npz BATCH_SIZE MAX_LENGTH
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def main() -> None:
    model_dir, backend, source, out, batch_size, max_length = sys.argv[1:7]
    from sentence_transformers import SentenceTransformer

    kind, _, quant = backend.partition("-")
    kwargs = {}
    if quant == "qint8":
        from sentence_transformers import (export_dynamic_quantized_onnx_model,
                                           export_static_quantized_openvino_model)

        if kind == "onnx":  # the quantized file is made once from the model, as its documentation shows
            export_dynamic_quantized_onnx_model(SentenceTransformer(model_dir, backend="onnx", device="cpu"),
                                                "avx512_vnni", model_dir)
            kwargs["model_kwargs"] = {"file_name": "onnx/model_qint8_avx512_vnni.onnx"}
        else:
            export_static_quantized_openvino_model(SentenceTransformer(model_dir, backend="openvino", device="cpu"),
                                                   None, model_dir)
            kwargs["model_kwargs"] = {"file_name": "openvino/openvino_model_qint8_quantized.xml"}
    model = SentenceTransformer(model_dir, device="cpu", backend=kind, **kwargs)
    model.max_seq_length = int(max_length)
    data = json.loads(open(source, encoding="utf-8").read())
    texts, queries = data["texts"], data["queries"]
    model.encode(texts[:int(batch_size)], batch_size=int(batch_size))  # warm-up
    start = time.perf_counter()
    embeddings = model.encode(texts, batch_size=int(batch_size), normalize_embeddings=True)
    seconds = time.perf_counter() - start
    query_ms = []
    for q in queries:
        start = time.perf_counter()
        model.encode([q], normalize_embeddings=True)
        query_ms.append((time.perf_counter() - start) * 1000)
    np.savez(out, embeddings=np.asarray(embeddings, dtype=np.float32), seconds=seconds, query_ms=np.asarray(query_ms))


if __name__ == "__main__":
    main()
