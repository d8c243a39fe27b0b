"""``windtunnel compare RUN…``: several runs' evaluations side by side, and their curves overlaid.

Each run folder's ``eval.json`` holds per-position curves over the whole token sequence, with
``None`` where nothing is scored (an HMM header, the value tokens of a bijection).
:func:`curves` strips that padding and indexes the scored positions by the episode's own step
(1, 2, …), so runs of different layouts and lengths line up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..errors import InvalidValue
from ..run.runs import RunDir

CURVES = ("kl", "entropy_mae", "entropy_model")
"""The per-position curves ``compare`` overlays (``entropy_model`` is drawn beside ``entropy_bayes``)."""


def curves(run: str | Path | RunDir, metric: str = "kl", length: int | None = None) -> tuple[list[int], list[float]]:
    """``(steps, values)`` of one per-position curve of a run's ``eval.json``: the scored positions only,
    numbered 1, 2, … in episode order; ``length`` selects a length-generalisation evaluation."""
    rd = run if isinstance(run, RunDir) else RunDir(run)
    ev = rd.read_eval()
    block = ev
    if length is not None:
        block = (ev.get("lengths") or {}).get(str(length))
        if block is None:
            have = ", ".join(sorted(ev.get("lengths") or {}, key=int)) or "none"
            raise InvalidValue(f"{rd.path} has no evaluation at length {length} (it has: {have})")
    table = block.get("curves") or {}
    if metric not in table:
        raise InvalidValue(f"{rd.eval_path} has no {metric!r} curve: choose from {', '.join(table) or 'none'}")
    values = [float(v) for v in table[metric] if v is not None]
    return list(range(1, len(values) + 1)), values


def _label(rd: RunDir, names: list[str]) -> str:
    return rd.path.name if names.count(rd.path.name) == 1 else str(rd.path)


RECIPE = ("steps", "batch_size", "lr", "readout_lr_mult", "weight_decay", "warmup", "train_set", "curriculum")
"""The training settings ``compare`` sets beside each other: where two runs differ in one, it says so."""


def describe(run: str | Path | RunDir) -> dict[str, Any]:
    """What a run is: its task and parameters, architecture, parameter count, the step its newest checkpoint
    reached against the recipe's steps, the recipe's settings (:data:`RECIPE`) and the evaluation's size."""
    rd = run if isinstance(run, RunDir) else RunDir(run)
    cfg = rd.read_config()
    train = cfg.get("train") or {}
    ev = rd.read_eval()
    prov = ev.get("provenance") if isinstance(ev.get("provenance"), dict) else {}
    params = {k: v for k, v in ((cfg.get("task") or {}).get("params") or {}).items() if v is not None}
    return {"task": (cfg.get("task") or {}).get("name"), "task_params": params,
            "arch": train.get("arch"), "n_params": cfg.get("n_params"), "step": prov.get("step"),
            "steps": train.get("steps"), "recipe": {k: train.get(k) for k in RECIPE}, "eval_n": ev.get("n"),
            "diverged": (rd.divergence() or {}).get("message")}


def differences(infos: Sequence[dict[str, Any]], labels: Sequence[str]) -> list[str]:
    """What makes the runs' numbers not comparable as they stand, one sentence each: another task or other task
    parameters, another recipe setting, a run stopped before its recipe's end (diverged, or merely unfinished)."""
    out = []
    tasks = {(i["task"], tuple(sorted((k, str(v)) for k, v in i["task_params"].items()))) for i in infos}
    if len(tasks) > 1:
        out.append("the runs are on different tasks: " + "; ".join(
            f"{lab}: {i['task']} {i['task_params']}" for lab, i in zip(labels, infos)))
    for key in RECIPE:
        values = [i["recipe"].get(key) for i in infos]
        if any(v != values[0] for v in values[1:]):
            out.append(f"their recipes differ in {key}: " + ", ".join(f"{lab} {v}" for lab, v in zip(labels, values)))
    for lab, i in zip(labels, infos):
        if i.get("diverged"):  # stopped on non-finite numbers: not merely unfinished
            out.append(f"{lab} diverged ({i['diverged'].split(';')[0]}): evaluated at its last good checkpoint, "
                       f"step {i['step']} of its {i['steps']}")
        elif i["step"] is not None and i["steps"] is not None and i["step"] < i["steps"]:
            out.append(f"{lab} was evaluated at step {i['step']} of its {i['steps']}: unfinished")
    return out


def default_figure(runs: Sequence[str | Path]) -> Path:
    """Where the overlay goes when no ``--out`` is given: ``compare.png`` in the folder the runs share (the first
    run's parent where they share none), never the current folder."""
    import os

    parents = [str(Path(r).resolve().parent) for r in runs]
    common = Path(os.path.commonpath(parents)) if parents else Path(".")
    return common / "compare.png"


def compare(runs: Sequence[str | Path], out: str | Path | None = None, length: int | None = None) -> dict[str, Any]:
    """The headline metrics of every run (value and interval), what each run is (:func:`describe`) and what keeps
    their numbers from comparing directly (:func:`differences`); with ``out``, one PNG overlaying each curve of
    :data:`CURVES` against the episode step.  Returns ``{"runs", "about", "differences", "metrics", "figure"}``."""
    if len(runs) < 1:
        raise InvalidValue("compare needs at least one run folder")
    rds = [RunDir(r) for r in runs]
    evals = [rd.read_eval() for rd in rds]
    names = [rd.path.name for rd in rds]
    labels = [_label(rd, names) for rd in rds]
    about = [describe(rd) for rd in rds]
    metrics = sorted({k for ev in evals for k in ev["metrics"]}, key=lambda k: list(evals[0]["metrics"]).index(k)
                     if k in evals[0]["metrics"] else 99)
    table = {m: [ev["metrics"].get(m) for ev in evals] for m in metrics}
    result: dict[str, Any] = {"runs": labels, "about": about, "differences": differences(about, labels),
                              "metrics": table, "figure": None}
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from ..report.figures import save_figure

        fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.4))
        for ax, metric in zip(axes, CURVES):
            for rd, label in zip(rds, labels):
                x, y = curves(rd, metric, length)
                ax.plot(x, y, marker="o", ms=2.5, label=label)
                if metric == "entropy_model":
                    xb, yb = curves(rd, "entropy_bayes", length)
                    ax.plot(xb, yb, ls=":", color="k", lw=1, label=None if rd is not rds[0] else "Bayes")
            ax.set_xlabel("scored position (episode step)")
            ax.set_ylabel(f"{metric} (bits)")
            ax.set_title(metric + ("" if length is None else f" at length {length}"), fontsize=9)
        axes[0].legend(fontsize=7)
        result["figure"] = str(save_figure(fig, Path(out)))
    return result
