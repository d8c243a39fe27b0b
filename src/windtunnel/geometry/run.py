"""``diagnose``: every diagnostic that applies to a run folder -> the ``geometry.json`` record (and figures)."""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from ..run.runs import RunDir
from ..evaluation.evaluate import refuse_non_finite
from ._common import GEOMETRY_SEED, arch_of, clean, eval_mode, inputs_on
from .registry import Diagnostic, Reading, discover, interpret, lacks

__all__ = ["diagnose", "failed_diagnostics", "Diagnostic", "DIAGNOSTICS", "stale_diagnostics", "readings"]

DIAGNOSTICS: dict[str, Diagnostic] = discover()
"""Every registered diagnostic, in report order (each registers itself in its own module)."""


def _headline(res: dict[str, Any]) -> dict[str, Any]:
    """The flat summary shown first in the report: each headline number beside its null."""
    out: dict[str, Any] = {}
    for name, r in res.items():
        if not isinstance(r, dict):
            continue
        if not r.get("applicable", True):
            out[f"{name}"] = f"not applicable: {r.get('reason', '')}"
            continue
        if "error" in r:
            out[f"{name}"] = f"error: {r['error']}"
            continue
        for k, v in (r.get("summary") or {}).items():
            if isinstance(v, list):
                v = "[" + ", ".join("–" if x is None else f"{x:.3g}" if isinstance(x, float) else str(x) for x in v) + "]"
            out[f"{name}.{k}"] = v
    return out


def stale_diagnostics(doc: dict[str, Any] | None) -> list[str]:
    """The registered diagnostics a ``geometry.json`` lacks, or holds from an older version of the code
    (all of them for ``None``)."""
    diags = discover()
    if doc is None:
        return list(diags)
    versions = (doc.get("meta") or {}).get("versions") or {}
    return [name for name, d in diags.items()
            if name not in doc or "error" in (doc.get(name) or {}) or int(versions.get(name, 1)) != d.version]


def diagnose(run_dir: str | Path, n: int = 512, *, device: str | None = None, n_boot: int = 1000,
             dynamics: bool = True, dynamics_n: int | None = None, only: list[str] | None = None,
             figures: Path | None = None) -> dict[str, Any]:
    """Run every registered diagnostic that applies to ``run_dir``'s trained model and return the
    ``geometry.json`` record: each diagnostic's result under its name, the headline table
    (``summary``), each diagnostic's readings (``interpretation``) and ``meta`` (episodes, seed,
    untrained null, versions, timings, the checkpoint's provenance).  Nothing is written but each
    applicable diagnostic's figure, drawn into ``figures`` (``geometry_{name}.png``) when given;
    :func:`windtunnel.orchestration.stages.analyze_run` writes the record.

    A diagnostic runs only on a model that exposes what it declares it reads (``Diagnostic.requires``);
    for any other it records "not applicable" naming what is missing, without calling it.
    All diagnostics share ``n`` episodes sampled with :data:`GEOMETRY_SEED`; the untrained null is
    :meth:`~windtunnel.run.runs.RunDir.untrained`.  A diagnostic over checkpoints (``frame_precision``) runs on
    ``dynamics_n`` (default ``min(n, 256)``) episodes, and is skipped with ``dynamics=False``.
    ``only``: recompute just these diagnostics and keep the others of the run's ``geometry.json``.
    A diagnostic (or its figure) that raises is recorded as ``{"error": ...}`` (and its traceback
    printed) so the others still run; see :func:`failed_diagnostics`.
    """
    rd = RunDir(run_dir)
    old: dict[str, Any] = (rd.read_geometry() or {}) if only is not None else {}
    diags = discover()  # also what a module imported since registered
    names = [k for k in diags if only is None or k in only]
    task, model = rd.load()
    dev = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(dev).eval()
    untrained, how = rd.untrained()
    untrained.to(dev)
    episodes = task.sample(n, GEOMETRY_SEED)
    _refuse_non_finite(model, episodes[: min(n, 64)])
    results: dict[str, Any] = {k: old[k] for k in diags if k in old and k not in names}
    timings: dict[str, float] = dict((old.get("meta") or {}).get("timings_s") or {})
    for name in names:
        diag = diags[name]
        if diag.checkpoints and not dynamics:
            continue
        t0 = time.perf_counter()
        try:
            gap = lacks(model, diag.requires)  # what it declares it reads, the one test of whether it applies
            if gap is not None:
                results[name] = gap
            elif diag.checkpoints:
                results[name] = diag.compute(rd.path, n=dynamics_n or min(n, 256), device=dev)
            else:
                kw: dict[str, Any] = {"episodes": episodes}
                if diag.untrained:
                    kw["untrained"] = untrained
                if diag.resamples:
                    kw["n_boot"] = n_boot
                results[name] = diag.compute(model, task, **kw)
            if figures is not None and results[name].get("applicable", True) and diag.figure is not None:
                diag.figure(results[name], Path(figures) / f"geometry_{name}.png")
        except Exception as e:  # noqa: BLE001 - one failing diagnostic must not lose the others
            traceback.print_exc()
            print(f"windtunnel analyze: {name} failed ({type(e).__name__}: {e})", file=sys.stderr)
            results[name] = {"error": f"{type(e).__name__}: {e}"}
        timings[name] = time.perf_counter() - t0
    results = {k: results[k] for k in diags if k in results}  # report order
    return clean({
        "summary": _headline(results),
        "interpretation": [r.to_dict() for r in interpret(results)],
        "meta": {"run": rd.path.resolve().name, "task": getattr(task, "name", "?"), "arch": arch_of(model),
                 **rd.provenance(),
                 "n_episodes": n, "episode_seed": GEOMETRY_SEED, "untrained_null": how,
                 "versions": {k: diags[k].version for k in results}, "timings_s": timings},
        **results,
    })


def _refuse_non_finite(model: torch.nn.Module, episodes: Any) -> None:
    """``NonFiniteOutput`` (one line) for a model whose logits at scored positions are NaN or +inf.
    Under ``no_grad``, not ``inference_mode``: tensors a module caches in inference mode cannot enter the
    autograd graphs later diagnostics build (the routing law differentiates the same model)."""
    with eval_mode(model):
        logits = model(**inputs_on(episodes, next(model.parameters()).device)).float().cpu()
    refuse_non_finite(logits, episodes.mask)


def failed_diagnostics(doc: dict[str, Any]) -> list[str]:
    """The diagnostics a ``geometry.json`` record holds as failed."""
    return [k for k, v in doc.items() if isinstance(v, dict) and "error" in v]


def readings(doc: dict[str, Any]) -> list[Reading]:
    """The readings stored in a ``geometry.json`` (recomputed from its results if it predates them)."""
    stored = doc.get("interpretation")
    if isinstance(stored, list):
        return [Reading(**{**r, "flags": tuple(r.get("flags", ()))}) for r in stored]
    return interpret(doc)
