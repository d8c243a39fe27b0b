"""The diagnostics registry: each diagnostic registers itself in its own file.

A diagnostic is ``compute(model, task, episodes=..., [untrained=...], [n_boot=...]) -> dict`` (or,
for one that reads a run's checkpoints, ``compute(run_dir, n=..., device=...)``), a figure function,
and an ``interpret(result) -> list[Reading]`` that says what the numbers mean for the paper's claim.
Adding one is one new module in ``windtunnel/geometry/`` that calls :func:`register`; ``analyze``
discovers it (:func:`discover`), runs it, writes it into ``geometry.json`` and the report.

**What a diagnostic reads from the model** is declared once, as requirement strings, and the same
declaration both decides whether it applies (:meth:`Diagnostic.applies`) and gates its body
(:func:`needs`), so no diagnostic can pass its gate and then find a part missing:

* ``blocks.{l}.NAME`` with ``NAME`` ending in a ``hook_…`` — a hook point of that name on every layer
  ``l = 0 .. L-1`` of ``model.blocks`` (``L ≥ 1``): ``blocks.{l}.attn.hook_pattern``;
* ``blocks.{l}.PATH`` otherwise — a submodule with a ``weight`` at that path of every layer:
  ``blocks.{l}.attn.out_proj``;
* ``hook_NAME`` — a hook point outside the layers (``hook_final``);
* ``NAME`` — a top-level submodule with a ``weight`` (``norm``, ``head``);
* ``NAME()`` — a method the model really implements, as its ``capabilities()`` says
  (:data:`METHODS`: ``unembed()``, ``unrotated_keys()``, ``bypass_layer()``).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from ..errors import InvalidValue
from ._common import arch_of, n_layers, not_applicable

LAYER = "blocks.{l}."
"""The prefix of a per-layer requirement: ``{l}`` ranges over every layer of ``model.blocks``."""

METHODS: dict[str, str] = {
    "unembed": "unembed(x): the readout of a residual-stream state [..., d] as logits [..., C] (the final norm "
               "then the head; a model with submodules `norm` and `head` has it)",
    "unrotated_keys": "unrotated_keys(tokens, features=None): per layer, the keys before any rotary position "
                      "embedding, [B, T, key heads, d_head]",
    "bypass_layer": "bypass_layer(l): a context manager inside which layer l returns its input (a model with "
                    "blocks.{l}.hook_resid_pre and hook_resid_post on every layer has it)",
}
"""The methods a requirement ``NAME()`` can name, with what each must do."""

_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def check_requirement(requirement: str) -> None:
    """``InvalidValue`` unless ``requirement`` is written in the grammar of the module docstring."""
    rest = requirement[len(LAYER):] if requirement.startswith(LAYER) else requirement
    if requirement.endswith("()"):
        ok = requirement[:-2] in METHODS
    else:
        ok = bool(_PATH.match(rest)) and (requirement.startswith(LAYER) or "." not in rest)
    if not ok:
        raise InvalidValue(
            f"invalid requirement {requirement!r}: write a per-layer part as 'blocks.{{l}}.attn.hook_pattern', a "
            f"top-level hook or submodule by its name ('hook_final', 'norm'), a method as one of "
            f"{', '.join(m + '()' for m in METHODS)}")


def capabilities_of(model: Any) -> frozenset[str]:
    """The methods of :data:`METHODS` that ``model`` really implements: its own ``capabilities()``, or for a
    bare module the methods of those names it has."""
    if callable(getattr(model, "capabilities", None)):
        return frozenset(model.capabilities())
    return frozenset(m for m in METHODS if callable(getattr(model, m, None)))


def _part(root: Any, path: str) -> Any:
    for attr in path.split("."):
        root = getattr(root, attr, None)
        if root is None:
            return None
    return root


def _is_weighted_module(obj: Any) -> bool:
    return isinstance(obj, torch.nn.Module) and isinstance(getattr(obj, "weight", None), torch.Tensor)


def missing(model: Any, requires: Iterable[str]) -> list[str]:
    """The requirements of ``requires`` (module docstring) that ``model`` does not meet, in order."""
    names = set(model.hook_names()) if callable(getattr(model, "hook_names", None)) else set()
    layers = range(n_layers(model))
    out = []
    for r in requires:
        if r.endswith("()"):
            ok = r[:-2] in capabilities_of(model)
        elif r.startswith(LAYER):
            rest = r[len(LAYER):]
            if rest.split(".")[-1].startswith("hook_"):
                ok = len(layers) > 0 and all(f"blocks.{l}.{rest}" in names for l in layers)
            else:
                ok = len(layers) > 0 and all(_is_weighted_module(_part(model.blocks[l], rest)) for l in layers)
        elif r.startswith("hook_"):
            ok = r in names
        else:
            ok = _is_weighted_module(_part(model, r))
        if not ok:
            out.append(r)
    return out


def lacks(model: Any, requires: Iterable[str]) -> dict[str, Any] | None:
    """The "not applicable" entry naming every requirement ``model`` does not meet (``None``: it meets them all)."""
    gap = missing(model, requires)
    if not gap:
        return None
    return not_applicable(f"architecture {arch_of(model)!r} does not expose {', '.join(gap)} "
                          "(what this diagnostic reads)")


def needs(*requires: str) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
    """Declare what a diagnostic ``compute(model, task, ...)`` reads from the model: the decorated function
    answers "not applicable", naming what is missing, for a model without it, and carries the declaration as
    ``.requires`` for :func:`register` (the registry's :meth:`Diagnostic.applies` reads the same tuple)."""
    for r in requires:
        check_requirement(r)

    def wrap(compute: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        @functools.wraps(compute)
        def gated(model: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return lacks(model, requires) or compute(model, *args, **kwargs)

        gated.requires = tuple(requires)  # type: ignore[attr-defined]
        return gated

    return wrap


@dataclass(frozen=True)
class Reading:
    """What one statistic says: its value beside its null, the direction the paper's claim predicts,
    whether the value is consistent with it (``None``: the test does not apply or is degenerate), the
    claim id it speaks to, what it means in words, and any flags (degenerate cases)."""

    statistic: str
    value: float | str | None
    null: str
    null_value: float | None
    direction: str
    consistent: bool | None
    claim: str
    meaning: str
    flags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flags"] = list(self.flags)
        return d

    def line(self) -> str:
        """One line for the terminal: verdict mark, claim, statistic, value vs null, meaning."""
        mark = {True: "consistent", False: "NOT consistent", None: "undecided"}[self.consistent]
        v = f"{self.value:.3g}" if isinstance(self.value, float) else str(self.value)
        nv = f" vs {self.null} {self.null_value:.3g}" if isinstance(self.null_value, float) else ""
        flags = f" [{'; '.join(self.flags)}]" if self.flags else ""
        return f"{self.claim:>4} {mark:>14}: {self.statistic} = {v}{nv} ({self.direction}) — {self.meaning}{flags}"


@dataclass(frozen=True)
class Diagnostic:
    """One registered diagnostic (see the module docstring).  ``untrained``: it takes the model at
    initialisation as its null; ``resamples``: it takes ``n_boot`` bootstrap resamples;
    ``checkpoints``: it reads the run folder's checkpoints instead of one model; ``order``: its place
    in ``geometry.json`` and the report; ``version``: raised whenever its output changes; ``claims``: the
    claim ids (``windtunnel.claims``) its numbers speak to."""

    name: str
    compute: Callable[..., dict[str, Any]]
    figure: Callable[[dict[str, Any], Path], Path] | None = None
    interpret: Callable[[dict[str, Any]], list[Reading]] | None = None
    untrained: bool = False
    resamples: bool = False
    checkpoints: bool = False
    order: int = 100
    #: raised when the diagnostic's output changes, so stored results of an older version are redone
    version: int = 1
    claims: tuple[str, ...] = field(default=())
    #: what the diagnostic reads from the model (module docstring: per-layer hooks and parts, top-level
    #: hooks and parts, methods); taken from ``compute.requires`` (:func:`needs`) when not given
    requires: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        declared = tuple(getattr(self.compute, "requires", ()))
        if declared and self.requires and tuple(self.requires) != declared:
            raise InvalidValue(f"invalid diagnostic {self.name!r}: requires={self.requires} differs from what its "
                               f"compute declares with @needs {declared}")
        object.__setattr__(self, "requires", tuple(self.requires) or declared)
        for r in self.requires:
            check_requirement(r)
        if self.requires and not declared and not self.checkpoints:
            # declared here rather than with @needs: the registered compute is gated all the same, so that a
            # caller without `diagnose`'s gate also gets "not applicable" on a model that lacks a part
            object.__setattr__(self, "compute", needs(*self.requires)(self.compute))

    def missing(self, model: Any) -> list[str]:
        """The requirements ``model`` does not meet (empty: the diagnostic applies)."""
        return missing(model, self.requires)

    def applies(self, model: Any) -> bool:
        """Whether ``model`` exposes everything this diagnostic reads (:meth:`missing` is empty)."""
        return not self.missing(model)


_REGISTRY: dict[str, Diagnostic] = {}


def register(diag: Diagnostic) -> Diagnostic:
    """Add ``diag`` to the registry (a second registration of the same name replaces the first: a
    module reloaded in a session re-registers)."""
    _REGISTRY[diag.name] = diag
    return diag


def discover() -> dict[str, Diagnostic]:
    """Import every module of this package (each registers its diagnostics) and return the registry
    in report order."""
    from .. import geometry

    for info in pkgutil.iter_modules(geometry.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{geometry.__name__}.{info.name}")
    return dict(sorted(_REGISTRY.items(), key=lambda kv: (kv[1].order, kv[0])))


def interpret(results: dict[str, Any]) -> list[Reading]:
    """Every registered diagnostic's readings of its result in ``results`` (a ``geometry.json``)."""
    out: list[Reading] = []
    for name, diag in discover().items():
        r = results.get(name)
        if diag.interpret is None or not isinstance(r, dict) or not r.get("applicable", True) or "error" in r:
            continue
        out.extend(diag.interpret(r))
    return out


def capabilities_markdown() -> str:
    """The table of which hooks, parts and methods enable which diagnostic (and the claims each speaks to), in
    report order, generated from the declarations: what ``docs/extending.md`` shows a user bringing their own
    model."""
    rows = ["| diagnostic | what the model must expose | reads | claims |", "|---|---|---|---|"]
    for name, d in discover().items():
        hooks = ", ".join(f"`{h}`" for h in d.requires) or "any model (its outputs only)"
        reads = "the run's checkpoints" if d.checkpoints else "the trained model" + (" and the untrained one" if d.untrained else "")
        rows.append(f"| `{name}` | {hooks} | {reads} | {', '.join(d.claims)} |")
    return "\n".join(rows)


TABLE_START = "<!-- capabilities table: generated, do not edit by hand -->"
TABLE_END = "<!-- end of capabilities table -->"


def with_capabilities_table(text: str) -> str:
    """``text`` (``docs/extending.md``) with :func:`capabilities_markdown` between its two table markers
    (:data:`TABLE_START`, :data:`TABLE_END`); ``InvalidValue`` when the markers are missing."""
    if TABLE_START not in text or TABLE_END not in text:
        raise InvalidValue(f"invalid document: it has no {TABLE_START!r} … {TABLE_END!r} markers for the table")
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_START}\n{capabilities_markdown()}\n{TABLE_END}{tail}"
