r"""The statistics every stage shares: resampling, intervals, seeds, JSON-safe numbers.

* :func:`resample_weights` and :func:`percentile_ci` — the nonparametric bootstrap over evaluation
  sequences (each sequence an independent draw from the task), used by ``evaluation`` and
  ``geometry``;
* :func:`mean_std` — mean, sample standard deviation and Student-t 95% interval over independent
  replicates (training seeds), used by the table and the Paper II experiments;
  :func:`paired` does the same for per-seed differences (the paired comparison);
* :func:`finite` and :func:`json_safe` — plain Python numbers with NaN/inf as ``None``
  (JSON has no NaN), so every record on disk is strict JSON.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

LEVEL = 0.95
"""Confidence level of every interval."""

# two-sided 95% quantiles t_{0.975, df} of Student's t, df = 1..30
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(df: int) -> float:
    r""":math:`t_{0.975,\,df}`: tabulated to df = 30, then the Cornish–Fisher expansion around
    :math:`z = 1.95996` (:math:`z + (z^3+z)/4\nu + (5z^5+16z^3+3z)/96\nu^2`, error < 1e-3)."""
    if df < 1:
        raise ValueError(f"t975 needs df >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def resample_weights(n: int, n_boot: int, seed: int) -> torch.Tensor:
    """Multinomial resampling counts ``W [n_boot, n]`` float64: row ``r`` counts how often each of
    the ``n`` sequences is drawn (with replacement, ``n`` draws) in resample ``r``."""
    g = torch.Generator()
    g.manual_seed(int(seed))
    idx = torch.randint(0, n, (n_boot, n), generator=g)
    w = torch.zeros(n_boot, n, dtype=torch.float64)
    w.scatter_add_(1, idx, torch.ones(n_boot, n, dtype=torch.float64))
    return w


def percentile_ci(samples: torch.Tensor, level: float = LEVEL) -> tuple[torch.Tensor, torch.Tensor]:
    """Percentile interval ``[q_(1−level)/2, q_(1+level)/2]`` along dim 0 (NaN resamples ignored)."""
    a = (1.0 - level) / 2.0
    qs = torch.tensor([a, 1.0 - a], dtype=torch.float64)
    out = torch.nanquantile(samples.double(), qs, dim=0)
    return out[0], out[1]


def finite_ci(samples: torch.Tensor, level: float = LEVEL) -> list[float | None]:
    """Percentile interval of a 1-D sample over its finite values, ``[None, None]`` if there are none."""
    s = samples.double()
    s = s[torch.isfinite(s)]
    if len(s) == 0:
        return [None, None]
    lo, hi = percentile_ci(s, level)
    return [float(lo), float(hi)]


def mean_std(xs: Sequence[float | None]) -> dict[str, Any]:
    r"""Mean, sample std (ddof 1; 0 for one value) and 95% interval of ``xs``, NaN and None skipped.

    The interval is Student's :math:`\bar x \pm t_{0.975,k-1}\, s/\sqrt{k}` over the ``k`` values
    (training seeds: each an independent replicate of the whole run); ``None`` for ``k < 2``.
    """
    vals = [float(x) for x in xs if x is not None and not math.isnan(x)]
    k = len(vals)
    mean = sum(vals) / k if k else math.nan
    std = math.sqrt(sum((x - mean) ** 2 for x in vals) / (k - 1)) if k > 1 else (0.0 if k == 1 else math.nan)
    ci = None
    if k > 1:
        half = t975(k - 1) * std / math.sqrt(k)
        ci = [mean - half, mean + half]
    return {"mean": mean, "std": std, "n": k, "values": list(xs), "ci95": ci}


def paired(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    r"""The paired comparison of two arms run on the same seeds: :func:`mean_std` of ``a_s − b_s``.

    An interval that excludes 0 is a difference at the 95% level (the paired t-test).
    """
    if len(a) != len(b):
        raise ValueError(f"paired needs equal lengths, got {len(a)} and {len(b)}")
    return mean_std([x - y for x, y in zip(a, b)])


def finite(x: Any) -> float | None:
    """A plain float, or ``None`` for NaN/inf/None (JSON has no NaN)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def json_safe(obj: Any) -> Any:
    """Recursively turn tensors/numpy numbers into plain Python numbers, NaN/inf into ``None``."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return json_safe(obj.tolist()) if obj.dim() else json_safe(obj.item())
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return finite(obj)
    return obj


def rankdata(x: torch.Tensor) -> torch.Tensor:
    """Ranks 1..N with ties given their average rank (as ``scipy.stats.rankdata``)."""
    a = np.asarray(x.detach().cpu().double().numpy())
    order = np.argsort(a, kind="mergesort")
    s = a[order]
    bounds = np.flatnonzero(np.r_[True, s[1:] != s[:-1], True])
    counts = np.diff(bounds)
    avg = bounds[:-1] + (counts - 1) / 2.0 + 1.0
    ranks = np.empty(len(a))
    ranks[order] = np.repeat(avg, counts)
    return torch.from_numpy(ranks)


def pearson(x: torch.Tensor, y: torch.Tensor) -> float | None:
    x, y = x.double() - x.double().mean(), y.double() - y.double().mean()
    den = math.sqrt(float((x * x).sum()) * float((y * y).sum()))
    if den <= 1e-12 * max(1.0, float(x.abs().max()) * float(y.abs().max()) * len(x)):
        return None
    return float((x * y).sum()) / den


def spearman(x: torch.Tensor, y: torch.Tensor) -> float | None:
    """Spearman's ρ (Pearson correlation of average ranks); ``None`` if either side is constant."""
    if len(x) < 3:
        return None
    return pearson(rankdata(x), rankdata(y))
