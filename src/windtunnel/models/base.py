"""What every wind-tunnel network shares: hook points, the model base class, shared layers.

Conventions (TransformerLens style):

* every interesting activation passes through a :class:`HookPoint`, an identity module whose
  dotted name in the model (``blocks.3.attn.hook_pattern``) is stable across versions and
  architectures;
* ``model.hooks([(name, fn)])`` attaches forward hooks for the duration of a ``with`` block;
  ``fn(tensor, name)`` may return a replacement tensor (activation patching) or ``None``;
  the hooks are removed on exit, also when the body or a hook raises;
* ``model.run_with_cache(tokens, names=...)`` returns ``(logits, cache)`` with detached tensors;
* ablations (``ablate_head``, ``bypass_layer``) are context managers that flip runtime flags
  only, so the model is bitwise the same afterwards.

Shapes: ``tokens [B,T] long``, optional ``features [B,T,F] float32``, logits ``[B,T,C] float32``.
The logits at position ``t`` may depend on inputs ``0..t`` only (causality; tested for every
architecture).
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from ..errors import InvalidValue, is_int

try:  # torch >= 2.3; older versions keep PyTorch's own backend choice
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # pragma: no cover
    SDPBackend, sdpa_kernel = None, None  # type: ignore[assignment,misc]

HookFn = Callable[[torch.Tensor, str], "torch.Tensor | None"]


CPU_MATH_ATTENTION_MAX_T = 80
"""Up to this sequence length, causal attention on a CPU runs PyTorch's plain ("math") SDPA
backend rather than its flash kernel: measured forward + backward on 2 threads, d_head 16, the
math backend is 2.1× faster at T = 17 (the main job's bijection), 1.14× at T = 73, and slower from
T ≈ 97 on (0.75× at 129, 0.33× at 257), where the [T, T] score matrix it materialises costs more
than the flash kernel's tiling saves."""


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    r"""Causal scaled dot-product attention on ``[B, H, T, d]`` tensors,
    :math:`\mathrm{softmax}(q k^\top/\sqrt{d} + M_{\text{causal}})\,v`, through
    ``F.scaled_dot_product_attention`` with the backend that is faster for the shape (on a CPU and
    ``T ≤`` :data:`CPU_MATH_ATTENTION_MAX_T`: the math backend; otherwise PyTorch's choice).  The
    backends agree to float rounding."""
    if q.device.type == "cpu" and q.shape[-2] <= CPU_MATH_ATTENTION_MAX_T and sdpa_kernel is not None:
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)


def members_first(members: int, in_dims: Sequence[int | None], args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The arguments of an ``autograd.Function``'s vmap rule with the members' dimension first: moved there where the
    argument has one (``in_dims``), expanded to ``members`` where it is shared."""
    return [t.movedim(d, 0) if d is not None else t.expand(members, *t.shape) for t, d in zip(args, in_dims)]


class HookPoint(nn.Module):
    """Identity ``x -> x`` that exists to be hooked; ``name`` is its dotted path in the model."""

    def __init__(self) -> None:
        super().__init__()
        self.name: str = ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @property
    def hooked(self) -> bool:
        """Whether any forward hook is attached (models use this to take the slow, explicit path)."""
        return bool(self._forward_hooks)


class RMSNorm(nn.Module):
    r"""Root-mean-square norm, :math:`y = x / \sqrt{\mathrm{mean}(x^2) + \epsilon} \cdot w` (no bias)."""

    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class InputEmbedding(nn.Module):
    r"""Token embedding plus, for real-valued tasks, a linear map of the features.

    :math:`e_t = E[\text{tokens}_t] + W_f \, \text{features}_t` (``W_f`` only when ``n_features > 0``).
    """

    def __init__(self, vocab_size: int, n_features: int, d: int) -> None:
        super().__init__()
        self.n_features = n_features
        self.tok = nn.Embedding(vocab_size, d)
        self.feat = nn.Linear(n_features, d, bias=False) if n_features > 0 else None

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        x = self.tok(tokens)
        if self.feat is None and features is not None:
            raise InvalidValue("invalid features: this model was built for a task without features (n_features=0)")
        if self.feat is not None:
            if features is None:
                raise InvalidValue(f"invalid features: this model expects features [B,T,{self.n_features}]")
            if features.shape[:2] != tokens.shape or features.shape[-1] != self.n_features:
                raise InvalidValue(
                    f"invalid features: shape {tuple(features.shape)} does not match tokens "
                    f"{tuple(tokens.shape)} and n_features={self.n_features}"
                )
            x = x + self.feat(features.to(x.dtype))
        return x


@dataclasses.dataclass
class ModelConfig:
    """Fields every architecture's config has (set from the task by ``models.make``)."""

    arch: str = ""
    vocab_size: int = 2
    n_classes: int = 2
    n_features: int = 0

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field and its allowed values."""
        _check(isinstance(self.vocab_size, int) and self.vocab_size >= 1, "vocab_size", "a positive integer")
        _check(isinstance(self.n_classes, int) and self.n_classes >= 1, "n_classes", "a positive integer")
        _check(isinstance(self.n_features, int) and self.n_features >= 0, "n_features", "an integer >= 0")

    def __post_init__(self) -> None:
        self.validate()


def _check(condition: bool, field: str, allowed: str) -> None:
    if not condition:
        raise InvalidValue(f"invalid {field}: must be {allowed}")


def _pos_int(value: Any) -> bool:
    return is_int(value) and value >= 1


class Block(nn.Module):
    """A residual-stream block: ``hook_resid_pre -> (mix unless bypassed) -> hook_resid_post``.

    Subclasses implement :meth:`mix`, mapping the incoming residual stream to the outgoing one.
    ``bypass`` (set by :meth:`WindTunnelModel.bypass_layer`) makes the block the identity.
    """

    def __init__(self) -> None:
        super().__init__()
        self.bypass = False
        self.hook_resid_pre = HookPoint()
        self.hook_resid_post = HookPoint()

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.hook_resid_pre(x)
        if not self.bypass:
            x = self.mix(x)
        return self.hook_resid_post(x)


class WindTunnelModel(nn.Module):
    """Base class: ``forward(tokens, features=None) -> logits [B,T,C]`` plus hooks and ablations.

    The skeleton every architecture shares is written here once (:meth:`forward`)::

        x = hook_embed(embed_inputs(tokens, features))   # InputEmbedding (+ positions)
        x = to_stream(x)                                  # identity, or the MLP's window
        x = blocks[L-1](... blocks[0](x))                 # hook_resid_pre / hook_resid_post each
        logits = head(hook_final(norm(x)))

    Subclasses set ``embed`` (:class:`InputEmbedding`), ``hook_embed``, ``blocks`` (an
    ``nn.ModuleList`` of :class:`Block`), ``norm``, ``hook_final`` and ``head``, override
    :meth:`embed_inputs` / :meth:`to_stream` where they differ, and call :meth:`_finish_init` at the
    end of ``__init__``.  Models outside this shape override ``forward`` itself.
    """

    config: ModelConfig
    blocks: nn.ModuleList

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config

    # --- the skeleton ------------------------------------------------------------------------
    def embed_inputs(self, tokens: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
        """Inputs -> the vectors ``hook_embed`` sees (default: the token (+ feature) embedding)."""
        return self.embed(tokens, features)

    def to_stream(self, x: torch.Tensor) -> torch.Tensor:
        """The embedded inputs -> the residual stream entering block 0 (default: unchanged)."""
        return x

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """``tokens [B,T]`` (+ ``features [B,T,F]``) -> logits ``[B,T,n_classes]`` (float32)."""
        x = self.to_stream(self.hook_embed(self.embed_inputs(tokens, features)))
        for block in self.blocks:
            x = block(x)
        return self.head(self.hook_final(self.norm(x))).float()

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """The readout applied to a residual-stream state ``x [..., d_model]``: ``head(norm(x))`` (float32
        logits).  Applied to ``blocks.{L-1}.hook_resid_post`` it is the model's output; to an earlier
        layer's stream, the logit lens (the Bayes lens reads every layer through it)."""
        return self.head(self.norm(x)).float()

    # --- bookkeeping -------------------------------------------------------------------
    def _finish_init(self) -> None:
        for name, module in self.named_modules():
            if isinstance(module, HookPoint):
                module.name = name

    def readout_parameters(self) -> list[nn.Parameter]:
        """The readout's parameters: the final norm's gain and the output head, the two maps between
        the last residual stream and the logits (``logits = head(norm(x))``).  Training can give them
        a learning rate of their own (``TrainConfig.readout_lr_mult``).  ``InvalidValue`` for a model
        without that skeleton (a Hugging Face or user model)."""
        parts = [getattr(self, name, None) for name in ("norm", "head")]
        if not all(isinstance(m, nn.Module) for m in parts):
            raise InvalidValue(f"invalid readout_lr_mult: the {self.config.arch} model has no separate readout "
                               "(final norm and head) to give its own learning rate; leave readout_lr_mult at 1")
        return [p for m in parts for p in m.parameters()]

    def n_params(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def config_dict(self) -> dict[str, Any]:
        """The config as a plain JSON-able dict (``models.build`` rebuilds the architecture from it)."""
        return dataclasses.asdict(self.config)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # --- hooks ---------------------------------------------------------------------------
    def hook_points(self) -> dict[str, HookPoint]:
        """All hook points by dotted name (module registration order)."""
        return {name: m for name, m in self.named_modules() if isinstance(m, HookPoint)}

    def hook_names(self) -> list[str]:
        """The stable names accepted by :meth:`hooks` and :meth:`run_with_cache`."""
        return list(self.hook_points())

    def _select(self, names: Any) -> list[str]:
        points = self.hook_points()
        if names is None:
            return list(points)
        if isinstance(names, str):
            names = [names]
        if callable(names):
            return [n for n in points if names(n)]
        names = list(names)
        for n in names:
            if n not in points:
                raise InvalidValue(f"unknown hook name {n!r}: see model.hook_names()")
        return names

    @contextmanager
    def hooks(self, fwd_hooks: Sequence[tuple[str, HookFn]]) -> Iterator["WindTunnelModel"]:
        """Attach forward hooks for the duration of the ``with`` block.

        ``fwd_hooks`` is a list of ``(name, fn)``; ``name`` may also be a filter
        ``callable(name) -> bool``.  ``fn(tensor, name)`` returns ``None`` (observe) or a tensor
        that replaces the activation downstream.  Handles are removed on exit, whatever happens.
        """
        points = self.hook_points()
        handles = []
        try:
            for name, fn in fwd_hooks:
                for n in self._select(name):
                    handles.append(points[n].register_forward_hook(_adapter(fn, n)))
            yield self
        finally:
            for h in handles:
                h.remove()

    def run_with_cache(
        self,
        tokens: torch.Tensor,
        features: torch.Tensor | None = None,
        names: Any = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Forward pass recording activations: ``(logits, cache)``.

        ``names``: ``None`` (every hook point), a name, a list of names, or a filter
        ``callable(name) -> bool``.  Cached tensors are detached; hooks are removed afterwards.
        """
        cache: dict[str, torch.Tensor] = {}

        def save(t: torch.Tensor, name: str) -> None:
            cache[name] = t.detach()

        with self.hooks([(n, save) for n in self._select(names)]):
            logits = self(tokens, features)
        return logits, cache

    def reset_hooks(self) -> None:
        """Remove every forward hook from every hook point (a safety net; ``hooks`` cleans up itself)."""
        for m in self.hook_points().values():
            m._forward_hooks.clear()

    # --- capabilities ------------------------------------------------------------------
    def capabilities(self) -> frozenset[str]:
        """The optional methods this model really implements (the diagnostics' ``NAME()`` requirements,
        ``windtunnel.geometry.registry.METHODS``): ``unembed`` when it has a final ``norm`` and ``head`` (or
        overrides :meth:`unembed`), ``bypass_layer`` when it has at least one layer and every layer is a
        :class:`Block`, ``unrotated_keys`` when it defines that method.  A subclass whose methods differ
        from these rules overrides this."""
        caps = set()
        readout = all(isinstance(getattr(self, part, None), nn.Module) for part in ("norm", "head"))
        if readout or type(self).unembed is not WindTunnelModel.unembed:
            caps.add("unembed")
        blocks = getattr(self, "blocks", None)
        if blocks is not None and len(blocks) > 0 and all(isinstance(b, Block) for b in blocks):
            caps.add("bypass_layer")
        if callable(getattr(self, "unrotated_keys", None)):
            caps.add("unrotated_keys")
        return frozenset(caps)

    # --- ablations -----------------------------------------------------------------------
    def _layer(self, layer: int) -> Block:
        n = len(self.blocks)
        if not isinstance(layer, int) or not -n <= layer < n:
            raise InvalidValue(f"invalid layer: must be an integer in [0, {n - 1}], got {layer!r}")
        return self.blocks[layer]

    @contextmanager
    def ablate_head(self, layer: int, head: int) -> Iterator["WindTunnelModel"]:
        """Zero one attention head's output ``z`` before the output projection (transformers only)."""
        raise InvalidValue(f"invalid ablate_head: architecture {self.config.arch!r} has no attention heads")
        yield self  # pragma: no cover

    @contextmanager
    def bypass_layer(self, layer: int) -> Iterator["WindTunnelModel"]:
        """Make block ``layer`` the identity (it returns its input) inside the ``with`` block."""
        block = self._layer(layer)
        old = block.bypass
        block.bypass = True
        try:
            yield self
        finally:
            block.bypass = old


@contextmanager
def bypass_by_hooks(model: WindTunnelModel, layer: int) -> Iterator[WindTunnelModel]:
    """Make layer ``layer`` the identity inside the ``with`` block by hooks alone: what leaves it at
    ``blocks.{layer}.hook_resid_post`` is replaced by what entered it at ``blocks.{layer}.hook_resid_pre``
    (for models whose layers are not this package's :class:`Block`)."""
    n = len(model.blocks)
    if not isinstance(layer, int) or not -n <= layer < n:
        raise InvalidValue(f"invalid layer: must be an integer in [0, {n - 1}], got {layer!r}")
    layer %= n
    entering: dict[str, torch.Tensor] = {}

    def remember(x: torch.Tensor, _name: str) -> None:
        entering["x"] = x

    with model.hooks([(f"blocks.{layer}.hook_resid_pre", remember),
                      (f"blocks.{layer}.hook_resid_post", lambda _x, _name: entering["x"])]):
        yield model


def _adapter(fn: HookFn, name: str) -> Callable[[nn.Module, Any, torch.Tensor], Any]:
    def hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> Any:
        return fn(output, name)

    return hook
