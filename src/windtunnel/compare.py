"""``windtunnel compare RUN…``: several runs' evaluations side by side, and their curves overlaid.

Each run folder's ``eval.json`` holds per-position curves over the whole token sequence, with
``None`` where nothing is scored (an HMM header, the value tokens of a bijection).
:func:`curves` strips that padding and indexes the scored positions by the episode's own step
(1, 2, …), so runs of different layouts and lengths line up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from .errors import InvalidValue
from .runs import RunDir

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


def compare(runs: Sequence[str | Path], out: str | Path | None = None, length: int | None = None) -> dict[str, Any]:
    """The headline metrics of every run (value and interval) and, with ``out``, one PNG overlaying
    each curve of :data:`CURVES` against the episode step.  Returns ``{"runs", "metrics", "figure"}``."""
    if len(runs) < 1:
        raise InvalidValue("compare needs at least one run folder")
    rds = [RunDir(r) for r in runs]
    evals = [rd.read_eval() for rd in rds]
    names = [rd.path.name for rd in rds]
    labels = [_label(rd, names) for rd in rds]
    metrics = sorted({k for ev in evals for k in ev["metrics"]}, key=lambda k: list(evals[0]["metrics"]).index(k)
                     if k in evals[0]["metrics"] else 99)
    table = {m: [ev["metrics"].get(m) for ev in evals] for m in metrics}
    result: dict[str, Any] = {"runs": labels, "metrics": table, "figure": None}
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from .report.figures import save_figure

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
