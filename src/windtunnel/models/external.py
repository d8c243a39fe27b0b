r"""Bring your own model: ``--arch package.module:factory``.

A model from outside the package enters the wind tunnel through one callable, the *factory*:

.. code-block:: python

    def factory(task, params=None, **options) -> torch.nn.Module: ...

* ``task`` is the :class:`~windtunnel.tasks.Task` (``task.vocab_size``, ``task.n_classes``,
  ``task.n_features``, ``task.seq_len`` size the model);
* ``params`` (optional in the signature) is the capacity target; a factory that accepts it must
  return a model within ±3% of it (``models.fit_width`` does the search), and one given a target
  it cannot take is refused, because every row of a table has the same budget;
* ``options`` are the ``model`` overrides of the training config (``--config``), passed as
  keyword arguments.

The returned module maps ``tokens [B,T] long`` — and, for tasks with real-valued inputs,
``features [B,T,F] float32`` as a second argument — to logits ``[B,T,C]``, ``C = task.n_classes``.
The logits at position ``t`` may depend on inputs ``0..t`` only.  Both are *checked* when the model
is built (one forward pass on sampled episodes, then the second half of the inputs resampled: the
first half's logits must not move), not assumed.

**Hooks and layers.**  Modules of type :class:`~windtunnel.models.HookPoint` inside the user's module
are found, so ``hooks`` and ``run_with_cache`` work on them.  A module that keeps its layers in an
``nn.ModuleList`` (or ``nn.Sequential``) named ``blocks`` has layers in the wind tunnel's sense: its hook
points under ``blocks`` keep their own paths as names (``blocks.0.attn.hook_pattern``, exactly as in this
package's transformer), as do ``hook_embed`` and ``hook_final`` at its top level; every other hook point is
named ``net.<path>``.  The diagnostics read these names, so a user's transformer whose layers expose
``blocks.{l}.hook_resid_pre``, ``hook_resid_post``, ``hook_attn_out``, ``hook_mlp_out`` and
``attn.hook_q|k|v|scores|pattern|z`` gets every diagnostic our transformer gets
(``windtunnel.geometry.registry.capabilities_markdown`` lists what each one reads).

**Stream discovery.**  A module with no hook names of ours still has a residual stream when it keeps its
layers in a list: :mod:`windtunnel.models.discovery` finds the list (the longest ``nn.ModuleList`` /
``nn.Sequential`` run of same-typed modules whose members each run once, in order, each taking the previous
one's output, the last reaching the logits — the rule in full is that module's docstring) and exposes the
stream entering and leaving each layer as ``blocks.{l}.hook_resid_pre`` / ``blocks.{l}.hook_resid_post``, by
forward hooks on the user's layers that are registered only inside :meth:`ExternalModel.hooks` (and so
``run_with_cache``, patching, steering and ``bypass_layer``), and the modules after the last layer as the readout
``unembed`` where applying them to the last stream reproduces the logits.  The user's own hook points win: where
their layers under ``blocks`` already name ``blocks.{l}.hook_resid_post``, discovery does not run.
:attr:`ExternalModel.stream` holds what it found, or why it found nothing; :meth:`ExternalModel.describe_stream`
says it in one line (``windtunnel analyze`` prints it).  Nothing is added to the module tree: the parameters and
the checkpoint's keys are the user's.

**Parts and methods.**  ``norm`` and ``head`` of the user's module (the final norm and the output head,
``logits = head(norm(x))``) are the model's readout (``unembed``, a readout learning rate); a module
without them may define ``unembed(x)`` itself.  ``unrotated_keys(tokens)`` (keys before any rotary
embedding, per layer) is forwarded when the module defines it.  A layer is bypassed
(``bypass_layer``) by hooks: what leaves it at ``hook_resid_post`` is replaced by what entered at
``hook_resid_pre``.  :meth:`ExternalModel.capabilities` says which of these the module has.

The factory is found by importing ``package.module`` (the current folder is searched first, as a
user running ``windtunnel`` from their project expects) and reading the attribute ``factory``.  The
saved config records the factory, the task and the options, so ``models.build`` rebuilds the model
for evaluation and resuming exactly as training built it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from contextlib import ExitStack, contextmanager
from typing import Iterator, Sequence

import torch
from torch import nn

from .base import HookFn, HookPoint, ModelConfig, WindTunnelModel, bypass_by_hooks
from .contract import check_contract
from . import discovery
from .discovery import NotFound, Stream
from .sizing import TOLERANCE
from ..errors import InvalidValue



def is_external(arch: Any) -> bool:
    """Whether ``arch`` names a model from outside the registry: a user factory (``module:attribute``)
    or a Hugging Face family (``hf:MODEL_TYPE``, ``models.hf``)."""
    return isinstance(arch, str) and ":" in arch


def load_factory(arch: str) -> Callable[..., nn.Module]:
    """Import ``package.module`` and return its attribute ``factory`` (``InvalidValue`` on any failure);
    for ``hf:MODEL_TYPE``, check that transformers can build that family."""
    if arch.startswith("hf:"):
        from .hf import check_hf_arch, make_hf

        check_hf_arch(arch)
        return make_hf
    module_name, _, attr = arch.partition(":")
    if not module_name or not attr or not all(part.isidentifier() for part in module_name.split(".") + attr.split(".")):
        raise InvalidValue(f"invalid arch {arch!r}: a model from outside windtunnel is named package.module:factory")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidValue(f"invalid arch {arch!r}: cannot import {module_name!r} ({exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InvalidValue(f"invalid arch {arch!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise InvalidValue(f"invalid arch {arch!r}: {attr!r} is not callable")
    return obj


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    return name in sig.parameters or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


@dataclass
class ExternalConfig(ModelConfig):
    """What rebuilds a user model: the factory, the task it was built for, the target and the options."""

    arch: str = ""
    task: str = ""
    task_params: dict[str, Any] = field(default_factory=dict)
    params: int | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        super().validate()
        if not is_external(self.arch):
            raise InvalidValue(f"invalid arch {self.arch!r}: a model from outside windtunnel is named package.module:factory")


class ExternalModel(WindTunnelModel):
    """A user's module behind the :class:`WindTunnelModel` interface (``net`` is the user's module)."""

    def __init__(self, config: ExternalConfig, *, discover: bool = True) -> None:
        super().__init__(config)
        from .. import tasks

        task = tasks.make(config.task, **config.task_params)
        factory = load_factory(config.arch)
        kwargs = dict(config.options)
        if config.params is not None:
            if not _accepts(factory, "params"):
                raise InvalidValue(
                    f"invalid arch {config.arch!r}: a parameter target was given ({config.params}) but the factory "
                    "takes no 'params' argument; accept it and size the model (windtunnel.models.fit_width helps)"
                )
            kwargs["params"] = config.params
        try:
            net = factory(task, **kwargs)
        except TypeError as exc:
            raise InvalidValue(f"invalid arch {config.arch!r}: calling the factory failed: {exc}") from None
        if not isinstance(net, nn.Module):
            raise InvalidValue(f"invalid arch {config.arch!r}: the factory returned {type(net).__name__}, not a torch.nn.Module")
        self.net = net
        self.with_features = task.n_features > 0
        self._finish_init()
        n = self.n_params()
        if config.params is not None and abs(n - config.params) > TOLERANCE * config.params:
            raise InvalidValue(
                f"invalid arch {config.arch!r}: the factory built {n} parameters for a target of {config.params} "
                f"(must be within {TOLERANCE:.0%}, the budget every architecture gets)"
            )
        if not any(True for _ in self.parameters()):
            raise InvalidValue(f"invalid arch {config.arch!r}: the model has no parameters")
        check_contract(self, task)
        self.stream: Stream | NotFound | None = None
        """What stream discovery found (:mod:`windtunnel.models.discovery`): a :class:`Stream`, the reason none
        was found (:class:`NotFound`), or ``None`` where it did not run (the user's own hooks under ``blocks``
        name the stream already, or ``discover=False``)."""
        if discover and not self._own_stream():
            ep = task.sample(2, seed=0)
            self.stream = discovery.find_stream(self, self.net, {k: v for k, v in ep.inputs.items()})
        self._layers = nn.ModuleList(self._found().layers) if self._found() is not None else None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_layers":  # the discovered layers, listed without registering them twice (they live in net)
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def _own_stream(self) -> bool:
        """Whether the user's own hook points name the stream after every layer (``blocks.{l}.hook_resid_post``)."""
        names = {self._public_name(n) for n, m in self.named_modules() if isinstance(m, HookPoint)}
        L = len(self.blocks)
        return L > 0 and all(f"blocks.{l}.hook_resid_post" in names for l in range(L))

    def _found(self) -> Stream | None:
        """The discovered stream, if discovery found one (``None`` before it ran, or where it found none)."""
        stream = self.__dict__.get("stream")
        return stream if isinstance(stream, Stream) else None

    def describe_stream(self) -> str:
        """One line saying where the model's stream comes from: the user's own hooks, what discovery found
        (the layers, the hooks exposed, the readout, what is not exposed and why), or why none was found."""
        stream = self.__dict__.get("stream")
        if stream is not None:
            return stream.describe()
        if self._own_stream():
            return f"layers: blocks ({len(self.blocks)}), with the model's own hook points"
        return "stream discovery not run"

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(tokens, features) if self.with_features else self.net(tokens)

    # --- the user's layers, hooks, readout and methods ----------------------------------------------
    @property
    def blocks(self) -> nn.Module:  # type: ignore[override]
        """The user's layers: their module's ``blocks`` when it is an ``nn.ModuleList`` or ``nn.Sequential``,
        else the list of layers stream discovery found, else no layers (an empty list).  Not registered a
        second time: the parameters live under ``net``."""
        layers = getattr(self.net, "blocks", None)
        if isinstance(layers, (nn.ModuleList, nn.Sequential)):
            return layers
        found = self.__dict__.get("_layers")
        return found if found is not None else nn.ModuleList()

    def __getattr__(self, name: str) -> Any:
        """``norm`` and ``head`` are the user's module's, when it has them (the readout of the skeleton)."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in ("norm", "head"):
                part = getattr(self._modules.get("net"), name, None)
                if isinstance(part, nn.Module):
                    return part
            raise

    def _public_name(self, name: str) -> str:
        """The hook name of the hook point at module path ``name`` (``net.<path>``): the user's own path for
        hook points under their ``blocks`` and for a top-level ``hook_embed`` / ``hook_final``."""
        inner = name[len("net."):]
        own_blocks = isinstance(getattr(self.net, "blocks", None), (nn.ModuleList, nn.Sequential))
        if inner in ("hook_embed", "hook_final") or (inner.startswith("blocks.") and own_blocks):
            return inner
        return name

    def _finish_init(self) -> None:
        for name, module in self.named_modules():
            if isinstance(module, HookPoint):
                module.name = self._public_name(name)

    def hook_points(self) -> dict[str, HookPoint]:
        """All hook points of the user's module by hook name (see the module docstring), then the stream's
        that discovery found (``blocks.{l}.hook_resid_pre/post``), where the user's own do not take the name."""
        points = {self._public_name(name): m for name, m in self.named_modules() if isinstance(m, HookPoint)}
        found = self._found()
        if found is not None:
            points.update({n: p for n, p in found.points.items() if n not in points})
        return points

    @contextmanager
    def hooks(self, fwd_hooks: Sequence[tuple[str, HookFn]]) -> Iterator["ExternalModel"]:
        """:meth:`WindTunnelModel.hooks`; where a hook point of the discovered stream is among those hooked,
        the forward hooks that feed it from the user's layers are registered for the block too, and removed
        on exit, also when the body or a hook raises."""
        found = self._found()
        with ExitStack() as stack:
            if found is not None:
                virtual = set(found.points.values())
                points = self.hook_points()
                if any(points[n] in virtual for name, _ in fwd_hooks for n in self._select(name)):
                    stack.enter_context(found.routed())
            stack.enter_context(super().hooks(fwd_hooks))
            yield self

    def reset_hooks(self) -> None:
        """Remove every forward hook from every hook point, and the discovered stream's hooks on the layers."""
        super().reset_hooks()
        found = self._found()
        if found is not None:
            found.detach()

    def _net_capabilities(self) -> frozenset[str]:
        if isinstance(self.net, WindTunnelModel):
            return self.net.capabilities()
        return frozenset(m for m in ("unembed", "unrotated_keys") if callable(getattr(self.net, m, None)))

    def capabilities(self) -> frozenset[str]:
        """``unembed`` when the user's module has ``norm`` and ``head`` or defines ``unembed``, or stream
        discovery found a readout that reproduces the logits;
        ``unrotated_keys`` when it defines that; ``bypass_layer`` when every layer exposes
        ``blocks.{l}.hook_resid_pre`` and ``blocks.{l}.hook_resid_post``."""
        own = self._net_capabilities()
        caps = {m for m in ("unembed", "unrotated_keys") if m in own}
        if all(isinstance(getattr(self.net, part, None), nn.Module) for part in ("norm", "head")):
            caps.add("unembed")
        found = self._found()
        if found is not None and found.readout is not None:
            caps.add("unembed")
        names = set(self.hook_names())
        L = len(self.blocks)
        if L > 0 and all(f"blocks.{l}.hook_resid_{x}" in names for l in range(L) for x in ("pre", "post")):
            caps.add("bypass_layer")
        return frozenset(caps)

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """The user's readout of a residual-stream state: their ``unembed(x)`` if they define one, else
        ``head(norm(x))``, else the readout stream discovery found (float32 logits).  ``InvalidValue`` for a
        module with none."""
        if "unembed" in self._net_capabilities() and callable(getattr(self.net, "unembed", None)):
            return self.net.unembed(x).float()
        found = self._found()
        own = all(isinstance(getattr(self.net, part, None), nn.Module) for part in ("norm", "head"))
        if not own and found is not None and found.readout is not None:
            return found.unembed(x)
        if "unembed" not in self.capabilities():
            raise InvalidValue(f"invalid unembed: the {self.config.arch} model has no readout (define unembed(x), "
                               "or submodules norm and head)")
        return super().unembed(x)

    def unrotated_keys(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The user's ``unrotated_keys(tokens[, features])``: per layer, keys before any rotary embedding,
        ``[B, T, key heads, d_head]``.  ``InvalidValue`` when their module does not define it."""
        if "unrotated_keys" not in self._net_capabilities():
            raise InvalidValue(f"invalid unrotated_keys: the {self.config.arch} model does not define "
                               "unrotated_keys(tokens)")
        with torch.no_grad():
            keys = self.net.unrotated_keys(tokens, features) if self.with_features else self.net.unrotated_keys(tokens)
        return list(keys)

    @contextmanager
    def bypass_layer(self, layer: int) -> Iterator["ExternalModel"]:
        """Make layer ``layer`` the identity by hooks (:func:`~windtunnel.models.base.bypass_by_hooks`)."""
        if "bypass_layer" not in self.capabilities():
            raise InvalidValue(f"invalid bypass_layer: the {self.config.arch} model does not expose "
                               "blocks.{l}.hook_resid_pre and hook_resid_post on every layer")
        with bypass_by_hooks(self, layer):
            yield self



def make_external(arch: str, task: Any, params: int | None = None, *, discover: bool = True,
                  **options: Any) -> ExternalModel:
    """Build the user model ``arch`` (``module:factory``) for ``task``; see the module docstring.
    ``discover=False`` leaves the stream undiscovered (the model as it was before discovery)."""
    config = ExternalConfig(
        arch=arch, vocab_size=task.vocab_size, n_classes=task.n_classes, n_features=task.n_features,
        task=task.name, task_params=task.params(), params=params, options=dict(options),
    )
    return ExternalModel(config, discover=discover)


def build_external(config: dict[str, Any]) -> ExternalModel:
    """Rebuild a user model from its saved ``config_dict()`` (fresh weights)."""
    allowed = {"arch", "vocab_size", "n_classes", "n_features", "task", "task_params", "params", "options"}
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise InvalidValue(f"unknown parameter {unknown[0]!r} for an external model: allowed {', '.join(sorted(allowed))}")
    return ExternalModel(ExternalConfig(**config))
