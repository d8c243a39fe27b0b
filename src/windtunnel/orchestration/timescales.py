r"""Frame before precision (Paper II's prediction), measured over seeds with fitted timescales.

Paper II (arXiv 2512.22473) predicts that attention — the *frame*, which hypotheses each query
reads — settles early, while the *precision* of the values keeps improving long after.  For each
seed a model is trained with dense checkpoints (``ckpt_every = steps / checkpoints``, all kept) and
``geometry.frame_precision`` follows, over the checkpoints, the attention rows' Jensen–Shannon
divergence to the final checkpoint's (the frame) and the Bayes gap ``kl`` (the precision: what the
values still have to learn).  Each curve gets a timescale two ways:

* ``t90``: the first checkpoint step from which the curve stays within 10% of its total change,
  :math:`|f(t) - f(T)| \le 0.1\,|f(0) - f(T)|` (model-free);
* ``tau``: the exponential fit :math:`f(t) \approx c + a\,e^{-t/\tau}` by least squares, ``τ`` on a
  log grid and ``(a, c)`` in closed form for each ``τ`` (a fit, so a fast early drop and a slow
  tail give one number).

The answer is the per-seed ratio ``frame / precision`` of each timescale (< 1: the frame settles
first) with a Student-t 95% interval on its logarithm over seeds.

The cosine schedule drives the learning rate to 1e-5 at the last step, which by itself makes every
curve stop moving late; ``windtunnel routing timescales --constant-lr`` repeats the experiment with
the rate held at ``lr`` after warmup, so that an early frame cannot be an artefact of the schedule.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidValue
from ..evaluation.stats import json_safe, mean_std

SETTLE = 0.1


def t90(steps: list[int], values: list[float | None]) -> int | None:
    """First step from which ``|f - f_end| <= 0.1 |f_0 - f_end|`` holds to the end (``None``: no change)."""
    pts = [(s, v) for s, v in zip(steps, values) if v is not None and math.isfinite(v)]
    if len(pts) < 2:
        return None
    f0, fe = pts[0][1], pts[-1][1]
    span = abs(f0 - fe)
    if span == 0:
        return None
    ok = [abs(v - fe) <= SETTLE * span for _, v in pts]
    for i in range(len(ok)):
        if all(ok[i:]):
            return pts[i][0]
    return pts[-1][0]  # pragma: no cover - the last point is always within


def fit_tau(steps: list[int], values: list[float | None], grid: int = 400) -> dict[str, float] | None:
    r"""Least-squares :math:`f(t) = c + a e^{-t/\tau}`: ``{"tau", "a", "c", "r2"}`` (``None`` if under 3 points).

    ``τ`` ranges over a log grid from a tenth of the first positive step to ten times the last.
    """
    pts = [(float(s), float(v)) for s, v in zip(steps, values) if v is not None and math.isfinite(v)]
    if len(pts) < 3:
        return None
    t = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    lo = max(min(t[t > 0]) / 10 if (t > 0).any() else 1.0, 1e-3)
    taus = np.geomspace(lo, 10 * max(t.max(), 1.0), grid)
    best = None
    sst = float(((y - y.mean()) ** 2).sum())
    for tau in taus:
        X = np.stack([np.ones_like(t), np.exp(-t / tau)], 1)
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        sse = float(((X @ coef - y) ** 2).sum())
        if best is None or sse < best[0]:
            best = (sse, float(tau), float(coef[1]), float(coef[0]))
    sse, tau, a, c = best  # type: ignore[misc]
    return {"tau": tau, "a": a, "c": c, "r2": 1 - sse / sst if sst > 0 else None}


@dataclass(frozen=True)
class TimescaleSetup:
    """One task's experiment: a small transformer trained ``steps`` with ``checkpoints`` checkpoints, per seed."""

    task: str = "bijection"
    task_params: dict[str, Any] = field(default_factory=lambda: {"V": 8, "L": 8})
    arch: str = "transformer"  # any architecture with attention patterns (the frame is read from them)
    model: dict[str, Any] = field(default_factory=lambda: {"n_layers": 2, "n_heads": 2, "d_model": 64})
    steps: int = 1500
    checkpoints: int = 30
    batch_size: int = 64
    lr: float = 2e-3
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    n: int = 128
    #: the cosine schedule's floor (``None``: the training default, 1e-5); ``min_lr = lr`` holds the rate
    #: constant after warmup — the control for a schedule that makes every curve settle late
    min_lr: float | None = None

    def train_config(self, seed: int) -> dict[str, Any]:
        every = max(1, self.steps // self.checkpoints)
        return {"task": self.task, "task_params": dict(self.task_params), "arch": self.arch,
                "model": dict(self.model), "steps": self.steps, "batch_size": self.batch_size, "lr": self.lr,
                "warmup": min(100, self.steps // 10), "weight_decay": 0.0, "seed": seed, "ckpt_every": every,
                "eval_every": self.steps, "keep_last": self.checkpoints + 2, "log_checkpoints": True,
                "progress": False, **({} if self.min_lr is None else {"min_lr": self.min_lr})}


def seed_timescales(steps: list[int], frame: list[float | None], precision: list[float | None]) -> dict[str, Any]:
    """Timescales of one seed's curves: the frame (JS to the final attention) against the precision
    measured two ways — the Bayes gap itself (dominated by its early fall) and its logarithm (each
    halving of the remaining error counts the same, so late refinement weighs as much as the first
    drop: Paper II's "precision keeps improving")."""
    log_prec = [math.log(v) if v is not None and v > 0 else None for v in precision]
    out: dict[str, Any] = {"frame_t90": t90(steps, frame), "precision_t90": t90(steps, precision),
                           "precision_log_t90": t90(steps, log_prec)}
    ff, pf, lf = fit_tau(steps, frame), fit_tau(steps, precision), fit_tau(steps, log_prec)
    out["frame_fit"], out["precision_fit"], out["precision_log_fit"] = ff, pf, lf

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    out["t90_ratio"] = ratio(out["frame_t90"], out["precision_t90"])
    out["log_t90_ratio"] = ratio(out["frame_t90"], out["precision_log_t90"])
    out["tau_ratio"] = ratio(ff and ff["tau"], pf and pf["tau"])
    out["log_tau_ratio"] = ratio(ff and ff["tau"], lf and lf["tau"])
    return out


def _ratio_summary(ratios: list[float | None]) -> dict[str, Any]:
    logs = [math.log(r) for r in ratios if r is not None and r > 0]
    m = mean_std(logs)
    return {"geometric_mean": math.exp(m["mean"]) if logs else None,
            "ci95": [math.exp(x) for x in m["ci95"]] if m["ci95"] else None,
            "n": len(logs), "per_seed": ratios,
            "frame_first_share": sum(r < 1 for r in ratios if r is not None) / max(1, len(logs))}


def run_timescales(setups: dict[str, TimescaleSetup], out: Path, progress: bool = True) -> Path:
    """Train (or resume) every seed of every setup under ``out/runs``, measure the curves and write
    ``timescales.json`` and ``timescales.md``.  Returns the markdown path."""
    from ..io import write_text_atomic
    from ..geometry.dynamics import frame_precision
    from ..run.runs import RunDir
    from .stages import train_run
    from ..training.loop import TrainConfig

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InvalidValue(f"invalid out: {out} is a file")
    results: dict[str, Any] = {}
    t0 = time.perf_counter()
    for name, setup in setups.items():
        configs = {seed: TrainConfig.from_dict(setup.train_config(seed)) for seed in setup.seeds}  # validate all first
        per_seed = []
        for seed, cfg in configs.items():
            run = RunDir(out / "runs" / f"{name}-s{seed}")
            cache = run.path.with_name(run.path.name + ".curves.json")  # the measured curves; timescales are recomputed from them
            if run.is_run() and not run.holds(cfg.to_dict()):
                raise InvalidValue(f"{run.path} holds a run with another configuration (steps, seeds or schedule "
                                   "changed); choose another --out or remove it")
            if cache.is_file():
                rec = json.loads(cache.read_text())
            else:
                train_run(cfg, run, resume=run.is_run())  # records its wall time, as every run does
                fp = frame_precision(run.path, n=setup.n)
                rec = json_safe({"seed": seed, "steps": fp["steps"], "frame": [r.get("js_mean") for r in fp["series"]],
                                 "precision": [r.get("kl") for r in fp["series"]], "train_s": run.training_seconds()})
                write_text_atomic(cache, json.dumps(rec))
            rec = {**rec, **json_safe(seed_timescales(rec["steps"], rec["frame"], rec["precision"]))}
            per_seed.append(rec)
            if progress:
                print(f"  {name} seed {seed}: frame t90 {rec['frame_t90']}, KL t90 {rec['precision_t90']}, "
                      f"log KL t90 {rec['precision_log_t90']}", flush=True)
        results[name] = {
            "setup": json_safe(setup.__dict__),
            "seeds": per_seed,
            **{k: _ratio_summary([s[k] for s in per_seed]) for k in ("t90_ratio", "log_t90_ratio", "tau_ratio",
                                                                     "log_tau_ratio")},
        }
    wall = time.perf_counter() - t0
    write_text_atomic(out / "timescales.json", json.dumps(json_safe({"results": results, "wall_s": wall}), indent=1))
    md = out / "timescales.md"
    write_text_atomic(md, markdown(results))
    return md


def markdown(results: dict[str, Any]) -> str:
    def ratio(r: dict[str, Any]) -> str:
        if r["geometric_mean"] is None:
            return "–"
        ci = f" [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]" if r["ci95"] else ""
        return f"{r['geometric_mean']:.2f}{ci} (frame first in {r['frame_first_share']:.0%} of {r['n']})"

    schedules = {"constant after warmup" if r["setup"].get("min_lr") == r["setup"]["lr"] else "cosine"
                 for r in results.values()}
    lines = ["# Frame before precision (Paper II): timescales over seeds", "",
             f"Learning-rate schedule: {', '.join(sorted(schedules))}.", "",
             "Frame = JS (bits) of attention rows to the final checkpoint's; precision = the Bayes gap KL (bits), "
             "and its logarithm. Ratio = frame timescale / precision timescale per seed (< 1: the frame settles "
             "first); geometric mean with a Student-t 95% interval on the log ratio. t90: first checkpoint from "
             "which the curve stays within 10% of its total change; τ: fitted exponential.", "",
             "| task | seeds | t90: frame / KL | t90: frame / log KL | τ: frame / KL | τ: frame / log KL | train s / seed |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        secs = mean_std([s.get("train_s") for s in r["seeds"]])["mean"]
        lines.append(f"| {name} | {len(r['seeds'])} | {ratio(r['t90_ratio'])} | {ratio(r['log_t90_ratio'])} | "
                     f"{ratio(r['tau_ratio'])} | {ratio(r['log_tau_ratio'])} | {secs:.0f} |")
    return "\n".join(lines) + "\n"


DEFAULT_SETUPS = {
    "bijection": TimescaleSetup(),
    "sticky": TimescaleSetup(task="sticky", task_params={"length": 32}, steps=1500),
}
