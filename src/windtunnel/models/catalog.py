"""The architecture catalog: each architecture registers itself, in its own module, with its sizing rule.

``register_arch(name, Arch(...))`` at the end of a model module is all it takes for
``models.make(name, task, params=N)``, ``windtunnel … --arch name``, the table's rows and the
contract tests (which build ``Arch.tiny``) to know it.  This module imports no model, so the model
modules can import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .base import ModelConfig, WindTunnelModel
from ..errors import InvalidValue


@dataclass(frozen=True)
class Arch:
    """How to build and size one architecture.

    ``from_task``: config fields filled from the task (name -> function of the task); ``refine``:
    the secondary size capacity matching turns when the width grid is too coarse (``d_ff``,
    ``d_inner``; ``None``: width only); ``width_step(config fields) -> int``: the spacing of
    admissible widths; ``order``: the place in ``names()``; ``tiny``: config overrides of the small
    instance every test over the registry builds (at least two layers); ``step_cost``: the time of a
    training step relative to the transformer's at the same size, one thread (orders work so that the
    slowest cells start first)."""

    model: type[WindTunnelModel]
    config: type[ModelConfig]
    from_task: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    refine: str | None = None
    width_step: Callable[[dict[str, Any]], int] = lambda cfg: 1
    order: int = 100
    tiny: dict[str, Any] = field(default_factory=dict)
    step_cost: float = 1.0

    def refine_default(self, cfg: ModelConfig) -> int | None:
        """The secondary size's default for ``cfg`` (what capacity matching tries to stay near)."""
        if self.refine == "d_ff":
            return cfg.ff_dim  # type: ignore[attr-defined]
        if self.refine == "d_inner":
            return cfg.inner  # type: ignore[attr-defined]
        return None


_ARCHS: dict[str, Arch] = {}


def register_arch(name: str, arch: Arch) -> Arch:
    """Make ``name`` buildable by ``models.make`` (a re-registration replaces the entry)."""
    if ":" in name:
        raise InvalidValue(f"invalid architecture name {name!r}: ':' is reserved for package.module:factory and hf:")
    _ARCHS[name] = arch
    return arch


def names() -> list[str]:
    """Registered architectures, in their declared order."""
    return sorted(_ARCHS, key=lambda n: (_ARCHS[n].order, n))


def step_cost(name: str) -> float:
    """``Arch.step_cost`` of a registered architecture; 1 for a model from outside the registry."""
    return _ARCHS[name].step_cost if name in _ARCHS else 1.0


def get(name: str) -> Arch:
    if name not in _ARCHS:
        raise InvalidValue(f"unknown architecture {name!r}: choose from {', '.join(names())}")
    return _ARCHS[name]
