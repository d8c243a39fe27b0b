r"""The statistics every stage shares: resampling, intervals, seeds, JSON-safe numbers.

* :func:`resample_weights` and :func:`percentile_ci` — the nonparametric bootstrap over evaluation
  sequences (each sequence an independent draw from the task), used by ``evaluation`` and
  ``geometry``;
* :func:`mean_std` — mean, sample standard deviation and Student-t 95% interval over independent
  replicates (training seeds), used by the table and the Paper II experiments;
  :func:`paired` does the same for per-seed differences (the paired comparison);
* :func:`bootstrap_mean`, :func:`sign_flip_p` and :func:`paired_effect` — the statistics of every intervention
  (steering, patching, ablation): a bootstrap interval over episodes and a paired sign-flip p-value against
  the matched control;
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


# --- interventions: a bootstrap interval over episodes and a paired sign-flip test -------------------
N_PERM = 2000
"""Random sign flips of the paired test (:func:`sign_flip_p`) when the ``2^n`` flips are too many to enumerate."""


def _sums_counts(values: Any, counts: Any | None) -> tuple[torch.Tensor, torch.Tensor]:
    v = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    c = torch.ones_like(v) if counts is None else torch.as_tensor(counts, dtype=torch.float64).reshape(-1)
    if c.shape != v.shape:
        raise ValueError(f"values and counts differ in length: {tuple(v.shape)} vs {tuple(c.shape)}")
    return v, c


def pooled_mean(sums: Any, counts: Any | None = None) -> float | None:
    r"""The pooled mean :math:`\bar x = \sum_i s_i / \sum_i c_i` of per-episode sums ``s_i`` over ``c_i`` scored
    positions (``counts=None``: one value per episode, the plain mean); ``None`` with no position."""
    s, c = _sums_counts(sums, counts)
    return float(s.sum() / c.sum()) if float(c.sum()) > 0 else None


def bootstrap_mean(sums: Any, counts: Any | None = None, *, n_boot: int = 1000, seed: int = 0,
                   level: float = LEVEL) -> dict[str, Any]:
    r"""The pooled mean of per-episode sums ``s_i`` over counts ``c_i`` (:func:`pooled_mean`) with its
    nonparametric bootstrap interval over *episodes*: resample ``r`` draws the ``n`` episodes with replacement
    (counts ``w_{ri}``, :func:`resample_weights`) and gives :math:`\bar x_r = \sum_i w_{ri} s_i / \sum_i w_{ri}
    c_i`; the interval is the percentile interval of the :math:`\bar x_r` (:func:`finite_ci`; a resample with no
    position is left out).  Episodes, not positions, are the independent draws: positions of one episode share
    its latent.  Returns ``{"mean", "ci", "n"}``."""
    s, c = _sums_counts(sums, counts)
    n = len(s)
    if n == 0:
        return {"mean": None, "ci": [None, None], "n": 0}
    W = resample_weights(n, n_boot, seed)
    den = W @ c
    boot = torch.where(den > 0, (W @ s) / den.clamp_min(1e-300), torch.full_like(den, math.nan))
    return {"mean": pooled_mean(s, c), "ci": finite_ci(boot, level), "n": n}


def sign_flip_p(diffs: Any, counts: Any | None = None, *, n_perm: int = N_PERM, seed: int = 0,
                alternative: str = "two-sided") -> float | None:
    r"""Paired permutation test of "no difference" on per-episode paired differences ``d_i`` (the sum, over the
    episode's ``c_i`` scored positions, of condition minus control; ``counts=None``: one difference each).

    Under the null the two conditions are exchangeable within an episode, so each ``d_i`` is as likely to have
    either sign.  The statistic is the pooled mean :math:`T = \sum_i d_i / \sum_i c_i`; its null distribution is
    :math:`T^{(\epsilon)} = \sum_i \epsilon_i d_i / \sum_i c_i` over signs :math:`\epsilon \in \{\pm1\}^n` — all
    :math:`2^n` of them when :math:`2^n \le` ``n_perm`` (the exact p-value), else ``n_perm`` random ones with the
    observed signs counted once (:math:`p = (1 + \#\{T^{(\epsilon)} \succeq T\}) / (1 + n_{perm})`, never 0).
    ``alternative``: ``"two-sided"`` (:math:`|T^{(\epsilon)}| \ge |T|`), ``"greater"`` (:math:`T^{(\epsilon)} \ge
    T`: the condition exceeds the control), ``"less"``.  Identical conditions (every ``d_i = 0``) give ``p = 1``;
    ``None`` with no episode.  Comparisons are made with a relative tolerance of ``1e-12``, so ties from
    floating-point rounding count as ties."""
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")
    d, c = _sums_counts(diffs, counts)
    ok = torch.isfinite(d)
    d, c = d[ok], c[ok]
    n = len(d)
    if n == 0 or float(c.sum()) <= 0:
        return None
    den = float(c.sum())
    exact = n <= 20 and 2**n <= n_perm
    if exact:
        codes = torch.arange(2**n)[:, None]
        signs = 1.0 - 2.0 * ((codes >> torch.arange(n)[None, :]) & 1).double()
    else:
        g = torch.Generator().manual_seed(int(seed))
        signs = 1.0 - 2.0 * torch.randint(0, 2, (n_perm, n), generator=g).double()
    t = float(d.sum()) / den
    null = (signs @ d) / den
    tol = 1e-12 * max(1.0, float(d.abs().sum()) / den)
    if alternative == "two-sided":
        hits = int((null.abs() >= abs(t) - tol).sum())
    elif alternative == "greater":
        hits = int((null >= t - tol).sum())
    else:
        hits = int((null <= t + tol).sum())
    return hits / len(null) if exact else (1 + hits) / (1 + n_perm)


def paired_effect(condition: Any, control: Any, counts: Any | None = None, *, n_boot: int = 1000, seed: int = 0,
                  n_perm: int = N_PERM, level: float = LEVEL) -> dict[str, Any]:
    r"""A condition against its matched control on the same episodes: per-episode sums ``a_i`` (condition) and
    ``b_i`` (control) over the same ``c_i`` positions.  Returns the pooled difference ``diff`` = :math:`\sum (a_i
    - b_i) / \sum c_i` with its paired bootstrap interval over episodes (``diff_ci``: both arms resampled
    together, :func:`bootstrap_mean` of the differences) and the two-sided sign-flip p-value (``p_value``,
    :func:`sign_flip_p`)."""
    a, c = _sums_counts(condition, counts)
    b, _ = _sums_counts(control, counts)
    d = a - b
    boot = bootstrap_mean(d, c, n_boot=n_boot, seed=seed, level=level)
    return {"diff": boot["mean"], "diff_ci": boot["ci"], "p_value": sign_flip_p(d, c, n_perm=n_perm, seed=seed + 1)}
