"""``analyze_run``: every diagnostic that applies to a run folder -> ``geometry.json`` + figures + report."""

from __future__ import annotations

import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from .. import checkpoint as ckpt
from .. import models
from ._common import GEOMETRY_SEED, arch_of, clean
from .ablation import head_ablation, head_ablation_figure, layer_ablation, layer_ablation_figure
from .attention import attention_focusing, attention_focusing_figure
from .dynamics import frame_precision, frame_precision_figure
from .keys import key_orthogonality, key_orthogonality_figure
from .manifold import value_manifold, value_manifold_figure
from .probes import probes, probes_figure
from .routing_law import routing_law, routing_law_figure

__all__ = ["analyze_run", "untrained_model", "Diagnostic", "DIAGNOSTICS"]

@dataclass(frozen=True)
class Diagnostic:
    """One geometric diagnostic and what it needs, declared rather than decided by its name.

    ``compute(model, task, episodes=..., [untrained=...], [n_boot=...]) -> dict`` (``{"applicable":
    False, "reason": ...}`` where it does not apply); ``figure(result, path) -> path``;
    ``untrained``: it compares against the model at initialisation (the null); ``resamples``: it
    takes ``n_boot`` bootstrap resamples.
    """

    compute: Callable[..., dict[str, Any]]
    figure: Callable[[dict[str, Any], Path], Path]
    untrained: bool = False
    resamples: bool = False


DIAGNOSTICS: dict[str, Diagnostic] = {
    "key_orthogonality": Diagnostic(key_orthogonality, key_orthogonality_figure, untrained=True),
    "attention_focusing": Diagnostic(attention_focusing, attention_focusing_figure, untrained=True),
    "value_manifold": Diagnostic(value_manifold, value_manifold_figure, untrained=True),
    "head_ablation": Diagnostic(head_ablation, head_ablation_figure, resamples=True),
    "layer_ablation": Diagnostic(layer_ablation, layer_ablation_figure, resamples=True),
    "probes": Diagnostic(probes, probes_figure, untrained=True),
    "routing_law": Diagnostic(routing_law, routing_law_figure),
}
"""The diagnostics ``analyze_run`` runs on every trained model, in report order."""



def untrained_model(run_dir: str | Path) -> tuple[torch.nn.Module, str]:
    """The run's model at initialisation: the step-0 checkpoint if the run kept one, else a rebuild
    from ``config.json`` after ``torch.manual_seed(train.seed)`` (what ``train.build`` does)."""
    run = Path(run_dir)
    record = json.loads((run / "config.json").read_text())
    model = None
    zero = run / "checkpoints" / "step_00000000"
    if zero.is_dir() and ckpt.complete(zero):
        model = models.build(record["model"])
        ckpt.load(zero, model)
        how = "step-0 checkpoint"
    else:
        state = torch.random.get_rng_state()
        try:
            torch.manual_seed(int(record.get("train", {}).get("seed", 0)))
            model = models.build(record["model"])
        finally:
            torch.random.set_rng_state(state)
        how = f"rebuilt with torch.manual_seed({record.get('train', {}).get('seed', 0)})"
    model.eval()
    return model, how


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


def analyze_run(run_dir: str | Path, n: int = 512, *, device: str | None = None, n_boot: int = 1000,
                dynamics: bool = True, dynamics_n: int | None = None) -> Path:
    """Run every diagnostic that applies to ``run_dir``'s trained model; write ``geometry.json``,
    ``figures/geometry_*.png`` and regenerate ``report.html``.  Returns the JSON path.

    All diagnostics share ``n`` episodes sampled with :data:`GEOMETRY_SEED`; the untrained null is
    :func:`untrained_model`.  ``frame_precision`` runs over the checkpoints on ``dynamics_n``
    (default ``min(n, 256)``) episodes.  A diagnostic that raises is recorded as ``{"error": ...}``
    (and printed) so the others still run.
    """
    from ..report import write_report
    from ..training import load

    run = Path(run_dir)
    task, model = load(run)
    dev = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(dev).eval()
    untrained, how = untrained_model(run)
    untrained.to(dev)
    episodes = task.sample(n, GEOMETRY_SEED)
    fig_dir = run / "figures"
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for name, diag in DIAGNOSTICS.items():
        t0 = time.perf_counter()
        kw: dict[str, Any] = {"episodes": episodes}
        if diag.untrained:
            kw["untrained"] = untrained
        if diag.resamples:
            kw["n_boot"] = n_boot
        try:
            results[name] = diag.compute(model, task, **kw)
            if results[name].get("applicable", True):
                diag.figure(results[name], fig_dir / f"geometry_{name}.png")
        except Exception as e:  # noqa: BLE001 - one failing diagnostic must not lose the others
            traceback.print_exc()
            print(f"windtunnel analyze: {name} failed ({type(e).__name__}: {e})", file=sys.stderr)
            results[name] = {"error": f"{type(e).__name__}: {e}"}
        timings[name] = time.perf_counter() - t0
    if dynamics:
        t0 = time.perf_counter()
        try:
            results["frame_precision"] = frame_precision(run, n=dynamics_n or min(n, 256), device=dev)
            if results["frame_precision"].get("applicable", True):
                frame_precision_figure(results["frame_precision"], fig_dir / "geometry_frame_precision.png")
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            results["frame_precision"] = {"error": f"{type(e).__name__}: {e}"}
        timings["frame_precision"] = time.perf_counter() - t0
    doc = {
        "summary": _headline(results),
        "meta": {"run": run.resolve().name, "task": getattr(task, "name", "?"), "arch": arch_of(model),
                 "n_episodes": n, "episode_seed": GEOMETRY_SEED, "untrained_null": how,
                 "timings_s": timings},
        **results,
    }
    out = run / "geometry.json"
    ckpt.write_text_atomic(out, json.dumps(clean(doc), indent=1, allow_nan=False))
    write_report(run)
    return out
