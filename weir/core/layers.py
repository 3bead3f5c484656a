"""One BERT layer computed by hand (eager attention, as Hugging Face computes it), and the additive mask it takes.

Written out rather than called through Hugging Face because three things need it: the ONNX export
(:mod:`weir.core.inference`: an eager graph with no traced mask creation, attention probabilities as outputs),
training and cross-validation of the attention rerankers (only the trained top layers run, over cached lower-layer
states), and the top layer's attention score, which needs its attention probabilities only (``output=False`` skips
the value, output and feed-forward parts).
"""

from __future__ import annotations

from collections.abc import Sequence


def extended_mask(attention_mask, dtype):
    """(B, L) 0/1 mask -> the additive (B, 1, 1, L) mask of eager attention."""
    import torch

    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def layer_forward(layer, hidden, add_mask, *, output: bool = True):
    """One BERT layer by hand (eager attention, as Hugging Face computes it): ``(hidden out, attention probs
    (B, heads, L, L))``. With ``output=False`` only the attention probabilities are computed."""
    import torch

    sa = layer.attention.self
    B, L, _ = hidden.shape
    shape = (B, L, sa.num_attention_heads, sa.attention_head_size)
    q = sa.query(hidden).view(shape).transpose(1, 2)
    k = sa.key(hidden).view(shape).transpose(1, 2)
    probs = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * sa.scaling + add_mask, dim=-1)
    if not output:
        return None, probs
    v = sa.value(hidden).view(shape).transpose(1, 2)
    ctx = torch.matmul(sa.dropout(probs), v).transpose(1, 2).reshape(B, L, -1)
    attn_out = layer.attention.output(ctx, hidden)
    return layer.output(layer.intermediate(attn_out), attn_out), probs


def export_graph(model, heads: Sequence[tuple[int, int]] = ()):
    """The BERT encoder as an exportable module (:mod:`weir.core.inference`): embeddings, then each layer by hand with
    eager attention; outputs the last hidden states and, for ``heads`` ((layer, head) pairs), their attention
    probabilities stacked (B, K, L, L)."""
    import torch

    class Graph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            positions = torch.cumsum(torch.ones_like(input_ids), 1) - 1
            hidden = self.model.embeddings(input_ids=input_ids, token_type_ids=token_type_ids,
                                           position_ids=positions)
            add = extended_mask(attention_mask, hidden.dtype)
            wanted: dict[int, list[int]] = {}
            for layer, head in heads:
                wanted.setdefault(layer, []).append(head)
            selected = {}
            for i, layer in enumerate(self.model.encoder.layer):
                hidden, probs = layer_forward(layer, hidden, add)
                for head in wanted.get(i, []):
                    selected[(i, head)] = probs[:, head]
            if not heads:
                return hidden
            return hidden, torch.stack([selected[tuple(h)] for h in heads], dim=1)

    return Graph().eval()
