"""Where a Hugging Face causal LM keeps its attention: the three projection layouts windtunnel reads.

Separate ``k_proj``/``v_proj`` (Llama, Mistral, Qwen2, SmolLM, ...), fused ``query_key_value``
(GPT-NeoX / Pythia) and GPT-2's ``c_attn``.  ``models.hf`` reads its keys through it, and
``llm.signatures`` its keys and values; others are refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import InvalidValue

__all__ = ["AttentionLayout", "attention_layout"]


@dataclass
class AttentionLayout:
    """How to read one family's attention: key vectors per layer and a value reader per layer."""

    family: str
    layers: list[torch.nn.Module]
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int

    def key_columns(self, layer: int) -> torch.Tensor:
        """``[n_kv, d_k, d_model]``: the columns of each key head's ``W_K`` (float64)."""
        m, H, dk, d = self.layers[layer], self.n_kv_heads, self.head_dim, self.d_model
        if self.family == "separate":
            return m.k_proj.weight.detach().double().view(H, dk, d)
        if self.family == "neox":
            return m.query_key_value.weight.detach().double().view(H, 3, dk, d)[:, 1]
        W = m.c_attn.weight.detach().double()  # gpt2 Conv1D: [d, 3d], x @ W
        return W[:, d:2 * d].T.reshape(H, dk, d)

    def projection(self, layer: int, part: str) -> tuple[torch.nn.Module, Callable[[torch.Tensor], torch.Tensor]]:
        """The module whose output holds ``part`` (``"k"``: keys before rotary, ``"v"``: values) and
        ``output [B,T,*] -> [B,T,n_kv,d_head]``."""
        m, H, dk, d = self.layers[layer], self.n_kv_heads, self.head_dim, self.d_model
        slot = {"k": 1, "v": 2}[part]  # position in the fused q, k, v layouts
        if self.family == "separate":
            return getattr(m, f"{part}_proj"), lambda out: out.view(*out.shape[:2], H, dk)
        if self.family == "neox":
            return m.query_key_value, lambda out: out.view(*out.shape[:2], H, 3, dk)[:, :, :, slot]
        return m.c_attn, lambda out: out[..., slot * d:(slot + 1) * d].reshape(*out.shape[:2], H, dk)

    def key_module(self, layer: int) -> tuple[torch.nn.Module, Callable[[torch.Tensor], torch.Tensor]]:
        """``projection(layer, "k")``: the keys before rotary."""
        return self.projection(layer, "k")

    def value_module(self, layer: int) -> tuple[torch.nn.Module, Callable[[torch.Tensor], torch.Tensor]]:
        """``projection(layer, "v")``: the values."""
        return self.projection(layer, "v")


def attention_layout(model: torch.nn.Module) -> AttentionLayout:
    """Find the attention modules of an HF causal LM, in layer order (``InvalidValue`` if unknown)."""
    cfg = model.config
    layers: list[torch.nn.Module] = []
    family = None
    for _, m in model.named_modules():
        f = ("separate" if hasattr(m, "k_proj") and hasattr(m, "v_proj") else
             "neox" if hasattr(m, "query_key_value") else
             "gpt2" if hasattr(m, "c_attn") else None)
        if f is not None:
            if family not in (None, f):
                raise InvalidValue(f"invalid model: mixed attention layouts ({family}, {f}) are not supported")
            family = f
            layers.append(m)
    if not layers:
        raise InvalidValue(f"invalid model: no attention projections found in {type(model).__name__} "
                           "(supported: k_proj/v_proj, query_key_value, c_attn)")
    d = int(getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd"))
    H = int(getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head"))
    kv = int(getattr(cfg, "num_key_value_heads", None) or H) if family == "separate" else H
    dh = int(getattr(cfg, "head_dim", None) or d // H)
    return AttentionLayout(family, layers, H, kv, dh, d)
