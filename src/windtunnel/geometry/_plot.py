"""Matplotlib (Agg) plumbing shared by the geometry figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def figure(nrows: int = 1, ncols: int = 1, w: float = 6.4, h: float = 4.0, **kw: Any) -> tuple[Any, Any]:
    return plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False, **kw)


def save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def placeholder(text: str, path: str | Path) -> Path:
    """A small figure that says why there is nothing to draw."""
    fig, ax = figure(w=6.4, h=1.6)
    ax[0, 0].axis("off")
    ax[0, 0].text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    return save(fig, path)


def nan(xs: Any) -> list[float]:
    """``None`` -> NaN so matplotlib draws gaps."""
    return [float("nan") if x is None else float(x) for x in xs]


def loggable(values: Any) -> list[float]:
    """``values`` as a log axis can draw them: each one that is ``None``, NaN, infinite or ≤ 0 becomes NaN (a gap
    in a line, no bar)."""
    out = []
    for v in values:
        x = float("nan") if v is None else float(v)
        out.append(x if math.isfinite(x) and x > 0 else float("nan"))
    return out


def log_scale(ax: Any, *series: Any) -> int:
    """Put ``ax``'s y axis on a log scale for the values drawn on it (``series``: each as given, drawn through
    :func:`loggable`), and write on the axes how many of them a log scale cannot show (NaN, infinite or ≤ 0;
    ``None``, a value not computed, is not counted).  Where none is positive and finite the axis stays linear —
    matplotlib cannot place a log axis over no values — and says so.  Returns the number left out."""
    values = [v for s in series for v in s if v is not None]
    shown = sum(1 for x in loggable(values) if not math.isnan(x))
    left_out = len(values) - shown
    if shown:
        ax.set_yscale("log")
    if left_out:
        said = (f"{left_out} value(s) ≤ 0 or not finite: not drawn" if shown else
                f"all {left_out} value(s) ≤ 0 or not finite: nothing to draw")
        ax.text(0.02, 0.02, said, transform=ax.transAxes, ha="left", va="bottom", fontsize=7, color="0.35", wrap=True)
    return left_out
