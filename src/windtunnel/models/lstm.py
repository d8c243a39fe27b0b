r"""A stacked LSTM (Hochreiter & Schmidhuber 1997) with residual connections between layers.

Each layer is its own single-layer ``nn.LSTM`` so that every layer's output can be hooked:

.. math::

    i_t, f_t, o_t &= \sigma(W_{\{i,f,o\}} [x_t; h_{t-1}] + b), \quad
    g_t = \tanh(W_g [x_t; h_{t-1}] + b) \\
    c_t &= f_t \odot c_{t-1} + i_t \odot g_t, \qquad h_t = o_t \odot \tanh(c_t) \\
    x^{(l+1)}_t &= x^{(l)}_t + h^{(l)}_t \quad (\text{or } h^{(l)}_t \text{ with } \texttt{residual=False})

then RMSNorm and a class head.  ``blocks.{l}.hook_state`` is the layer's hidden output ``h_t``
``[B,T,d_model]`` (the cell state ``c_t`` is internal to cuDNN/ATen and not exposed).  Since
``|h_t| < 1`` the residual stream grows at most by 1 per layer, so no per-layer norm is needed.
No positional embedding: the recurrence knows the order.  Stacked members (``torch.func.vmap``) run each layer as
one block-diagonal LSTM on a GPU (:data:`FOLDED_DEVICES`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .base import (Block, HookPoint, InputEmbedding, ModelConfig, RMSNorm, WindTunnelModel, _check, _pos_int,
                   members_first)
from .catalog import Arch, register_arch


@dataclass
class LSTMConfig(ModelConfig):
    """Hyper-parameters of :class:`LSTM`."""

    arch: str = "lstm"
    d_model: int = 256
    n_layers: int = 4
    residual: bool = True
    norm_eps: float = 1e-5

    def validate(self) -> None:
        super().validate()
        _check(self.arch == "lstm", "arch", "'lstm'")
        _check(_pos_int(self.d_model), "d_model", "a positive integer")
        _check(_pos_int(self.n_layers), "n_layers", "a positive integer")
        _check(isinstance(self.residual, bool), "residual", "true or false")


FOLDED_DEVICES = ("cuda",)
"""Devices where the layers of stacked LSTMs (``torch.func.vmap`` over the members' parameters, as
``windtunnel.training.stacked`` trains them) run as one block-diagonal LSTM (:class:`_FoldedLSTM`).  On a GPU a
small LSTM's step is a chain of per-position kernels whose length, not arithmetic, sets its time, so one recurrence
``M`` times as wide is meant to cost about what one member's does, against ``M`` recurrences one after another; on a
CPU the block-diagonal products' wasted arithmetic (``M`` times a member's) is what costs, so there the members run
one by one (``nn.LSTM`` has no vmap rule, and the stacked step runs such a forward pass member by member)."""


class _FoldedLSTM(torch.autograd.Function):
    """One LSTM layer of ``M`` stacked members as one LSTM of width ``M·H`` whose weights are block-diagonal: member
    ``m``'s gate ``k`` is rows ``k·M·H + m·H …`` and its inputs are columns ``m·I …``, so no member reads another's
    state, and backward gives each member's weights their own gradient (the off-diagonal blocks are constants).  Used
    only under ``vmap`` (:meth:`vmap` folds the members into the width, then calls the differentiable ``torch.lstm``,
    cuDNN's on a GPU); :meth:`forward` is the plain layer."""

    @staticmethod
    def forward(x: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor,
                b_hh: torch.Tensor) -> torch.Tensor:
        h0 = x.new_zeros(1, x.shape[0], w_hh.shape[1])
        return torch.lstm(x, (h0, h0), [w_ih, w_hh, b_ih, b_hh], True, 1, 0.0, False, False, True)[0]

    @staticmethod
    def setup_context(ctx: object, inputs: tuple, output: torch.Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> None:  # pragma: no cover - applied only under vmap
        raise RuntimeError("_FoldedLSTM is differentiated through its vmap rule's torch.lstm")

    @staticmethod
    def vmap(info: object, in_dims: tuple, *args: torch.Tensor) -> tuple[torch.Tensor, int]:
        M = info.batch_size  # type: ignore[attr-defined]
        x, w_ih, w_hh, b_ih, b_hh = members_first(M, in_dims, args)
        B, T, I = x.shape[1:]
        H = w_hh.shape[-1]
        eye = torch.eye(M, dtype=w_ih.dtype, device=w_ih.device)

        def diagonal(w: torch.Tensor, n: int) -> torch.Tensor:  # [M, 4H, n] -> [4·M·H, M·n]
            return torch.einsum("mkhi,mn->kmhni", w.reshape(M, 4, H, n), eye).reshape(4 * M * H, M * n)

        def bias(b: torch.Tensor) -> torch.Tensor:  # [M, 4H] -> [4·M·H], gate-major like the weights' rows
            return b.reshape(M, 4, H).transpose(0, 1).reshape(4 * M * H)

        # the weights in their own dtype (under a GPU's bf16 autocast einsum would cast them, and cuDNN refuses weights
        # of two dtypes): torch.lstm's own autocast then casts them once, as it does for a member alone
        with torch.autocast(x.device.type, enabled=False):
            weights = [diagonal(w_ih, I), diagonal(w_hh, H), bias(b_ih), bias(b_hh)]
        xs = x.permute(1, 2, 0, 3).reshape(B, T, M * I)
        h0 = xs.new_zeros(1, B, M * H)
        y = torch.lstm(xs, (h0, h0), weights, True, 1, 0.0, True, False, True)[0]
        return y.reshape(B, T, M, H).permute(2, 0, 1, 3), 0


class LSTMBlock(Block):
    """One single-layer LSTM; ``x + h`` (residual) or ``h``."""

    def __init__(self, cfg: LSTMConfig) -> None:
        super().__init__()
        self.lstm = nn.LSTM(cfg.d_model, cfg.d_model, num_layers=1, batch_first=True)
        self.residual = cfg.residual
        self.hook_state = HookPoint()

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        if torch._C._functorch.is_batchedtensor(x) and x.device.type in FOLDED_DEVICES:  # a stack's members, on a GPU
            m = self.lstm
            h = _FoldedLSTM.apply(x, m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0)
        else:
            h = self.lstm(x)[0]
        h = self.hook_state(h)
        return x + h if self.residual else h


class LSTM(WindTunnelModel):
    """Embedding -> LSTM layers -> RMSNorm -> class head."""

    config: LSTMConfig

    def __init__(self, config: LSTMConfig) -> None:
        super().__init__(config)
        c = config
        self.embed = InputEmbedding(c.vocab_size, c.n_features, c.d_model)
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(LSTMBlock(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.d_model, c.norm_eps)
        self.hook_final = HookPoint()
        self.head = nn.Linear(c.d_model, c.n_classes, bias=False)
        nn.init.normal_(self.embed.tok.weight, std=0.02)
        nn.init.normal_(self.head.weight, std=0.02)
        self._finish_init()


register_arch("lstm", Arch(LSTM, LSTMConfig, {}, None, order=30, tiny={"d_model": 16, "n_layers": 2}, step_cost=0.8))
