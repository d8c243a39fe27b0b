r"""A small causal transformer (nanoGPT-style), the papers' reference architecture.

Per block (pre-norm, RMSNorm, bias-free linears):

.. math::

    a &= \mathrm{Attn}(\mathrm{RMSNorm}(x)),\quad x \leftarrow x + a \\
    m &= W_2\,\mathrm{GELU}(W_1\,\mathrm{RMSNorm}(x)),\quad x \leftarrow x + m

(``mlp="swiglu"``: :math:`m = W_2\,(\mathrm{SiLU}(W_g u) \odot W_1 u)`, :math:`u = \mathrm{RMSNorm}(x)`,
the gated block of Llama-family models; the papers' models use GELU.  ``norm="layer"`` puts
LayerNorm, with its bias, where RMSNorm stands, as the papers' own code does)

with causal multi-head attention, per head ``h``

.. math::

    A^h = \mathrm{softmax}\!\left(\frac{q^h k^{h\top}}{\sqrt{d_h}} + M_{\text{causal}}\right),\quad
    z^h = A^h v^h,\quad a = W_O\,[z^1;\dots;z^H].

Grouped-query attention (``n_kv_heads < n_heads``, the Llama family's layout): the query heads
fall into ``n_kv_heads`` groups of ``n_heads / n_kv_heads`` consecutive heads, each group sharing
one key and one value head; ``n_kv_heads = 1`` is multi-query attention, ``None`` (the default)
full multi-head attention.  The qkv projection then has ``(n_heads + 2·n_kv_heads)·d_h`` rows.

Frozen projections (``frozen``: ``"qk"`` and / or ``"v"``): those rows of every block's qkv
projection keep their initial values for the whole of training (the forward reads them from a
buffer filled at initialisation, so no optimiser, weight decay included, moves them).  It
separates what each inference primitive needs *learned*: routing (``W_Q, W_K``: where attention
goes) or the values it moves (``W_V``) — Paper II's EM reading of attention, tested by training.

Uniform attention (``uniform_attn``: chosen layers): the query is replaced by zeros, so every
score is 0 and each position attends equally to itself and everything before it (``z_t`` is the
mean of ``v_{≤t}``); ``W_Q`` and ``W_K`` are still there (the width stays the routed model's) but
receive no gradient.  Content-based routing is gone; value aggregation is kept.

Positions: ``rotary`` (RoPE on q and k, default; no length limit), ``learned`` (absolute
embeddings added to the input, up to ``max_len``), ``alibi`` (a fixed distance penalty on the scores,
:math:`s_{h,ij} \mathrel{+}= -m_h (i - j)` with slopes :math:`m_h = 2^{-8h/H}`, ALiBi; no length limit)
or ``none`` (the causal mask alone carries order).  The output head is a separate
``Linear(d_model, n_classes)`` (outputs are classes, so tying is impossible).

The fast path uses ``scaled_dot_product_attention(is_causal=True)`` (``causal_attention``: the
backend measured faster for the sequence length); the explicit softmax path
(identical up to float rounding) runs whenever q/k/v/pattern are hooked, a head is ablated or
``explicit_attention`` is set.  The papers' bijection model is the default: 6 layers, 6 heads,
d_model 192, d_ff 768 (2.67M parameters on bijection V=20).

Hook points: ``hook_embed`` (input embedding, learned positions included), per block ``l``:
``blocks.{l}.hook_resid_pre``, ``blocks.{l}.attn.hook_q|hook_k|hook_v`` ``[B,T,H,dh]`` (q, k after
rotary), ``blocks.{l}.attn.hook_scores`` ``[B,H,T,T]`` (pre-softmax :math:`q k^\top/\sqrt{d_h}`, before the
causal mask; ALiBi's distance penalty included), ``blocks.{l}.attn.hook_pattern`` ``[B,H,T,T]`` (post-softmax), ``blocks.{l}.attn.hook_z``
``[B,T,H,dh]``, ``blocks.{l}.hook_attn_out``, ``blocks.{l}.hook_mlp_out``, ``blocks.{l}.hook_resid_post``;
``hook_final`` (after the final norm).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .base import (Block, HookPoint, InputEmbedding, ModelConfig, RMSNorm, WindTunnelModel, _check, _pos_int,
                   causal_attention)
from .catalog import Arch, register_arch
from ..errors import InvalidValue, is_int

POSITIONS = ("rotary", "learned", "alibi", "none")
NORMS = ("rms", "layer")
INITS = ("gpt2", "torch")
"""Initialisations of :class:`Transformer` (``TransformerConfig.init``)."""


def make_norm(cfg: "TransformerConfig") -> nn.Module:
    """The configured normalisation: RMSNorm (default) or LayerNorm (mean removed, bias kept)."""
    return RMSNorm(cfg.d_model, cfg.norm_eps) if cfg.norm == "rms" else nn.LayerNorm(cfg.d_model, cfg.norm_eps)
MLPS = ("gelu", "swiglu")
FROZEN = ("qk", "v")


@dataclass
class TransformerConfig(ModelConfig):
    """Hyper-parameters of :class:`Transformer` (``d_ff=None`` means ``4 * d_model``)."""

    arch: str = "transformer"
    d_model: int = 192
    n_layers: int = 6
    n_heads: int = 6
    d_ff: int | None = None
    pos: str = "rotary"
    max_len: int = 512
    rope_base: float = 10000.0
    dropout: float = 0.0
    norm_eps: float = 1e-5
    #: ``"rms"`` (RMSNorm, no bias) or ``"layer"`` (LayerNorm with bias, as in GPT-2 and the papers' own code)
    norm: str = "rms"
    mlp: str = "gelu"
    #: layers whose attention sublayer is switched off (the block is ``x + mlp(norm(x))``): Paper I's
    #: HMM control trains with attention off in the top two layers
    attn_off: list[int] = field(default_factory=list)
    #: key/value heads (``None``: one per query head); fewer is grouped-query attention
    n_kv_heads: int | None = None
    #: projections kept at their initial values: ``"qk"`` (routing), ``"v"`` (values)
    frozen: list[str] = field(default_factory=list)
    #: layers whose attention is the causal mean (no content-based routing)
    uniform_attn: list[int] = field(default_factory=list)
    #: initial weights: ``"gpt2"`` (N(0, 0.02), residual projections N(0, 0.02/sqrt(2 n_layers)), as nanoGPT)
    #: or ``"torch"`` (each module's PyTorch default: linear maps uniform in ±1/sqrt(fan_in), embeddings
    #: N(0, 1) — what a model built from ``torch.nn`` modules and trained as it comes starts from)
    init: str = "gpt2"

    def validate(self) -> None:
        super().validate()
        _check(self.arch == "transformer", "arch", "'transformer'")
        _check(self.mlp in MLPS, "mlp", " | ".join(MLPS))
        _check(self.norm in NORMS, "norm", " | ".join(NORMS))
        _check(self.init in INITS, "init", " | ".join(INITS))
        _check(_pos_int(self.n_layers), "n_layers", "a positive integer")
        _check(_pos_int(self.n_heads), "n_heads", "a positive integer")
        _check(_pos_int(self.d_model) and self.d_model % self.n_heads == 0, "d_model",
               f"a positive multiple of n_heads={self.n_heads}")
        _check(self.d_ff is None or _pos_int(self.d_ff), "d_ff", "a positive integer or null")
        _check(self.pos in POSITIONS, "pos", " | ".join(POSITIONS))
        if self.pos == "rotary":
            _check(self.head_dim % 2 == 0, "d_model", "such that d_model / n_heads is even (rotary)")
        _check(_pos_int(self.max_len), "max_len", "a positive integer")
        _check(0.0 <= self.dropout < 1.0, "dropout", "in [0, 1)")
        _check(isinstance(self.attn_off, (list, tuple)) and all(
            is_int(l) and 0 <= l < self.n_layers for l in self.attn_off)
            and len(set(self.attn_off)) == len(self.attn_off), "attn_off",
            f"a list of distinct layer indices in [0, {self.n_layers - 1}]")
        _check(self.n_kv_heads is None or (_pos_int(self.n_kv_heads) and self.n_heads % self.n_kv_heads == 0),
               "n_kv_heads", f"null or a positive divisor of n_heads={self.n_heads}")
        _check(isinstance(self.uniform_attn, (list, tuple)) and all(
            is_int(l) and 0 <= l < self.n_layers for l in self.uniform_attn)
            and len(set(self.uniform_attn)) == len(self.uniform_attn), "uniform_attn",
            f"a list of distinct layer indices in [0, {self.n_layers - 1}]")
        _check(isinstance(self.frozen, (list, tuple)) and all(f in FROZEN for f in self.frozen)
               and len(set(self.frozen)) == len(self.frozen), "frozen", f"a list of distinct names from {', '.join(FROZEN)}")

    @property
    def kv_heads(self) -> int:
        """Key/value heads: ``n_kv_heads``, or ``n_heads`` (multi-head attention) when unset."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ff_dim(self) -> int:
        return 4 * self.d_model if self.d_ff is None else self.d_ff


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    r"""Rotary embedding (rotate-half form): :math:`x \cos\theta + \mathrm{rot}(x) \sin\theta`.

    ``x [B,T,H,dh]``; ``cos, sin [T,1,dh]``; pairs ``(x_i, x_{i+dh/2})`` rotate by
    :math:`\theta_{t,i} = t \cdot \text{base}^{-2i/d_h}`.
    """
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    """Causal multi-head (or grouped-query) self-attention with a fused bias-free qkv projection.

    Under grouped-query attention ``hook_k`` / ``hook_v`` see each key/value head repeated for every
    query head of its group (``[B,T,H,dh]``, as for multi-head attention), so every analysis reads
    one key per query head; ``Transformer.unrotated_keys`` returns the distinct key heads."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.n_kv_heads = cfg.kv_heads
        self.rotary = cfg.pos == "rotary"
        self.alibi = cfg.pos == "alibi"
        self.rope_base = cfg.rope_base
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, (cfg.n_heads + 2 * cfg.kv_heads) * cfg.head_dim, bias=False)
        # frozen rows are read from this copy of their initial values (``freeze_initial`` fills it)
        if not cfg.frozen:
            self.frozen_rows: torch.Tensor | None = None
        else:
            qk = (cfg.n_heads + cfg.kv_heads) * cfg.head_dim
            rows = torch.cat((torch.full((qk,), "qk" in cfg.frozen), torch.full((self.qkv.weight.shape[0] - qk,), "v" in cfg.frozen)))
            self.register_buffer("frozen_rows", rows)
            self.register_buffer("frozen_weight", torch.zeros_like(self.qkv.weight))
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_scores = HookPoint()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()
        #: per-head multiplier on z (``None``: no ablation); set by ``Transformer.ablate_head``
        self.head_mask: torch.Tensor | None = None
        #: force the explicit softmax path (for tests and analysis)
        self.explicit = False
        #: attend uniformly to the causal prefix (``TransformerConfig.uniform_attn``)
        self.uniform = False
        self._rope: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self._alibi: dict[tuple, torch.Tensor] = {}

    def freeze_initial(self) -> None:
        """Copy the current qkv weight into the frozen buffer (at initialisation)."""
        if self.frozen_rows is not None:
            self.frozen_weight.copy_(self.qkv.weight.detach())

    def weight(self) -> torch.Tensor:
        """The qkv projection in effect: the trained weight, its frozen rows at their initial values."""
        if self.frozen_rows is None:
            return self.qkv.weight
        return torch.where(self.frozen_rows[:, None], self.frozen_weight, self.qkv.weight)

    def rope(self, T: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin [T,1,dh]`` for positions ``0..T-1`` (cached per length/device/dtype)."""
        def tables() -> tuple[torch.Tensor, torch.Tensor]:
            half = self.head_dim // 2
            inv = self.rope_base ** (-torch.arange(half, device=device, dtype=torch.float32) / half)
            ang = torch.arange(T, device=device, dtype=torch.float32)[:, None] * inv[None]
            ang = torch.cat((ang, ang), dim=-1)[:, None, :]
            return ang.cos().to(dtype), ang.sin().to(dtype)

        if torch.compiler.is_compiling():  # traced into the compiled graph, which folds it to a constant
            return tables()
        key = (T, device, dtype, torch.is_inference_mode_enabled())  # an inference tensor cannot enter autograd
        if key not in self._rope:
            self._rope = {key: tables()}  # keep only the latest
        return self._rope[key]

    def alibi_bias(self, T: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        r"""``[H,T,T]``: :math:`-m_h (i - j)` on and below the diagonal, :math:`-\infty` above it, with
        :math:`m_h = 2^{-8h/H}` for heads :math:`h = 1..H` (cached per length/device/dtype)."""
        def table() -> torch.Tensor:
            H = self.n_heads
            slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, device=device, dtype=torch.float32) / H)
            pos = torch.arange(T, device=device, dtype=torch.float32)
            dist = (pos[None, :] - pos[:, None]).clamp(max=0)  # j - i ≤ 0 at and below the diagonal
            bias = slopes[:, None, None] * dist[None]
            causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
            return bias.masked_fill(~causal, float("-inf")).to(dtype)

        if torch.compiler.is_compiling():  # traced into the compiled graph, which folds it to a constant
            return table()
        key = (T, device, dtype, torch.is_inference_mode_enabled())  # an inference tensor cannot enter autograd
        if key not in self._alibi:
            self._alibi = {key: table()}  # keep only the latest
        return self._alibi[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        H, Hkv, dh = self.n_heads, self.n_kv_heads, self.head_dim
        q, k, v = F.linear(x, self.weight()).split((H * dh, Hkv * dh, Hkv * dh), dim=-1)
        q, k, v = q.view(B, T, H, dh), k.view(B, T, Hkv, dh), v.view(B, T, Hkv, dh)
        if self.rotary:
            cos, sin = self.rope(T, x.device, x.dtype)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if self.uniform:  # zero scores: softmax over the causal prefix is its mean
            q = torch.zeros_like(q)
        if Hkv != H:  # each key/value head serves its group of H / Hkv consecutive query heads
            k, v = k.repeat_interleave(H // Hkv, dim=2), v.repeat_interleave(H // Hkv, dim=2)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        explicit = (
            self.explicit
            or self.head_mask is not None
            or self.hook_pattern.hooked
            or self.hook_scores.hooked
            or self.hook_q.hooked
            or self.hook_k.hooked
            or self.hook_v.hooked
        )
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B,H,T,dh]
        p = self.dropout if self.training else 0.0
        if explicit:
            scores = (qh @ kh.transpose(-1, -2)) * (1.0 / math.sqrt(dh))  # [B,H,T,T]
            if self.alibi and not self.uniform:  # the penalty below the diagonal; the mask sets what lies above it
                scores = scores + self.alibi_bias(T, x.device, x.dtype).nan_to_num(neginf=0.0)
            scores = self.hook_scores(scores)
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            pattern = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
            pattern = self.hook_pattern(pattern)
            if p > 0:
                pattern = F.dropout(pattern, p)
            z = (pattern @ vh).transpose(1, 2)  # [B,T,H,dh]
            if self.head_mask is not None:
                z = z * self.head_mask.to(z.dtype)[:, None]
        elif self.alibi and not self.uniform:
            z = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=self.alibi_bias(T, x.device, x.dtype),
                                               dropout_p=p).transpose(1, 2)
        else:
            z = causal_attention(qh, kh, vh, dropout_p=p).transpose(1, 2)
        z = self.hook_z(z)
        return self.out_proj(z.reshape(B, T, d))


class MLPBlock(nn.Module):
    r""":math:`W_2\,\mathrm{GELU}(W_1 x)`, bias-free; gated (``gated=True``):
    :math:`W_2\,(\mathrm{SiLU}(W_g x) \odot W_1 x)` with ``fc`` holding :math:`[W_g; W_1]`."""

    def __init__(self, d: int, d_ff: int, gated: bool = False) -> None:
        super().__init__()
        self.gated = gated
        self.fc = nn.Linear(d, 2 * d_ff if gated else d_ff, bias=False)
        self.proj = nn.Linear(d_ff, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, up = self.fc(x).chunk(2, dim=-1)
            return self.proj(F.silu(gate) * up)
        return self.proj(F.gelu(self.fc(x)))


class TransformerBlock(Block):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.ln1 = make_norm(cfg)
        self.attn = Attention(cfg)
        self.ln2 = make_norm(cfg)
        self.mlp = MLPBlock(cfg.d_model, cfg.ff_dim, gated=cfg.mlp == "swiglu")
        self.hook_attn_out = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.dropout = cfg.dropout
        self.attn_on = True  # False: the attention sublayer contributes nothing (TransformerConfig.attn_off)

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        a = self.hook_attn_out(self.attn(self.ln1(x)) if self.attn_on else torch.zeros_like(x))
        if self.dropout > 0:
            a = F.dropout(a, self.dropout, self.training)
        x = x + a
        m = self.hook_mlp_out(self.mlp(self.ln2(x)))
        if self.dropout > 0:
            m = F.dropout(m, self.dropout, self.training)
        return x + m


class Transformer(WindTunnelModel):
    """Causal transformer over token (+ feature) inputs; see the module docstring."""

    config: TransformerConfig

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        c = config
        self.embed = InputEmbedding(c.vocab_size, c.n_features, c.d_model)
        self.pos_embed = nn.Embedding(c.max_len, c.d_model) if c.pos == "learned" else None
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(TransformerBlock(c) for _ in range(c.n_layers))
        for l in c.attn_off:
            self.blocks[l].attn_on = False
        for l in c.uniform_attn:
            self.blocks[l].attn.uniform = True
        self.norm = make_norm(c)
        self.hook_final = HookPoint()
        self.head = nn.Linear(c.d_model, c.n_classes, bias=False)
        self._init_weights()
        self._finish_init()

    def _init_weights(self) -> None:
        """``init="gpt2"``: N(0, 0.02) on every matrix, residual projections N(0, 0.02/sqrt(2 n_layers))
        (nanoGPT/GPT-2); ``init="torch"`` keeps the weights each module drew when it was built."""
        for name, p in self.named_parameters():
            if p.dim() >= 2 and self.config.init == "gpt2":
                std = 0.02
                if name.endswith("attn.out_proj.weight") or name.endswith("mlp.proj.weight"):
                    std = 0.02 / math.sqrt(2 * self.config.n_layers)
                nn.init.normal_(p, mean=0.0, std=std)
        with torch.no_grad():
            for block in self.blocks:
                block.attn.freeze_initial()

    def embed_inputs(self, tokens: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
        """Token (+ feature) embedding, plus learned absolute positions when ``pos='learned'``."""
        x = self.embed(tokens, features)
        if self.pos_embed is not None:
            T = tokens.shape[1]
            if T > self.config.max_len:
                raise InvalidValue(
                    f"invalid sequence length: {T} exceeds max_len={self.config.max_len} of the learned positions"
                )
            x = x + self.pos_embed.weight[:T]
        return x

    @torch.no_grad()
    def unrotated_keys(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> list[torch.Tensor]:
        r"""Per layer, the keys before rotary, :math:`W_K\,\mathrm{RMSNorm}_1(r)` of the residual stream
        entering the layer: ``[B, T, H_kv, d_h]`` each, one per distinct key head (what key
        orthogonality compares)."""
        names = [f"blocks.{l}.hook_resid_pre" for l in range(len(self.blocks))]
        _, cache = self.run_with_cache(tokens, features, names=names)
        H, Hkv, dh = self.config.n_heads, self.config.kv_heads, self.config.head_dim
        out = []
        for name, block in zip(names, self.blocks):
            x = block.ln1(cache[name])
            out.append((x @ block.attn.weight()[H * dh : (H + Hkv) * dh].T).view(*x.shape[:2], Hkv, dh))
        return out

    @contextmanager
    def ablate_head(self, layer: int, head: int) -> Iterator["Transformer"]:
        """Zero head ``head``'s ``z`` in block ``layer`` (before ``W_O``) inside the ``with`` block."""
        attn: Attention = self._layer(layer).attn
        H = self.config.n_heads
        if not isinstance(head, int) or not 0 <= head < H:
            raise InvalidValue(f"invalid head: must be an integer in [0, {H - 1}], got {head!r}")
        old = attn.head_mask
        mask = torch.ones(H, device=self.device) if old is None else old.clone()
        mask[head] = 0.0
        attn.head_mask = mask
        try:
            yield self
        finally:
            attn.head_mask = old

    @contextmanager
    def explicit_attention(self) -> Iterator["Transformer"]:
        """Use the explicit softmax path in every layer inside the ``with`` block."""
        attns = [b.attn for b in self.blocks]
        old = [a.explicit for a in attns]
        try:
            for a in attns:
                a.explicit = True
            yield self
        finally:
            for a, o in zip(attns, old):
                a.explicit = o


def _width_step(cfg: dict) -> int:
    """Admissible widths: a multiple of ``n_heads``, with an even head size under rotary positions."""
    return cfg.get("n_heads", TransformerConfig.n_heads) * (2 if cfg.get("pos", TransformerConfig.pos) == "rotary" else 1)


register_arch("transformer", Arch(Transformer, TransformerConfig, {"max_len": lambda task: 4 * task.seq_len}, "d_ff",
                                  width_step=_width_step, order=10, tiny={"d_model": 24, "n_layers": 2, "n_heads": 3}))
