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
first half's logits must not move), not assumed.  Modules of type
:class:`~windtunnel.models.HookPoint` inside the user's module are found and named like ours
(``net.<path>``), so ``hooks`` and ``run_with_cache`` work on them; analyses that need our block
structure say they do not apply.

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

import torch
from torch import nn

from .base import ModelConfig, WindTunnelModel
from .contract import check_contract
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

    def __init__(self, config: ExternalConfig) -> None:
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
        self.blocks = nn.ModuleList()  # no windtunnel blocks: block-level analyses do not apply
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

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(tokens, features) if self.with_features else self.net(tokens)



def make_external(arch: str, task: Any, params: int | None = None, **options: Any) -> ExternalModel:
    """Build the user model ``arch`` (``module:factory``) for ``task``; see the module docstring."""
    config = ExternalConfig(
        arch=arch, vocab_size=task.vocab_size, n_classes=task.n_classes, n_features=task.n_features,
        task=task.name, task_params=task.params(), params=params, options=dict(options),
    )
    return ExternalModel(config)


def build_external(config: dict[str, Any]) -> ExternalModel:
    """Rebuild a user model from its saved ``config_dict()`` (fresh weights)."""
    allowed = {"arch", "vocab_size", "n_classes", "n_features", "task", "task_params", "params", "options"}
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise InvalidValue(f"unknown parameter {unknown[0]!r} for an external model: allowed {', '.join(sorted(allowed))}")
    return ExternalModel(ExternalConfig(**config))
