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

    def module(self, layer: int, part: str) -> torch.nn.Module:
        """The module whose output holds ``part`` (``"k"``: keys before rotary, ``"v"``: values)."""
        m = self.layers[layer]
        if self.family == "separate":
            return getattr(m, f"{part}_proj")
        return m.query_key_value if self.family == "neox" else m.c_attn

    def indices(self, part: str) -> torch.Tensor:
        """``[n_kv · d_head]``: where head ``h``'s coordinate ``j`` of ``part`` sits in the last dimension
        of its module's output (entry ``h · d_head + j``): the identity for separate projections;
        GPT-NeoX fuses ``[head][q, k, v][d_head]``; GPT-2 ``[q, k, v][head][d_head]``."""
        H, dk = self.n_kv_heads, self.head_dim
        slot = {"k": 1, "v": 2}[part]  # position in the fused q, k, v layouts
        h, j = torch.arange(H)[:, None], torch.arange(dk)[None, :]
        if self.family == "separate":
            idx = h * dk + j
        elif self.family == "neox":
            idx = h * 3 * dk + slot * dk + j
        else:
            idx = slot * H * dk + h * dk + j
        return idx.reshape(-1)

    def projection(self, layer: int, part: str) -> tuple[torch.nn.Module, Callable[[torch.Tensor], torch.Tensor]]:
        """The module whose output holds ``part`` and ``output [B,T,*] -> [B,T,n_kv,d_head]``."""
        idx, H, dk = self.indices(part), self.n_kv_heads, self.head_dim
        return self.module(layer, part), lambda out: out[..., idx.to(out.device)].reshape(*out.shape[:2], H, dk)

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
