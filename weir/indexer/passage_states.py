"""The ``attention`` index component: each passage's token states, as the late-interaction attention reranker reads
them (:mod:`weir.ranker.rerankers.relevance_attention`), written by the document pass
(:mod:`weir.indexer.document_pass`) and memory-mapped at query time.

A passage's states are the backbone's last hidden states of its first window (``[CLS]``, its first word pieces,
``[SEP]``; what a tokenizer truncating the passage's own text at the pass's length reads), each L2-normalized. They are
stored as int8 with one scale per state (symmetric: the state's largest magnitude over 127), 388 bytes a word piece
at width 384 against 768 in float16: measured on SciFact (BM25 top 20) and DL 2019 (BM25 top 100) the reranker's
nDCG@10 is the same to 0.0002 either way (``research/attention_states.py``). :func:`quantize` is applied the same
way to states computed at query time, so that a reranker scores alike with or without the component.

Files: ``states.i8`` (int8 (tokens, dim), raw), ``scales.f32`` (float32 (tokens,)), ``offsets.npy`` (int64 (passages
+ 1,): passage ``i`` owns states ``offsets[i]:offsets[i + 1]``), ``docids.txt`` (the passages' collection ids, one a
line, in row order) and ``states.json`` (shape, backbone, input).

Why by hand: the states are ragged (a passage's number of word pieces) and read a candidate list at a time by row; a
faiss or numpy ``.npy`` store would hold them padded or need the shape before the first passage is written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from weir.core.strings import StringTable
from weir.core.types import InputError

DIRECTORY = "attention"
FORMAT = 1
SPEC = "states.json"


def quantize(states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 (L, dim), float32 (L,) scales) of float states (L, dim): each row over its largest magnitude times 127."""
    states = np.asarray(states, dtype=np.float32)
    scales = np.maximum(np.abs(states).max(axis=-1), 1e-12).astype(np.float32) / np.float32(127)
    codes = np.clip(np.rint(states / scales[:, None]), -127, 127).astype(np.int8)
    return codes, scales


def dequantize(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    return codes.astype(np.float32) * scales[:, None]


def quantized(states: np.ndarray) -> np.ndarray:
    """``states`` as the component stores them (float32, the int8 rounding applied)."""
    return dequantize(*quantize(states))


class StatesWriter:
    """Appends passages' states to a component directory, one passage at a time (nothing is held but the offsets)."""

    def __init__(self, out: Path, dim: int, describe: dict):
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.dim, self.describe = dim, describe
        self._states = open(self.out / "states.i8", "wb")
        self._scales = open(self.out / "scales.f32", "wb")
        self._docids = open(self.out / "docids.txt", "w", encoding="utf-8")
        self.offsets = [0]

    def add(self, docid: str, states: np.ndarray) -> None:
        if states.ndim != 2 or states.shape[1] != self.dim:
            raise ValueError(f"states of {docid!r} have shape {states.shape}, not (n, {self.dim})")
        self.add_quantized(docid, *quantize(states))

    def add_quantized(self, docid: str, codes: np.ndarray, scales: np.ndarray) -> None:
        """A passage's states as :func:`quantize` gave them."""
        if "\n" in docid:
            raise InputError(f"a document id holds a newline: {docid!r}")
        self._states.write(codes.tobytes())
        self._scales.write(scales.tobytes())
        self._docids.write(docid + "\n")
        self.offsets.append(self.offsets[-1] + len(codes))

    def close(self) -> dict:
        """Finish the files; return the manifest's entry for the component."""
        for f in (self._states, self._scales, self._docids):
            f.close()
        np.save(self.out / "offsets.npy", np.asarray(self.offsets, dtype=np.int64))
        passages, tokens = len(self.offsets) - 1, self.offsets[-1]
        spec = {"format": FORMAT, "passages": passages, "tokens": tokens, "dim": self.dim, "precision": "int8",
                "scale": "float32 per state: its largest magnitude / 127", **self.describe}
        (self.out / SPEC).write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
        stored = tokens * (self.dim + 4)
        return {"type": "passage-states", **spec,
                "bytes_per_passage": round(stored / passages, 1) if passages else 0.0,
                "mean_states_per_passage": round(tokens / passages, 2) if passages else 0.0}


class PassageStates:
    """An ``attention`` component opened: :meth:`get` gives candidates' states, read from the memory-mapped files."""

    def __init__(self, path: Path):
        self.path = Path(path)
        spec_path = self.path / SPEC
        if not spec_path.is_file():
            raise InputError(f"{self.path}: not a passage states component (no {SPEC})")
        self.spec = json.loads(spec_path.read_text(encoding="utf-8"))
        if self.spec.get("format") != FORMAT:
            raise InputError(f"{self.path}: passage states format {self.spec.get('format')!r}, this weir reads "
                             f"{FORMAT}; rebuild the component (`weir index upgrade --with attention`)")
        tokens, dim = int(self.spec["tokens"]), int(self.spec["dim"])
        self.dim = dim
        self.codes = np.memmap(self.path / "states.i8", dtype=np.int8, mode="r", shape=(tokens, dim)) if tokens \
            else np.zeros((0, dim), np.int8)
        self.scales = np.memmap(self.path / "scales.f32", dtype=np.float32, mode="r", shape=(tokens,)) if tokens \
            else np.zeros(0, np.float32)
        self.offsets = np.load(self.path / "offsets.npy", mmap_mode="r")
        self.docids = StringTable.read(self.path / "docids.txt")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def get(self, docids: Sequence[str]) -> list[np.ndarray | None]:
        """Each passage's states, float32 (L, dim) (None for a passage the component lacks)."""
        rows = self.docids.find(list(docids))
        out: list[np.ndarray | None] = []
        for r in rows:
            if r < 0:
                out.append(None)
                continue
            a, b = int(self.offsets[r]), int(self.offsets[r + 1])
            out.append(dequantize(np.asarray(self.codes[a:b]), np.asarray(self.scales[a:b])))
        return out


class ShardStates:
    """The passage states of every shard of a shard set, read as one component (a reranker over the shards'
    candidates): a passage's states from the shard that holds it."""

    def __init__(self, shards: Sequence[PassageStates]):
        self.shards = list(shards)
        self.spec = self.shards[0].spec

    def __len__(self) -> int:
        return sum(len(s) for s in self.shards)

    def get(self, docids: Sequence[str]) -> list[np.ndarray | None]:
        out: list[np.ndarray | None] = [None] * len(docids)
        for shard in self.shards:
            missing = [i for i, s in enumerate(out) if s is None]
            if not missing:
                break
            for i, states in zip(missing, shard.get([docids[i] for i in missing])):
                out[i] = states
        return out
