"""The interface every inference backend implements (:class:`Forward`), the reference backend (:class:`TorchForward`,
the model as Hugging Face runs it) and the inputs they take (:func:`feed`). Backends and their choice:
:mod:`weir.core.inference`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
SEQUENCE_AXES = {"last_hidden_state": (1,), "attentions": (2, 3)}  # (B, L, dim), (B, K, L, L)


def feed(enc) -> dict[str, np.ndarray]:
    """A tokenizer's output (numpy or torch) as the int64 inputs of a forward pass, ``token_type_ids`` added as zeros
    where the tokenizer gave none."""
    out = {k: np.asarray(enc[k].cpu() if hasattr(enc[k], "cpu") else enc[k], dtype=np.int64)
           for k in ("input_ids", "attention_mask")}
    types = enc.get("token_type_ids") if hasattr(enc, "get") else None
    out["token_type_ids"] = (np.zeros_like(out["input_ids"]) if types is None else
                             np.asarray(types.cpu() if hasattr(types, "cpu") else types, dtype=np.int64))
    return out


class Forward:
    """One backend's forward pass: ``forward(inputs) -> {"last_hidden_state": ..., ["attentions": ...]}``."""

    backend: str
    dim: int
    heads: tuple[tuple[int, int], ...]

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"backend": self.backend}

    @staticmethod
    def per_row(inputs: dict[str, np.ndarray], rows) -> dict[str, np.ndarray]:
        """``inputs`` run one row at a time, each cut to its real length, by ``rows`` (a list of single-row inputs ->
        their outputs), and put back in place (zeros at padded positions): what a row gets cannot depend on its
        batch. A single unpadded row is passed on as it is."""
        mask = np.asarray(inputs["attention_mask"])
        batch, width = mask.shape
        lengths = mask.sum(1)
        if not (mask == (np.arange(width) < lengths[:, None])).all():
            raise ValueError("a batch run one input at a time must be right-padded (its mask a run of ones, then "
                             "zeros)")
        if batch == 1 and lengths[0] == width:
            return rows([inputs])[0]
        done = rows([{k: inputs[k][i:i + 1, :n] for k in INPUTS} for i, n in enumerate(lengths.tolist())])
        out: dict[str, np.ndarray] = {}
        for i, row in enumerate(done):
            for name, value in row.items():
                if name not in out:
                    shape = [batch, *value.shape[1:]]
                    for axis in SEQUENCE_AXES[name]:
                        shape[axis] = width
                    out[name] = np.zeros(shape, dtype=value.dtype)
                out[name][(slice(i, i + 1), *(slice(0, d) for d in value.shape[1:]))] = value
        return out


class TorchForward(Forward):
    """The Hugging Face model (eager attention when attentions are read), fp16 on a GPU, fp32 otherwise."""

    backend = "torch"

    def __init__(self, model, device: str, *, heads: Sequence[tuple[int, int]] = (), fp16: bool | None = None):
        self.model, self.device, self.heads = model, device, tuple(map(tuple, heads))
        self.fp16 = device.startswith("cuda") if fp16 is None else fp16
        model.to(device)
        if self.fp16:
            model.half()
        model.eval()
        if self.heads and getattr(model.config, "_attn_implementation", "eager") != "eager":
            model.set_attn_implementation("eager")  # SDPA does not give attention probabilities
        self.dim = int(model.config.hidden_size)

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        with torch.inference_mode():
            x = {k: torch.from_numpy(np.ascontiguousarray(inputs[k])).to(self.device) for k in INPUTS}
            out = self.model(**x, output_attentions=bool(self.heads))
            result = {"last_hidden_state": out.last_hidden_state.float().cpu().numpy()}
            if self.heads:
                result["attentions"] = torch.stack([out.attentions[layer][:, head] for layer, head in self.heads],
                                                   dim=1).float().cpu().numpy()
        return result
