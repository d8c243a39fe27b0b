"""The model registry: ``make(arch, task, params=None, **overrides)``, ``build(config_dict)``,
``names()``, and capacity matching (:func:`fit_width`)."""

from __future__ import annotations

import ast
import importlib
from dataclasses import fields
from typing import Any, Sequence

from .base import ModelConfig, WindTunnelModel
from .sizing import count_params, fit_width  # noqa: F401  (re-exported as models.count_params)
from .catalog import get as _arch, names
from .external import build_external, is_external, make_external
from .hf import build_hf, is_hf, make_hf
from ..errors import InvalidValue, did_you_mean
from ..io import module_sources


def registers_an_architecture(source: str) -> bool:
    """Whether a module's source calls ``register_arch`` in its own top-level code (not inside a function or a
    class): what makes a module of this package a model module (docs/extending.md)."""
    stack: list[ast.AST] = [ast.parse(source)]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if called == "register_arch":
                return True
        stack.extend(child for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)))
    return False


def model_modules() -> list[str]:
    """The modules of this package that register an architecture (:func:`registers_an_architecture`), read from
    their source without importing them; a module whose source cannot be read is counted in (importing it
    registers whatever it registers).  The rest — the skeleton, the catalog, the scans, the loaders of outside
    models — are imported only by what uses them."""
    return [name for name, source in module_sources(__package__)
            if source is None or ("register_arch" in source and registers_an_architecture(source))]


def discover() -> list[str]:
    """Import every model module of this package (:func:`model_modules`; each registers its architecture); the
    names."""
    from .. import models

    for name in model_modules():
        importlib.import_module(f"{models.__name__}.{name}")
    return names()


MAX_WIDTH = 16384


def _check_keys(arch: str, keys: Sequence[str]) -> None:
    allowed = {f.name for f in fields(_arch(arch).config)} - {"arch"}
    unknown = sorted(set(keys) - allowed)
    if unknown:
        raise InvalidValue(
            f"unknown parameter {unknown[0]!r} for model {arch!r}{did_you_mean(unknown[0], allowed)}: allowed "
            f"{', '.join(sorted(allowed))}"
        )




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
