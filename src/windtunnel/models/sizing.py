"""Capacity matching: the parameter count of a config and the width search that sizes a model to a
target within one tolerance, shared by our architectures, Hugging Face families and users' models."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from .base import ModelConfig
from .catalog import get as _arch
from ..errors import InvalidValue, is_int

TOLERANCE = 0.03
"""Relative tolerance of capacity matching: ``|n_params - N| <= 0.03 N``."""


class _NoInitialisers(torch.overrides.TorchFunctionMode):
    """A mode in which initialisers do nothing: every ``torch.nn.init`` function and the tensor methods that only
    write values (``normal_``, ``uniform_``, ``zero_``, ``fill_``, ``copy_``) return their tensor untouched, and the
    ranges a constructor builds its initial values from (``arange``, ``linspace``, ``logspace``) are made on the CPU
    and moved to the meta device.  On the meta device there are no values to write, and PyTorch runs these ops
    through its Python reference implementations (importing its compiler on the first call), which made counting a
    model cost more than training a tiny one."""

    _WRITES = frozenset({"normal_", "uniform_", "zero_", "fill_", "copy_"})
    _RANGES = frozenset({"arange", "linspace", "logspace"})

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) in self._RANGES and kwargs.get("device") in (None, "meta"):
            return func(*args, **{**kwargs, "device": "cpu"}).to("meta")
        target = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
        if isinstance(target, torch.Tensor) and target.is_meta and (
                getattr(func, "__module__", None) == "torch.nn.init" or getattr(func, "__name__", None) in self._WRITES):
            return target
        return func(*args, **kwargs)


def count_params(config: ModelConfig) -> int:
    """Parameter count of the model ``config`` describes, built on the meta device with its initialisers skipped
    (no memory, no init cost)."""
    with torch.device("meta"), _NoInitialisers():
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
    if not is_int(target) or target < 1:
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
