"""Matplotlib (Agg) plumbing shared by the geometry figures."""

from __future__ import annotations

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
