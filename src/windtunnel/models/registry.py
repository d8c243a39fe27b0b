"""The model registry: ``make(arch, task, params=None, **overrides)``, ``build(config_dict)``,
``names()``, and capacity matching (:func:`fit_width`)."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, Callable, Sequence

import torch

import importlib
import pkgutil

from .base import ModelConfig, WindTunnelModel
from .catalog import Arch, get as _arch, names, register_arch
from .external import build_external, is_external, make_external
from .hf import build_hf, is_hf, make_hf
from ..errors import InvalidValue

TOLERANCE = 0.03
"""Relative tolerance of capacity matching: ``|n_params - N| <= 0.03 N``."""

_NOT_MODELS = {"base", "catalog", "registry", "external", "hf", "hf_layout", "attention_layer"}


def discover() -> list[str]:
    """Import every model module of this package (each registers its architecture); the names."""
    from .. import models

    for info in pkgutil.iter_modules(models.__path__):
        if info.name not in _NOT_MODELS and not info.name.startswith("_"):
            importlib.import_module(f"{models.__name__}.{info.name}")
    return names()


MAX_WIDTH = 16384


def _check_keys(arch: str, keys: Sequence[str]) -> None:
    allowed = {f.name for f in fields(_arch(arch).config)} - {"arch"}
    unknown = sorted(set(keys) - allowed)
    if unknown:
        raise InvalidValue(
            f"unknown parameter {unknown[0]!r} for model {arch!r}: allowed {', '.join(sorted(allowed))}"
        )


def count_params(config: ModelConfig) -> int:
    """Parameter count of the model ``config`` describes, built on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        model = _arch(config.arch).model(config)
    return model.n_params()


def _closest(target: int, count: Callable[[int], int], grid: Sequence[int]) -> tuple[int, int]:
    """Grid value whose (monotone non-decreasing) ``count`` is closest to ``target``: ``(value, count)``."""
    lo, hi = 0, len(grid) - 1
    if count(grid[lo]) >= target:
        return grid[lo], count(grid[lo])
    while lo < hi:  # largest index with count <= target
        mid = (lo + hi + 1) // 2
        if count(grid[mid]) <= target:
            lo = mid
        else:
            hi = mid - 1
    best = (grid[lo], count(grid[lo]))
    if lo + 1 < len(grid):
        above = (grid[lo + 1], count(grid[lo + 1]))
        if abs(above[1] - target) < abs(best[1] - target):
            best = above
    return best


def fit_width(
    target: int,
    config_at: Callable[[int, int | None], ModelConfig],
    widths: Sequence[int],
    refine: Callable[[int], tuple[Sequence[int], int]] | None = None,
    tol: float = TOLERANCE,
    count: Callable[[ModelConfig], int] = count_params,
) -> ModelConfig:
    r"""Choose the config whose parameter count is closest to ``target`` (within ``tol``).

    ``config_at(width, knob)`` builds a candidate (``knob=None``: the default secondary size);
    ``widths`` are the admissible widths, increasing.  First the width alone is searched
    (binary search, :math:`n(w)` is increasing).  If the closest width misses by more than
    ``tol`` (coarse grid at small budgets) and ``refine(width) -> (knob values, default knob)``
    is given, the secondary knob (``d_ff``, ``d_inner``) is searched at the two widths bracketing
    the target, and among the candidates within ``tol`` the one whose knob is closest (in ratio)
    to its default wins.  ``ValueError`` if nothing is within ``tol``.
    """
    if not isinstance(target, int) or isinstance(target, bool) or target < 1:
        raise InvalidValue(f"invalid params: must be a positive integer, got {target!r}")
    cache: dict[tuple[int, int | None], int] = {}

    def n(width: int, knob: int | None = None) -> int:
        if (width, knob) not in cache:
            cache[(width, knob)] = count(config_at(width, knob))
        return cache[(width, knob)]

    def err(k: int) -> float:
        return abs(k - target) / target

    w, k = _closest(target, n, widths)
    if err(k) <= tol:
        return config_at(w, None)
    best: tuple[float, float, int, int] | None = None  # (knob distance, error, width, knob)
    if refine is not None:
        i = widths.index(w)
        for width in {widths[max(i - 1, 0)], w, widths[min(i + 1, len(widths) - 1)]}:
            grid, default = refine(width)
            knob, kk = _closest(target, lambda v: n(width, v), grid)
            if err(kk) <= tol:
                cand = (abs(math.log(knob / default)), err(kk), width, knob)
                best = cand if best is None or cand < best else best
    if best is None:
        arch = config_at(w, None).arch
        raise InvalidValue(
            f"invalid params: cannot size {arch!r} to {target} parameters within {tol:.0%} "
            f"(closest: {k} at d_model={w})"
        )
    return config_at(best[2], best[3])


def make(arch: str, task: Any, params: int | None = None, **overrides: Any) -> WindTunnelModel:
    """Build architecture ``arch`` for ``task``; ``params=N`` sizes it to N parameters (+-3%).

    ``overrides`` set config fields (``n_layers=4``, ``pos='learned'``, ...); with ``params``
    the width ``d_model`` is chosen (and, at small budgets, ``d_ff``/``d_inner``), so it may
    not be overridden too.  Unknown architectures or fields raise ``ValueError`` naming them.
    ``arch="package.module:factory"`` builds a user's model (``models.external``), ``arch="hf:llama"``
    a randomly initialised Hugging Face family (``models.hf``).
    """
    if is_hf(arch):
        return make_hf(arch, task, params, **overrides)
    if is_external(arch):
        return make_external(arch, task, params, **overrides)
    spec = _arch(arch)
    _check_keys(arch, list(overrides))
    base: dict[str, Any] = {
        "vocab_size": task.vocab_size,
        "n_classes": task.n_classes,
        "n_features": task.n_features,
        **{k: f(task) for k, f in spec.from_task.items()},
        **overrides,
    }
    if params is None:
        return spec.model(spec.config(arch=arch, **base))
    if "d_model" in overrides:
        raise InvalidValue("invalid d_model: cannot be given together with params (params chooses the width)")
    knob = spec.refine if spec.refine is not None and spec.refine not in overrides else None

    def config_at(width: int, value: int | None) -> ModelConfig:
        extra = {knob: value} if (knob is not None and value is not None) else {}
        return spec.config(arch=arch, **{**base, "d_model": width, **extra})

    step = spec.width_step(base)
    widths = list(range(step, MAX_WIDTH + 1, step))

    def refine(width: int) -> tuple[Sequence[int], int]:
        default = spec.refine_default(config_at(width, None))
        return range(1, 16 * max(default or width, width) + 1), default or width

    cfg = fit_width(params, config_at, widths, refine if knob is not None else None)
    return spec.model(cfg)


def build(config: dict[str, Any]) -> WindTunnelModel:
    """Rebuild a model (fresh weights) from ``model.config_dict()``; load the state dict separately."""
    if not isinstance(config, dict) or "arch" not in config:
        raise InvalidValue("invalid model config: a dict with an 'arch' field is required")
    arch = config["arch"]
    if is_hf(arch):
        return build_hf(config)
    if is_external(arch):
        return build_external(config)
    spec = _arch(arch)
    rest = {k: v for k, v in config.items() if k != "arch"}
    _check_keys(arch, list(rest))
    return spec.model(spec.config(arch=arch, **rest))


discover()  # every model module of the package registers its architecture on import
