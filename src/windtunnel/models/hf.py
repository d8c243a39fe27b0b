r"""Any Hugging Face causal language model in the tunnel: ``--arch hf:MODEL_TYPE``.

``hf:llama``, ``hf:gpt_neox``, ``hf:mistral``, ``hf:mamba``, ``hf:mamba2``, ``hf:rwkv`` — any
``model_type`` the installed ``transformers`` can build as ``AutoModelForCausalLM`` — is built
*randomly initialised from a config* (nothing is downloaded), sized by ``params`` like our own
models (the width ``hidden_size`` is searched, ±3%), and trained and evaluated by the same loop.
Requires the ``[hf]`` extra (``pip install 'windtunnel[hf]'``).

The config is filled per family so that the sizes mean what they mean for our models:
``hidden_size = d_model``, ``num_hidden_layers = n_layers``; attention models get
``num_attention_heads = n_heads`` and ``intermediate_size = 4·d_model`` (the transformer's MLP);
state-space and RNN families get their own inner widths (``expand = 2``; ``mamba2``: heads of
width 16).  Any other config field (``num_key_value_heads`` for grouped-query attention,
``sliding_window``, ``state_size``, ...) is passed through ``options``.  Input and output
embeddings are untied (inputs are tokens, outputs are the task's classes): the vocabulary is
``max(vocab_size, n_classes)`` and the logits are the first ``n_classes`` columns.  Tasks with
real-valued inputs add ``W_f · features`` to the input embeddings (``inputs_embeds``), as our
models do.

The wrapped network is ``net``.  Its decoder layers get our stable hook names (attached with PyTorch
forward hooks on the Hugging Face modules, so ``hooks`` and ``run_with_cache`` work as for our own
models): ``blocks.{l}.hook_resid_pre`` / ``hook_resid_post`` (the hidden state entering / leaving
decoder layer ``l``; replacements flow downstream), ``blocks.{l}.attn.hook_pattern`` (the softmax
attention ``[B, H, T, T]`` of attention families, per *query* head — grouped-query key heads
repeated, sliding windows applied; read-only, and computed with the eager attention path only
while hooked) and ``hook_final`` (the normalised state the output head reads).  ``bypass_layer``
works (a layer's output replaced by its input), ``unrotated_keys`` reads each layer's key
projection (key orthogonality), and ``unembed`` applies the family's final norm and head to any layer's
state (the Bayes lens); head ablation (``attn.hook_z``), the routing law (``attn.hook_scores``, ``hook_v``,
``hook_z``) and the EM reading read hooks and parts an ``hf:`` model does not expose, and report "not
applicable" naming them.  Causality and the output shape
are checked at build time, as for every model from outside the package.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn

from .base import HookPoint, ModelConfig, WindTunnelModel, _check, _pos_int
from .contract import check_contract
from .sizing import TOLERANCE, fit_width
from ..errors import InvalidValue

PREFIX = "hf:"


def is_hf(arch: Any) -> bool:
    """Whether ``arch`` names a Hugging Face family (``hf:MODEL_TYPE``)."""
    return isinstance(arch, str) and arch.startswith(PREFIX)


def _transformers() -> Any:
    if importlib.util.find_spec("transformers") is None:
        raise InvalidValue("hf: architectures need the transformers package: pip install 'windtunnel[hf]'")
    import transformers

    transformers.logging.set_verbosity_error()  # the "reference implementation" notices of Mamba and co.
    return transformers


def hf_names() -> list[str]:
    """The ``hf:`` architectures the installed ``transformers`` can build (``[]`` without it)."""
    if importlib.util.find_spec("transformers") is None:
        return []
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return [PREFIX + k for k in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES]


def check_hf_arch(arch: str) -> None:
    """``InvalidValue`` (one line) unless ``arch`` is ``hf:`` plus a causal-LM family of the installed transformers."""
    _transformers()
    model_type = arch[len(PREFIX):]
    known = hf_names()
    if PREFIX + model_type not in known:
        close = [k for k in known if model_type and model_type.split("_")[0] in k][:6]
        hint = f" (did you mean {', '.join(close)}?)" if close else f" ({len(known)} families; e.g. hf:llama, hf:gpt_neox, hf:mamba)"
        raise InvalidValue(f"unknown arch {arch!r}: transformers {_transformers().__version__} has no causal LM "
                           f"{model_type!r}{hint}")


_ATTENTION_FREE = {"mamba", "mamba2", "rwkv", "falcon_mamba", "xlstm"}


def _width_step(model_type: str, n_heads: int) -> int:
    """Admissible ``d_model`` spacing: even heads for rotary attention; 8 for mamba2's 16-wide heads."""
    if model_type == "mamba2":
        return 8
    if model_type in _ATTENTION_FREE:
        return 1
    return 2 * n_heads


@dataclass
class HFConfig(ModelConfig):
    """The sizes of a Hugging Face family in our terms (``options``: any other HF config field)."""

    arch: str = "hf:llama"
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_len: int = 512
    options: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        super().validate()
        _check(is_hf(self.arch), "arch", "hf:MODEL_TYPE")
        _check(_pos_int(self.n_layers), "n_layers", "a positive integer")
        _check(_pos_int(self.n_heads), "n_heads", "a positive integer")
        _check(_pos_int(self.max_len), "max_len", "a positive integer")
        _check(isinstance(self.options, dict), "options", "a table of Hugging Face config fields")
        step = self.width_step()
        _check(_pos_int(self.d_model) and self.d_model % step == 0, "d_model", f"a positive multiple of {step}")

    @property
    def model_type(self) -> str:
        return self.arch[len(PREFIX):]

    def width_step(self) -> int:
        return _width_step(self.model_type, self.n_heads)

    def hf_config(self) -> Any:
        """The ``transformers`` config (see the module docstring for the mapping)."""
        transformers = _transformers()
        d, mt = self.d_model, self.model_type
        vocab = max(self.vocab_size, self.n_classes)
        fields: dict[str, Any] = {"vocab_size": vocab, "hidden_size": d, "num_hidden_layers": self.n_layers,
                                  "tie_word_embeddings": False}
        if mt == "mamba":
            fields.update(expand=2, intermediate_size=2 * d, state_size=16)
        elif mt == "mamba2":
            fields.update(expand=2, head_dim=16, num_heads=2 * d // 16, n_groups=1, state_size=16)
        elif mt == "rwkv":
            fields.update(attention_hidden_size=d, intermediate_size=4 * d, context_length=self.max_len)
        else:
            fields.update(num_attention_heads=self.n_heads, intermediate_size=4 * d,
                          max_position_embeddings=self.max_len)
            if "num_key_value_heads" not in self.options:
                fields["num_key_value_heads"] = self.n_heads
            fields["head_dim"] = d // self.n_heads
        fields.update(self.options)
        try:
            return transformers.AutoConfig.for_model(mt, **fields)
        except (ValueError, TypeError) as exc:
            raise InvalidValue(f"invalid arch {self.arch!r}: transformers refused the config: {exc}") from None


class HFModel(WindTunnelModel):
    """A randomly initialised Hugging Face causal LM behind the :class:`WindTunnelModel` interface."""

    config: HFConfig

    def __init__(self, config: HFConfig) -> None:
        super().__init__(config)
        transformers = _transformers()
        try:
            self.net = transformers.AutoModelForCausalLM.from_config(config.hf_config())
        except (ValueError, TypeError, RuntimeError) as exc:
            raise InvalidValue(f"invalid arch {config.arch!r}: transformers could not build it: {exc}") from None
        self.feat = nn.Linear(config.n_features, config.d_model, bias=False) if config.n_features > 0 else None
        layers = _decoder_layers(self.net, config.n_layers)
        self.blocks = nn.ModuleList(_HookedLayer(_attention_of(layer) is not None) for layer in layers)
        self.hook_final = HookPoint()
        for hooks, layer in zip(self.blocks, layers):
            _attach(hooks, layer)
        self.net.get_output_embeddings().register_forward_pre_hook(lambda _, args: (self.hook_final(args[0]),))
        self._finish_init()

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        patterns = any(b.attn.hook_pattern.hooked for b in self.blocks if b.attn is not None)
        config = self.net.config
        fused = config._attn_implementation
        if patterns:  # only the eager path materialises the attention probabilities
            config._attn_implementation = "eager"
        try:
            if self.feat is not None:
                if features is None:
                    raise InvalidValue(f"invalid features: this model expects features [B,T,{self.config.n_features}]")
                emb = self.net.get_input_embeddings()(tokens) + self.feat(features.to(self.feat.weight.dtype))
                out = self.net(inputs_embeds=emb, use_cache=False)
            else:
                out = self.net(input_ids=tokens, use_cache=False)
        finally:
            config._attn_implementation = fused
        return out.logits[..., : self.config.n_classes].float()

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """The readout applied to a decoder-layer state ``x``: the family's final norm, then its output head
        (the first ``n_classes`` logits) — the logit lens the Bayes lens reads each layer through.  A family
        without a final norm feeds the head directly."""
        norm = _final_norm(self.net)
        return self.net.get_output_embeddings()(x if norm is None else norm(x))[..., : self.config.n_classes].float()

    @torch.no_grad()
    def unrotated_keys(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Per layer, the key projection's output before rotary, ``[B, T, key heads, d_h]`` (grouped-query
        models have fewer key heads than query heads).  ``InvalidValue`` for attention-free families."""
        from .hf_layout import attention_layout

        layout = attention_layout(self.net)
        keys: list[torch.Tensor | None] = [None] * len(layout.layers)
        handles = []
        for l in range(len(layout.layers)):
            module, to_keys = layout.key_module(l)
            handles.append(module.register_forward_hook(
                lambda _m, _i, out, l=l, to_keys=to_keys: keys.__setitem__(l, to_keys(out))))
        try:
            self(tokens, features)
        finally:
            for h in handles:
                h.remove()
        return [k for k in keys if k is not None]

    def capabilities(self) -> frozenset[str]:
        """``unembed`` and ``bypass_layer`` for every family; ``unrotated_keys`` where every decoder layer
        has attention (an attention-free or hybrid family has no key per layer to read)."""
        caps = {"unembed", "bypass_layer"}
        if all(block.attn is not None for block in self.blocks):
            caps.add("unrotated_keys")
        return frozenset(caps)

    @contextmanager
    def bypass_layer(self, layer: int) -> Iterator["HFModel"]:
        """Make decoder layer ``layer`` the identity: its output is replaced by its input."""
        hooks = self._layer(layer)
        entering: dict[str, torch.Tensor] = {}

        def remember(x: torch.Tensor) -> None:
            entering["x"] = x

        handles = [hooks.hook_resid_pre.register_forward_hook(lambda _m, _i, out: remember(out)),
                   hooks.hook_resid_post.register_forward_hook(lambda _m, _i, _out: entering["x"])]
        try:
            yield self
        finally:
            for h in handles:
                h.remove()


class _HookedAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hook_pattern = HookPoint()


class _HookedLayer(nn.Module):
    """Our hook names for one Hugging Face decoder layer (no parameters; fed by forward hooks)."""

    def __init__(self, has_attention: bool) -> None:
        super().__init__()
        self.hook_resid_pre = HookPoint()
        self.hook_resid_post = HookPoint()
        self.attn = _HookedAttention() if has_attention else None


def _decoder_layers(net: nn.Module, n_layers: int) -> list[nn.Module]:
    """The decoder layers: the first ``ModuleList`` of ``n_layers`` modules (``model.layers``,
    ``gpt_neox.layers``, ``backbone.layers``, ``transformer.h``, ...)."""
    for module in net.modules():
        if isinstance(module, nn.ModuleList) and len(module) == n_layers:
            return list(module)
    raise InvalidValue(f"invalid model: found no list of {n_layers} decoder layers in {type(net).__name__}")


def _final_norm(net: nn.Module) -> nn.Module | None:
    """The norm between the last decoder layer and the output head: the base model's last child whose
    class is a norm (``model.norm``, ``gpt_neox.final_layer_norm``, ``backbone.norm_f``, ...)."""
    norms = [m for m in net.base_model.children() if "norm" in type(m).__name__.lower()]
    return norms[-1] if norms else None


def _attention_of(layer: nn.Module) -> nn.Module | None:
    """The layer's self-attention module (its class name ends in ``Attention``), if it has one."""
    return next((m for m in layer.children() if type(m).__name__.endswith("Attention")), None)


def _attach(hooks: _HookedLayer, layer: nn.Module) -> None:
    """Route ``layer``'s input, output and attention probabilities through ``hooks``' hook points."""

    def pre(_module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if args:
            return (hooks.hook_resid_pre(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": hooks.hook_resid_pre(kwargs["hidden_states"])}

    def post(_module: nn.Module, _args: tuple, _kwargs: dict, output: Any) -> Any:
        if isinstance(output, tuple):
            return (hooks.hook_resid_post(output[0]), *output[1:])
        return hooks.hook_resid_post(output)

    layer.register_forward_pre_hook(pre, with_kwargs=True)
    layer.register_forward_hook(post, with_kwargs=True)
    attention = _attention_of(layer)
    if attention is None or hooks.attn is None:
        return
    point = hooks.attn.hook_pattern

    def pattern(_module: nn.Module, _args: tuple, output: Any) -> None:
        weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        if weights is not None and point.hooked:
            if point(weights) is not weights:
                raise InvalidValue("invalid hook: an hf: model's attention pattern can be read, not replaced "
                                   "(its output is already computed); patch hook_resid_pre/post instead")

    attention.register_forward_hook(pattern)


def make_hf(arch: str, task: Any, params: int | None = None, **overrides: Any) -> HFModel:
    """Build ``hf:MODEL_TYPE`` for ``task``; ``params=N`` searches ``d_model`` so the count is within ±3% of N."""
    check_hf_arch(arch)
    known = {"d_model", "n_layers", "n_heads", "max_len", "options"}
    options = dict(overrides.pop("options", {}) or {})
    for k in list(overrides):
        if k not in known:  # anything else is a Hugging Face config field
            options[k] = overrides.pop(k)
    base = {"arch": arch, "vocab_size": task.vocab_size, "n_classes": task.n_classes, "n_features": task.n_features,
            "max_len": overrides.pop("max_len", 4 * task.seq_len), "options": options, **overrides}
    if params is None:
        model = HFModel(HFConfig(**base))
    else:
        if "d_model" in overrides:
            raise InvalidValue("invalid d_model: cannot be given together with params (params chooses the width)")

        step = _width_step(arch[len(PREFIX):], base.get("n_heads", HFConfig.n_heads))

        # the secondary knob when the width grid is too coarse (as d_ff / d_inner for our models):
        # the MLP width of attention families, the state size of mamba2
        mt = arch[len(PREFIX):]
        knob = "state_size" if mt == "mamba2" else None if mt in _ATTENTION_FREE else "intermediate_size"
        if knob in options:
            knob = None

        def config_at(width: int, value: int | None) -> HFConfig:
            extra = {knob: value} if knob is not None and value is not None else {}
            return HFConfig(**{**base, "d_model": width, "options": {**options, **extra}})

        def refine(width: int) -> tuple[range, int]:
            default = 16 if knob == "state_size" else 4 * width
            return range(1, 16 * default + 1), default

        def count(cfg: ModelConfig) -> int:
            with torch.device("meta"):
                return HFModel(cfg).n_params()  # type: ignore[arg-type]

        cfg = fit_width(params, config_at, list(range(step, 4097, step)), refine if knob else None, TOLERANCE, count)
        model = HFModel(cfg)  # type: ignore[arg-type]
    check_contract(model, task)  # the same shape / finiteness / causality checks as any outside model
    return model


def build_hf(config: dict[str, Any]) -> HFModel:
    """Rebuild an ``hf:`` model from its saved ``config_dict()`` (fresh weights)."""
    check_hf_arch(config.get("arch", ""))
    allowed = {"arch", "vocab_size", "n_classes", "n_features", "d_model", "n_layers", "n_heads", "max_len", "options"}
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise InvalidValue(f"unknown parameter {unknown[0]!r} for an hf: model: allowed {', '.join(sorted(allowed))}")
    return HFModel(HFConfig(**config))
