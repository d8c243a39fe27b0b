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
No positional embedding: the recurrence knows the order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .base import Block, HookPoint, InputEmbedding, ModelConfig, RMSNorm, WindTunnelModel, _check, _pos_int
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


class LSTMBlock(Block):
    """One single-layer LSTM; ``x + h`` (residual) or ``h``."""

    def __init__(self, cfg: LSTMConfig) -> None:
        super().__init__()
        self.lstm = nn.LSTM(cfg.d_model, cfg.d_model, num_layers=1, batch_first=True)
        self.residual = cfg.residual
        self.hook_state = HookPoint()

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        h = self.hook_state(self.lstm(x)[0])
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
