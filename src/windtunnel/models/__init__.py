"""Sequence models for the wind tunnels, with TransformerLens-style hooks.

``make(arch, task, params=None, **overrides)`` builds one (``params=N``: capacity-matched to N
parameters, +-3%), ``names()`` lists the architectures, ``build(model.config_dict())`` rebuilds
one from its saved config.  Every model maps ``tokens [B,T]`` (+ ``features [B,T,F]``) to logits
``[B,T,C]`` and supports ``hook_names()``, ``hooks([...])``, ``run_with_cache(...)``,
``bypass_layer(l)`` and (transformer) ``ablate_head(l, h)``.  ``arch="package.module:factory"``
brings a model from outside the package (``models.external``: the protocol, checked at build).
"""

from .base import HookPoint, ModelConfig, WindTunnelModel
from .attention_layer import AttentionLayer, AttentionLayerConfig, attention_layer
from .external import ExternalModel, is_external, load_factory
from .hf import HFConfig, HFModel, hf_names, is_hf
from .lstm import LSTM, LSTMConfig
from .mamba import Mamba, MambaConfig
from .scans import selective_scan, selective_scan_ref
from .mlp import MLP, MLPConfig, PointwiseMLP, PointwiseMLPConfig
from .registry import build, count_params, fit_width, make, names
from .transformer import Transformer, TransformerConfig

__all__ = [
    "HookPoint", "ModelConfig", "WindTunnelModel", "AttentionLayer", "AttentionLayerConfig", "attention_layer", "ExternalModel", "is_external", "load_factory", "HFConfig", "HFModel", "hf_names", "is_hf", "LSTM", "LSTMConfig", "Mamba", "MambaConfig",
    "selective_scan", "selective_scan_ref", "MLP", "MLPConfig", "PointwiseMLP", "PointwiseMLPConfig", "Transformer",
    "TransformerConfig", "build", "count_params", "fit_width", "make", "names",
]
