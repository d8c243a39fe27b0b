r"""One causal single-head softmax-attention layer: the model Paper II (arXiv 2512.22473, §5.2) analyses.

.. math::

    q_i = W_Q x_i,\quad k_j = W_K x_j,\quad v_j = W_V x_j,\qquad
    s_{ij} = q_i \cdot k_j / \sqrt{d_{qk}},\quad \alpha_{ij} = \mathrm{softmax}_{j \le i}(s_{ij}),\\
    o_i = \sum_{j \le i} \alpha_{ij} v_j,\qquad \text{logits}_i = W_O\, o_i .

No residual stream, no norm, no MLP, no biases: the smallest model in which the routing law
(``windtunnel.routing``) is the whole story.  For tasks with real-valued inputs (``sticky``) the
input ``x_t`` is the feature vector itself (``d_model = n_features``), as in the paper; for token
tasks it is a learned embedding of width ``d_model``.  Weights start ``N(0, init_std²)``
(the paper: 0.1).

It is not a table row (its width is fixed by the input, so it cannot be capacity-matched), hence
not in the registry; it is built directly: ``AttentionLayer(AttentionLayerConfig(...))`` or
:func:`attention_layer`.  Hook names match the transformer's, so every attention analysis runs on
both: ``blocks.0.attn.hook_q|hook_k|hook_v`` ``[B,T,1,d]``, ``blocks.0.attn.hook_scores`` and
``blocks.0.attn.hook_pattern`` ``[B,1,T,T]``, ``blocks.0.attn.hook_z`` ``[B,T,1,d_v]``.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch import nn

from .base import HookPoint, ModelConfig, WindTunnelModel, _check, _pos_int, causal_attention
from ..errors import InvalidValue


@dataclass
class AttentionLayerConfig(ModelConfig):
    """Widths of :class:`AttentionLayer` (Paper II: inputs 20, queries/keys 10, values 15)."""

    arch: str = "attention_layer"
    d_model: int = 20
    d_qk: int = 10
    d_v: int = 15
    init_std: float = 0.1

    def validate(self) -> None:
        super().validate()
        for name in ("d_model", "d_qk", "d_v"):
            _check(_pos_int(getattr(self, name)), name, "a positive integer")
        _check(isinstance(self.init_std, (int, float)) and self.init_std > 0, "init_std", "a positive number")
        if self.n_features > 0:
            _check(self.d_model == self.n_features, "d_model", f"equal to n_features={self.n_features} (raw inputs)")


class SingleHeadAttention(nn.Module):
    """The attention of :class:`AttentionLayer`: ``x [B,T,d] -> o [B,T,d_v]`` with hooks."""

    def __init__(self, cfg: AttentionLayerConfig) -> None:
        super().__init__()
        self.d_qk = cfg.d_qk
        self.W_Q = nn.Linear(cfg.d_model, cfg.d_qk, bias=False)
        self.W_K = nn.Linear(cfg.d_model, cfg.d_qk, bias=False)
        self.W_V = nn.Linear(cfg.d_model, cfg.d_v, bias=False)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_scores, self.hook_pattern, self.hook_z = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        q = self.hook_q(self.W_Q(x)[:, :, None])  # [B,T,1,d_qk]: one head, the transformer's layout
        k = self.hook_k(self.W_K(x)[:, :, None])
        v = self.hook_v(self.W_V(x)[:, :, None])
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B,1,T,d]
        hooked = any(h.hooked for h in (self.hook_q, self.hook_k, self.hook_v, self.hook_scores, self.hook_pattern))
        if hooked:  # the explicit softmax, so scores and pattern exist to be observed or patched
            scores = self.hook_scores(qh @ kh.transpose(-1, -2) / math.sqrt(self.d_qk))
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            pattern = self.hook_pattern(torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1))  # [B,1,T,T]
            z = pattern @ vh
        else:  # fused kernel, identical up to float rounding (T = 2000 full-batch training is its use)
            z = causal_attention(qh, kh, vh)
        return self.hook_z(z.transpose(1, 2))[:, :, 0]  # hook_z: [B,T,1,d_v]


class _Layer(nn.Module):
    def __init__(self, cfg: AttentionLayerConfig) -> None:
        super().__init__()
        self.attn = SingleHeadAttention(cfg)


class AttentionLayer(WindTunnelModel):
    """Paper II's single attention layer; see the module docstring."""

    def __init__(self, config: AttentionLayerConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.d_model) if config.n_features == 0 else None
        self.blocks = nn.ModuleList([_Layer(config)])
        self.W_O = nn.Linear(config.d_v, config.n_classes, bias=False)
        for p in self.parameters():
            nn.init.normal_(p, std=config.init_std)
        self._finish_init()

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        if self.embed is None:
            if features is None:
                raise InvalidValue(f"invalid features: this model reads features [B,T,{self.config.n_features}]")
            x = features.to(self.W_O.weight.dtype)
        else:
            x = self.embed(tokens)
        return self.W_O(self.blocks[0].attn(x))

    @contextmanager
    def bypass_layer(self, layer: int) -> Iterator["AttentionLayer"]:
        raise InvalidValue("invalid bypass_layer: a single attention layer has no residual stream to bypass")
        yield self  # pragma: no cover


def attention_layer(task: Any, **overrides: Any) -> AttentionLayer:
    """:class:`AttentionLayer` sized for ``task`` (raw features when it has them)."""
    fields: dict[str, Any] = {"vocab_size": task.vocab_size, "n_classes": task.n_classes, "n_features": task.n_features}
    if task.n_features > 0:
        fields["d_model"] = task.n_features
    return AttentionLayer(AttentionLayerConfig(**{**fields, **overrides}))
