r"""Mamba-1 (Gu & Dao 2023, "Mamba: linear-time sequence modeling with selective state spaces").

A faithful pure-PyTorch Mamba-1, not the authors' simplified SSM (their scalar rank-1 dt,
A shared across channels, clamps and LayerNorm on the scan output are *not* reproduced).
Per block, with ``d_inner = expand * d_model``:

.. math::

    (x, z) &= W_{in}\,\mathrm{RMSNorm}(u) \\
    x &\leftarrow \mathrm{SiLU}(\mathrm{conv1d}_{\text{causal, depthwise}, k=d_{conv}}(x)) \\
    (\delta_{low}, B_t, C_t) &= W_x x \qquad (\text{sizes } \lceil d/16 \rceil,\ d_{state},\ d_{state}) \\
    \Delta_t &= \mathrm{softplus}(W_{dt}\,\delta_{low} + b_{dt}) \in \mathbb{R}^{d_{inner}} \\
    A &= -\exp(A_{log}) \in \mathbb{R}^{d_{inner} \times d_{state}}, \quad A_{log}[c,n] = \log(n+1)\
       \text{at init (S4D-real)} \\
    h_t &= \exp(\Delta_t A) \odot h_{t-1} + (\Delta_t x_t) \otimes B_t, \qquad
    y_t = h_t C_t + D \odot x_t \\
    \text{out} &= u + W_{out}\,(y \odot \mathrm{SiLU}(z))

(zero-order hold for ``A``, Euler for ``B``, as in the official kernels).  The state ``h_t`` is
``[d_inner, d_state]`` per sequence; ``blocks.{l}.hook_state`` exposes it as ``[B,T,d_inner,d_state]``.

The scans and the causal convolution the mixer calls — the step-by-step reference, the vectorised
pure-PyTorch scan, the fused C++ CPU kernel and its loader — are in :mod:`windtunnel.models.scans`;
this module is the model.  The selection is hooked as ``blocks.{l}.hook_delta`` (the step sizes
:math:`\Delta_t` after softplus, ``[B,T,d_inner]``), ``blocks.{l}.hook_B`` and ``blocks.{l}.hook_C``
(``[B,T,d_state]``); a hook may replace them.

**Effective attention.**  Mamba is Paper I's second architecture (arXiv 2512.22471 v3, its "Mamba geometry"
section: claims B14–B17 in ``windtunnel/claims/paper1/hmm_geometry.py``), and it has no softmax attention for
the attention diagnostics to read.  But the scan is linear in its input once the selection (Δ, B, C) is
fixed, so each layer is, channel by channel, a causal token mixer with an exact attention-like matrix
(the "hidden attention" reading of a selective SSM): unrolling :math:`h_t` from :math:`h_{-1} = 0`,

.. math::

    y_t[i] = \sum_{s \le t} \alpha_i[t,s]\, u_s[i] + D_i\, u_t[i], \qquad
    \alpha_i[t,s] = \sum_n C_t[n]\, \exp\!\Big(A[i,n] \sum_{k=s+1}^{t} \Delta_k[i]\Big)\, \Delta_s[i]\, B_s[n]

(``u`` the scan's input, after the convolution and SiLU: :func:`selective_attention`).  Each block
exposes its aggregate over channels as ``blocks.{l}.attn.hook_pattern`` ``[B,1,T,T]``
(:func:`selective_attention_pattern`), computed in float64 only while that hook is attached, so the
attention diagnostics that read a pattern (``attention_focusing``) read Mamba too.  It is read-only:
the pattern is derived beside the scan, not on its path, and a hook that replaces it is refused.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InvalidValue
from .base import Block, HookPoint, InputEmbedding, ModelConfig, RMSNorm, WindTunnelModel, _check, _pos_int
from .catalog import Arch, register_arch
from .scans import SCAN_METHODS, causal_depthwise_conv, conv_silu, gated_selective_scan, selective_scan, selective_scan_ref

SCANS = ("fast", "ref")


@dataclass
class MambaConfig(ModelConfig):
    """Hyper-parameters of :class:`Mamba` (``None`` fields are derived: ``d_inner = expand * d_model``,
    ``dt_rank = ceil(d_model / 16)``)."""

    arch: str = "mamba"
    d_model: int = 192
    n_layers: int = 6
    d_state: int = 16
    d_conv: int = 4
    expand: int = 2
    d_inner: int | None = None
    dt_rank: int | None = None
    dt_min: float = 0.001
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4
    norm_eps: float = 1e-5
    scan: str = "fast"
    scan_method: str = "auto"

    def validate(self) -> None:
        super().validate()
        _check(self.arch == "mamba", "arch", "'mamba'")
        for name in ("d_model", "n_layers", "d_state", "d_conv", "expand"):
            _check(_pos_int(getattr(self, name)), name, "a positive integer")
        _check(self.d_inner is None or _pos_int(self.d_inner), "d_inner", "a positive integer or null")
        _check(self.dt_rank is None or _pos_int(self.dt_rank), "dt_rank", "a positive integer or null")
        _check(0 < self.dt_min <= self.dt_max, "dt_min", "in (0, dt_max]")
        _check(self.scan in SCANS, "scan", " | ".join(SCANS))
        _check(self.scan_method in SCAN_METHODS, "scan_method", " | ".join(SCAN_METHODS))
        # refused here, before a run folder is made, where no device could run it
        _check(self.scan_method != "triton" or torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
               "scan_method", "a scan this machine runs ('triton' needs a CUDA device, or TRITON_INTERPRET=1 for Triton's "
               "CPU interpreter)")

    @property
    def inner(self) -> int:
        return self.expand * self.d_model if self.d_inner is None else self.d_inner

    @property
    def rank(self) -> int:
        return math.ceil(self.d_model / 16) if self.dt_rank is None else self.dt_rank


# --- effective attention -----------------------------------------------------------------------------
PATTERN_BUDGET = 2**24
"""The most float64 elements ``[B,T,channels,N]`` of propagated state :func:`selective_attention_pattern` holds at
once (128 MiB): it walks the channels in blocks of that size."""


def selective_attention(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                        channels: slice | None = None) -> torch.Tensor:
    r"""The selective scan's exact effective attention, per channel, in float64: ``[Bsz, Di, T, T]``.

    For the scan the mixer runs (:func:`windtunnel.models.scans.selective_scan_ref`: zero-order hold
    :math:`\bar A_t = \exp(\Delta_t A)` for the state, Euler :math:`\bar B_t = \Delta_t B_t` for the
    input, :math:`h_{-1} = 0`), :math:`h_t = \sum_{s \le t} \big(\prod_{k=s+1}^{t} \bar A_k\big) \bar B_s u_s`, so

    .. math::

        y_t[i] = \sum_{s \le t} \alpha_i[t,s]\, u_s[i] + D_i u_t[i], \qquad
        \alpha_i[t,s] = \sum_n C_t[n]\, \exp\!\big(A[i,n]\,(\Lambda_t[i] - \Lambda_s[i])\big)\, \Delta_s[i]\, B_s[n],

    with :math:`\Lambda_t = \sum_{k \le t} \Delta_k` (``A`` does not depend on time, so the decay from
    ``s`` to ``t`` is ``A`` times the step sizes summed between them); :math:`\alpha_i[t,s] = 0` for
    ``s > t``.  ``delta [Bsz,T,Di]`` (after softplus), ``A [Di,N]`` (negative), ``B, C [Bsz,T,N]``;
    ``channels`` restricts ``i`` to a slice of the channels.  The skip ``D`` is not in ``α``.

    ``α`` is signed (``C_t \cdot B_s`` weighted by the decays can be negative) and its rows do not sum to 1:
    the scan is a linear map of ``u``, not an average of it.
    """
    d, A64 = delta.double(), A.double()
    if channels is not None:
        d, A64 = d[..., channels], A64[channels]
    Bsz, T, _ = d.shape
    lam = d.cumsum(1)  # [Bsz,T,Di]
    gap = lam[:, :, None, :] - lam[:, None, :, :]  # [Bsz,t,s,Di]: the step sizes summed over s+1..t
    exponent = gap[..., None] * A64  # [Bsz,t,s,Di,N], <= 0 where s <= t
    causal = torch.ones(T, T, dtype=torch.bool, device=d.device).tril()
    decay = exponent.masked_fill(~causal[None, :, :, None, None], float("-inf")).exp()
    alpha = torch.einsum("btsin,btn,bsn->bits", decay, C.double(), B.double())
    return alpha * d.transpose(1, 2)[:, :, None, :]  # Δ_s[i]


def selective_attention_pattern(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                                budget: int = PATTERN_BUDGET) -> torch.Tensor:
    r"""A selective-scan layer's effective attention aggregated over channels: ``[Bsz, 1, T, T]`` float64,
    each causal row summing to 1 (a row with no weight at all stays 0),

    .. math::

        P[t,s] = \frac{\sum_i |\alpha_i[t,s]|}{\sum_i \sum_{s' \le t} |\alpha_i[t,s']|}

    (:func:`selective_attention` for ``α``): the share of the layer's total absolute token-mixing weight at
    position ``t`` that falls on source ``s``.  Why this aggregate: the diagnostics read a pattern as one
    distribution over the positions a layer reads (entropy, mass on named positions), and a channel of
    Mamba counts in it in proportion to how much of its input it passes through the scan (its row's L1
    norm), so a channel whose ``α`` is near zero — one that only passes ``D u_t`` — does not count as much
    as one that mixes; pooling before normalising also gives one row per layer, ``[B,1,T,T]``, instead of
    ``d_inner`` rows.

    What it is not: a probability distribution Mamba averages with.  The signs of ``α`` are dropped, its
    rows' scale is normalised away, and the skip ``D``, the gate ``SiLU(z)`` (which rescales row ``t`` of
    channel ``i``) and the causal convolution that makes ``u_s`` out of the ``d_conv`` tokens up to ``s``
    all lie outside it: "position ``s``" is the convolution window ending at ``s``.  Its entropy is at
    least the mean entropy of the channels' own normalised rows, each weighted by its share (the entropy
    of a mixture), so a layer whose channels each read one position, but different ones, is not focused
    by this measure, where a transformer's layer value (the mean of its heads' entropies) would be.

    Computed by the scan's own recurrence run for every source at once — the state a unit input at ``s``
    leaves, multiplied by each step's decay :math:`\exp(\Delta_k A)` and read with :math:`C_t` — rather than by
    the closed form of :func:`selective_attention`: the same numbers (a test holds them equal), without an
    exponential per ``(t, s)`` pair, and never more than ``budget`` elements of state at once.
    """
    d, A64, B64, C64 = (v.double() for v in (delta, A, B, C))
    Bsz, T, Di = d.shape
    N = A64.shape[1]
    step = max(1, budget // max(1, Bsz * T * N))
    total = torch.zeros(Bsz, T, T, dtype=torch.float64, device=d.device)
    for start in range(0, Di, step):
        c = slice(start, start + step)
        decay = torch.exp(d[..., c, None] * A64[c])  # [Bsz,T,c,N]: exp(Δ_t[i] A[i,n])
        write = d[..., c, None] * B64[:, :, None, :]  # [Bsz,T,c,N]: Δ_s[i] B_s[n]
        # G[:, s] = Δ_s B_s ∏_{k=s+1..t} exp(Δ_k A): the state at t that one unit of u_s left, for every s <= t
        G = torch.empty(Bsz, T, decay.shape[2], N, dtype=torch.float64, device=d.device)
        for t in range(T):
            if t:
                G[:, :t] *= decay[:, t, None]
            G[:, t] = write[:, t]
            total[:, t, : t + 1] += torch.einsum("bsin,bn->bsi", G[:, : t + 1], C64[:, t]).abs().sum(-1)
    row = total.sum(-1, keepdim=True)
    return torch.where(row > 0, total / row.clamp_min(torch.finfo(torch.float64).tiny), 0.0)[:, None]


class EffectiveAttention(nn.Module):
    """Where a Mamba block exposes its effective attention: ``hook_pattern`` (``blocks.{l}.attn.hook_pattern``,
    ``[B,1,T,T]`` float64, :func:`selective_attention_pattern`), computed only while that hook is attached.

    Read-only: the pattern is derived from the scan's Δ, B, C (after their own hooks), beside the scan and
    not on its path, so a hook that returns a different tensor would change nothing downstream; it is
    refused instead of being silently ignored."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_pattern = HookPoint()

    @property
    def hooked(self) -> bool:
        return self.hook_pattern.hooked

    def forward(self, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> None:
        with torch.no_grad():
            on = delta.device if delta.device.type != "mps" else torch.device("cpu")  # no float64 on MPS
            pattern = selective_attention_pattern(delta.to(on), A.to(on), B.to(on), C.to(on))
        if self.hook_pattern(pattern) is not pattern:
            raise InvalidValue(f"invalid hook on {self.hook_pattern.name}: Mamba's effective attention is read "
                               "from the scan, not fed back into it, so it cannot be replaced (patch hook_delta, "
                               "hook_B, hook_C or hook_state instead)")


# --- model -----------------------------------------------------------------------------------------
class MambaBlock(Block):
    """One Mamba-1 block, ``u + mixer(RMSNorm(u))``; parameter names follow ``mamba_simple.py``
    (``in_proj``, ``conv1d``, ``x_proj``, ``dt_proj``, ``A_log``, ``D``, ``out_proj``)."""

    def __init__(self, cfg: MambaConfig) -> None:
        super().__init__()
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        d, Di, N, R = cfg.d_model, cfg.inner, cfg.d_state, cfg.rank
        self.scan, self.scan_method = cfg.scan, cfg.scan_method
        self.d_inner, self.d_state, self.dt_rank = Di, N, R
        self.in_proj = nn.Linear(d, 2 * Di, bias=False)
        self.conv1d = nn.Conv1d(Di, Di, cfg.d_conv, groups=Di, padding=cfg.d_conv - 1, bias=True)
        self.x_proj = nn.Linear(Di, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, Di, bias=True)
        # the initial values are computed on the CPU and moved to the device the layer is built on: on the meta
        # device (a model only counted, models.sizing) PyTorch would run this arithmetic through slow reference code
        built_on = self.dt_proj.bias.device
        A = torch.log(torch.arange(1, N + 1, dtype=torch.float32, device="cpu")).repeat(Di, 1)
        self.A_log = nn.Parameter(A.to(built_on))
        self.D = nn.Parameter(torch.ones(Di))
        self.out_proj = nn.Linear(Di, d, bias=False)
        self.hook_state = HookPoint()
        # the selection: step sizes delta [B,T,Di] (after softplus) and the input-dependent B, C [B,T,N]
        self.hook_delta, self.hook_B, self.hook_C = HookPoint(), HookPoint(), HookPoint()
        # the selection's effective attention over positions, computed only when hooked
        self.attn = EffectiveAttention()
        # dt_proj: weight U(-r^-1/2, r^-1/2); bias = softplus^-1(dt), dt log-uniform in [dt_min, dt_max]
        with torch.no_grad():
            std = R**-0.5
            nn.init.uniform_(self.dt_proj.weight, -std, std)
            dt = torch.exp(
                torch.rand(Di, device="cpu") * (math.log(cfg.dt_max) - math.log(cfg.dt_min)) + math.log(cfg.dt_min)
            ).clamp(min=cfg.dt_init_floor)
            self.dt_proj.bias.copy_((dt + torch.log(-torch.expm1(-dt))).to(built_on))
        self.A_log._no_weight_decay = True  # type: ignore[attr-defined]
        self.D._no_weight_decay = True  # type: ignore[attr-defined]

    def mix(self, u: torch.Tensor) -> torch.Tensor:
        return u + self.mixer(self.norm(u))

    def scan_inputs(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                     torch.Tensor, torch.Tensor]:
        """What the scan reads from the normalised stream ``x [B,T,d_model]``: ``(u, delta_raw, A, B, C, z)`` —
        the scan's input ``u`` (after the convolution and SiLU) and the gate ``z`` ``[B,T,Di]``, the step sizes
        before softplus ``[B,T,Di]``, ``A [Di,N]`` and ``B, C [B,T,N]`` (after ``hook_B`` / ``hook_C``)."""
        xz = self.in_proj(x)
        u, z = xz.chunk(2, dim=-1)  # [B,T,Di] each
        if self.scan == "fast":
            u = conv_silu(u, self.conv1d.weight, self.conv1d.bias)
        else:  # the reference path stays plain PyTorch end to end
            u = F.silu(causal_depthwise_conv(u, self.conv1d.weight, self.conv1d.bias))
        dt, Bm, Cm = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        if self.hook_B.hooked or self.hook_C.hooked:
            Bm, Cm = self.hook_B(Bm), self.hook_C(Cm)
        # [Di,N], float32 at least (also under bf16 autocast), float64 in a float64 model
        A = -torch.exp(self.A_log.to(torch.float64 if u.dtype == torch.float64 else torch.float32))
        return u, self.dt_proj(dt), A, Bm, Cm, z

    def mixer(self, x: torch.Tensor) -> torch.Tensor:
        """The selective-SSM branch on the normalised stream ``[B,T,d_model] -> [B,T,d_model]``."""
        x, delta_raw, A, Bm, Cm, z = self.scan_inputs(x)
        fused = self.scan == "fast" and not self.hook_state.hooked and not self.hook_delta.hooked
        if fused:  # softplus, scan and gate in one pass
            if self.attn.hooked:  # the step sizes the fused scan takes, only for the pattern
                self.attn(F.softplus(delta_raw), A, Bm, Cm)
            return self.out_proj(gated_selective_scan(x, delta_raw, A, Bm, Cm, self.D, z, self.scan_method))
        delta = self.hook_delta(F.softplus(delta_raw))  # [B,T,Di]
        if self.attn.hooked:
            self.attn(delta, A, Bm, Cm)
        scan = selective_scan if self.scan == "fast" else selective_scan_ref
        kw = {"method": self.scan_method} if self.scan == "fast" else {}
        if self.hook_state.hooked:
            _, h = scan(x, delta, A, Bm, Cm, self.D, return_states=True, **kw)
            h = self.hook_state(h)  # may be patched: y is recomputed from it
            y = torch.einsum("btcn,btn->btc", h, Cm) + self.D * x
        else:
            y = scan(x, delta, A, Bm, Cm, self.D, **kw)
        return self.out_proj(y * F.silu(z))


class Mamba(WindTunnelModel):
    """Embedding -> Mamba-1 blocks -> RMSNorm -> class head.  No positional embedding (recurrent)."""

    config: MambaConfig

    def __init__(self, config: MambaConfig) -> None:
        super().__init__(config)
        c = config
        self.embed = InputEmbedding(c.vocab_size, c.n_features, c.d_model)
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(MambaBlock(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.d_model, c.norm_eps)
        self.hook_final = HookPoint()
        self.head = nn.Linear(c.d_model, c.n_classes, bias=False)
        self._init_weights()
        self._finish_init()

    def _init_weights(self) -> None:
        """As ``mamba_ssm``: embeddings N(0, 0.02), other linears PyTorch default except out_proj
        scaled by ``1/sqrt(n_layers)``; head N(0, 0.02)."""
        nn.init.normal_(self.embed.tok.weight, std=0.02)
        if self.embed.feat is not None:
            nn.init.normal_(self.embed.feat.weight, std=0.02)
        nn.init.normal_(self.head.weight, std=0.02)
        with torch.no_grad():
            for block in self.blocks:
                block.out_proj.weight /= math.sqrt(self.config.n_layers)


register_arch("mamba", Arch(Mamba, MambaConfig, {}, "d_inner", order=20, tiny={"d_model": 16, "n_layers": 2, "d_state": 4},
                            step_cost=3.0))
