"""The diagnostics registry: each diagnostic registers itself in its own file.

A diagnostic is ``compute(model, task, episodes=..., [untrained=...], [n_boot=...]) -> dict`` (or,
for one that reads a run's checkpoints, ``compute(run_dir, n=..., device=...)``), a figure function,
and an ``interpret(result) -> list[Reading]`` that says what the numbers mean for the paper's claim.
Adding one is one new module in ``windtunnel/geometry/`` that calls :func:`register`; ``analyze``
discovers it (:func:`discover`), runs it, writes it into ``geometry.json`` and the report.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable


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
    #: hook-name endings the model must expose (``attn.hook_k`` …): a declared capability, not an arch name
    requires: tuple[str, ...] = ()

    def applies(self, model: Any) -> bool:
        """Whether ``model`` exposes every hook this diagnostic reads."""
        names = model.hook_names() if hasattr(model, "hook_names") else []
        return all(any(n.endswith(r) for n in names) for r in self.requires)


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
    """The table of which hooks enable which diagnostic (and the claims each speaks to), in report order:
    what ``docs/extending.md`` shows a user bringing their own model."""
    rows = ["| diagnostic | hooks it needs | reads | claims |", "|---|---|---|---|"]
    for name, d in discover().items():
        hooks = ", ".join(f"`{h}`" for h in d.requires) or "any model"
        reads = "the run's checkpoints" if d.checkpoints else "the trained model" + (" and the untrained one" if d.untrained else "")
        rows.append(f"| `{name}` | {hooks} | {reads} | {', '.join(d.claims)} |")
    return "\n".join(rows)
