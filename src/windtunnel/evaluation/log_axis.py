"""What every figure shares, below the analyses that draw them: the values a log axis can show.

A diagnostic's or an experiment's figure of errors on a log scale must not fail on a run that diverged or on a
readout that saturated: these helpers leave out what a log axis cannot draw (≤ 0, NaN, infinite) and say so on the
axes.  Free of matplotlib's import: they act on the axes they are given.
"""

from __future__ import annotations

import math
from typing import Any


def drawable(x: Any) -> bool:
    """Whether a log axis can draw ``x``: computed (not ``None``), finite and positive."""
    return x is not None and math.isfinite(float(x)) and float(x) > 0


def loggable(values: Any) -> list[float]:
    """``values`` as a log axis can draw them: each one that is ``None``, NaN, infinite or ≤ 0 becomes NaN (a gap
    in a line, no bar)."""
    return [float(v) if drawable(v) else float("nan") for v in values]


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
