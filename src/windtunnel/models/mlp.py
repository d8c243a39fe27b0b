r"""The papers' "flat" baseline: a residual MLP over a fixed window of the prefix.

Design.  At position ``t`` the network sees the concatenated per-position embeddings of the
last ``window`` inputs, oldest first, zero-padded before the start of the sequence:

.. math::

    e_s &= E[\text{tokens}_s] + W_f\,\text{features}_s \in \mathbb{R}^{d_{embed}} \\
    x^{(0)}_t &= W_{in}\,[e_{t-w+1}; \dots; e_t] + b_{in}, \qquad e_{s<0} = 0 \\
    x^{(l+1)}_t &= x^{(l)}_t + W_2\,\mathrm{GELU}(W_1\,\mathrm{LayerNorm}(x^{(l)}_t) + b_1) + b_2

then LayerNorm and a class head.  There is no other sequence mixing: the window (built with
``pad`` + ``unfold``, vectorised) is causal by construction, and every position runs the same
per-position MLP.  With the default ``window = task.seq_len`` each position sees its whole prefix
flattened; the zero padding tells it where it is (the MLP is not shift-invariant).  Position
information beyond that is not given.  ``d_embed`` (default 32) is small so the first layer
``window * d_embed -> d_model`` stays manageable.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .base import Block, HookPoint, InputEmbedding, ModelConfig, WindTunnelModel, _check, _pos_int
from .catalog import Arch, register_arch
from ..errors import InvalidValue


@dataclass
class MLPConfig(ModelConfig):
    """Hyper-parameters of :class:`MLP` (``d_ff=None`` means ``4 * d_model``)."""

    arch: str = "mlp"
    window: int = 64
    d_embed: int = 32
    d_model: int = 256
    n_layers: int = 6
    d_ff: int | None = None
    norm_eps: float = 1e-5

    def validate(self) -> None:
        super().validate()
        _check(self.arch == "mlp", "arch", "'mlp'")
        for name in ("window", "d_embed", "d_model", "n_layers"):
            _check(_pos_int(getattr(self, name)), name, "a positive integer")
        _check(self.d_ff is None or _pos_int(self.d_ff), "d_ff", "a positive integer or null")

    @property
    def ff_dim(self) -> int:
        return 4 * self.d_model if self.d_ff is None else self.d_ff


class MLPResBlock(Block):
    """``x + W2 GELU(W1 LayerNorm(x))``; ``hook_mlp_out`` is the added branch."""

    def __init__(self, cfg: MLPConfig) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.fc = nn.Linear(cfg.d_model, cfg.ff_dim)
        self.proj = nn.Linear(cfg.ff_dim, cfg.d_model)
        self.hook_mlp_out = HookPoint()

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.hook_mlp_out(self.proj(F.gelu(self.fc(self.ln(x)))))


class MLP(WindTunnelModel):
    """Windowed flat residual MLP; see the module docstring."""

    config: MLPConfig

    def __init__(self, config: MLPConfig) -> None:
        super().__init__(config)
        c = config
        self.embed = InputEmbedding(c.vocab_size, c.n_features, c.d_embed)
        self.hook_embed = HookPoint()
        self.hook_window = HookPoint()
        self.in_proj = nn.Linear(c.window * c.d_embed, c.d_model)
        self.blocks = nn.ModuleList(MLPResBlock(c) for _ in range(c.n_layers))
        self.norm = nn.LayerNorm(c.d_model, eps=c.norm_eps)
        self.hook_final = HookPoint()
        self.head = nn.Linear(c.d_model, c.n_classes, bias=False)
        nn.init.normal_(self.embed.tok.weight, std=0.02)
        nn.init.normal_(self.head.weight, std=0.02)
        self._finish_init()

    def window(self, e: torch.Tensor) -> torch.Tensor:
        """``[B,T,E] -> [B,T,window*E]``: row ``t`` is ``[e_{t-w+1}; ...; e_t]`` (zeros before 0)."""
        w = self.config.window
        padded = F.pad(e, (0, 0, w - 1, 0))  # [B, T+w-1, E]
        win = padded.unfold(1, w, 1)  # [B, T, E, w]
        return win.transpose(2, 3).flatten(2)

    def to_stream(self, e: torch.Tensor) -> torch.Tensor:
        """The window of embeddings ending at each position, projected to the stream width."""
        return self.in_proj(self.hook_window(self.window(e)))


@dataclass
class PointwiseMLPConfig(MLPConfig):
    """Hyper-parameters of :class:`PointwiseMLP` (``window`` is fixed at 1; ``max_len`` positions)."""

    arch: str = "mlp_pointwise"
    window: int = 1
    max_len: int = 512

    def validate(self) -> None:
        _check(self.arch == "mlp_pointwise", "arch", "'mlp_pointwise'")
        _check(self.window == 1, "window", "1 (a pointwise MLP sees only its own position)")
        _check(_pos_int(self.max_len), "max_len", "a positive integer")
        object.__setattr__(self, "arch", "mlp")  # reuse the shared checks, then restore the name
        try:
            super().validate()
        finally:
            object.__setattr__(self, "arch", "mlp_pointwise")


class PointwiseMLP(MLP):
    r"""The papers' MLP control: the same residual MLP at every position, with no cross-position mixing.

    .. math:: x^{(0)}_t = W_{in}(E[\text{tokens}_t] + W_f\,\text{features}_t + P_t) + b_{in}

    then the residual blocks of :class:`MLP`.  Position ``t`` sees its own input and its index
    (learned embedding ``P``) and nothing else, so in-context inference is impossible by
    construction: the best it can do is the *context-blind optimum*
    ``E[posterior_t | t, input_t]`` (``windtunnel.tasks.context_blind``), the floor that the
    table's context-blind row reports.
    """

    config: PointwiseMLPConfig

    def __init__(self, config: PointwiseMLPConfig) -> None:
        super().__init__(config)
        self.pos = nn.Embedding(config.max_len, config.d_embed)
        nn.init.normal_(self.pos.weight, std=0.02)

    def window(self, e: torch.Tensor) -> torch.Tensor:
        T = e.shape[1]
        if T > self.config.max_len:
            raise InvalidValue(f"invalid input: length {T} exceeds max_len={self.config.max_len}")
        return e + self.pos.weight[:T]


register_arch("mlp", Arch(MLP, MLPConfig, {"window": lambda task: task.seq_len}, "d_ff", order=40,
                          tiny={"d_model": 16, "n_layers": 2, "d_embed": 4}))
register_arch("mlp_pointwise", Arch(PointwiseMLP, PointwiseMLPConfig, {"max_len": lambda task: 4 * task.seq_len},
                                    "d_ff", order=50, tiny={"d_model": 16, "n_layers": 2, "d_embed": 4}))
