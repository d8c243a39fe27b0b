"""Figures of a run (matplotlib, Agg backend, PNG).

Every function takes what it plots plus an output ``path``, writes one PNG and returns its
``Path``.  Evaluation figures accept an ``EvalResult`` or its ``to_dict()`` form (what a run
folder's ``eval.json`` holds).  Positions on the x axis are 1-based token positions of the
episode; only scored positions are drawn.

File names used by ``windtunnel.report.render_report`` (and its display order): ``FIGURE_ORDER``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

__all__ = ["FIGURE_ORDER", "calibration", "entropy_curve", "kl_curve", "training_curves"]

FIGURE_ORDER: tuple[str, ...] = ("training", "entropy", "kl", "calibration")
"""Stem prefixes of the standard figures, in report order (other PNGs follow alphabetically)."""

_STYLE = {
    "figure.dpi": 110,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_MODEL = "#1f77b4"
_BAYES = "#d62728"


def _as_dict(result: Any) -> dict[str, Any]:
    if hasattr(result, "to_dict"):
        return result.to_dict()
    if isinstance(result, (str, Path)):
        return json.loads(Path(result).read_text())
    return dict(result)


def _arr(xs: Sequence[Any] | None) -> np.ndarray:
    if xs is None:
        return np.array([], dtype=float)
    return np.array([np.nan if x is None else float(x) for x in xs], dtype=float)


def _save(fig: plt.Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def save_figure(fig: plt.Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (folders created) and close it."""
    return _save(fig, path)


def _task_label(d: Mapping[str, Any]) -> str:
    task = d.get("task", {})
    params = ", ".join(f"{k}={v}" for k, v in task.get("params", {}).items())
    return f"{task.get('name', '?')}({params})"


def _band(ax: plt.Axes, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, color: str) -> None:
    ok = np.isfinite(lo) & np.isfinite(hi)
    if ok.any():
        ax.fill_between(x[ok], lo[ok], hi[ok], color=color, alpha=0.25, linewidth=0)


def entropy_curve(result: Any, path: str | Path, length: int | None = None) -> Path:
    """Mean model entropy vs mean Bayes entropy per position, bits, with 95% bootstrap bands.

    ``H̄_q(t)`` and ``H̄_p(t)`` (averaged over sequences first, as the papers do) — on bijection the Bayes
    curve is the staircase ``log2(V − k + 1)`` (with replacement: a sawtooth).  The lower panel is
    ``|H̄_q − H̄_p|`` per position, whose mean is ``entropy_mae_curve``.  ``length`` picks one of the
    evaluated lengths instead of the training length.
    """
    d = _as_dict(result)
    src = d if length is None else d["lengths"][str(length)]
    curves, bands = src["curves"], src.get("curve_ci", {})
    hq, hp = _arr(curves["entropy_model"]), _arr(curves["entropy_bayes"])
    x = np.arange(1, len(hq) + 1)
    ok = np.isfinite(hp)
    with plt.rc_context(_STYLE):
        fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7.5, 5.6), sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
        for name, y, c, lab, mk in (("entropy_bayes", hp, _BAYES, "Bayes posterior", "s"),
                                    ("entropy_model", hq, _MODEL, "model", "o")):
            if name in bands:
                _band(ax, x, _arr(bands[name]["lo"]), _arr(bands[name]["hi"]), c)
            ax.plot(x[ok], y[ok], marker=mk, ms=3.5, lw=1.5, color=c, label=lab,
                    ls="--" if name == "entropy_bayes" else "-")
        ax.set_ylabel("mean entropy (bits)")
        ax.set_ylim(bottom=0)
        m = src["metrics"].get("entropy_mae_curve", {}).get("value")
        m2 = src["metrics"].get("entropy_mae", {}).get("value")
        title = f"Predictive entropy per position\n{_task_label(d)}"  # the label can be long: its own line
        if length is not None:
            title += f", length {length}"
        ax.set_title(title, fontsize=10)
        note = []
        if m is not None:
            note.append(f"entropy_mae_curve = {m:.3g} bits")
        if m2 is not None:
            note.append(f"entropy_mae = {m2:.3g} bits")
        if note:
            ax.text(0.99, 0.97, "\n".join(note), transform=ax.transAxes, ha="right", va="top",
                    fontsize=9, bbox={"boxstyle": "round", "fc": "white", "alpha": 0.8, "ec": "0.8"})
        ax.legend(loc="lower left", frameon=False)
        gap = np.abs(hq - hp)
        ax2.plot(x[ok], gap[ok], marker="o", ms=3, lw=1.2, color="0.3")
        ax2.set_ylabel("|gap| (bits)")
        ax2.set_xlabel("position in episode (scored positions only)")
        return _save(fig, path)


def kl_curve(result: Any, path: str | Path, horizon: int | None = None) -> Path:
    """KL(Bayes ‖ model) per position in bits, at the training length and every evaluated length.

    A vertical dashed line marks the training horizon (token positions ``≤ horizon`` were seen in
    training; default ``result.horizon["seq_len"]``).  Log y axis when every plotted value is
    positive; zeros (e.g. the oracle) force a linear axis.
    """
    d = _as_dict(result)
    if horizon is None:
        horizon = (d.get("horizon") or {}).get("seq_len")
    series: list[tuple[str, dict[str, Any]]] = []
    hz = d.get("horizon") or {}
    base_label = f"{hz['param']}={hz['value']} (training)" if hz.get("param") else "training length"
    series.append((base_label, d))
    for K in sorted(d.get("lengths", {}), key=lambda k: int(k)):
        series.append((f"{hz.get('param') or 'length'}={K}", d["lengths"][K]))
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(7.5, 4.4))
        cmap = plt.get_cmap("viridis")
        positive = True
        drawn = []
        for i, (lab, src) in enumerate(series):
            y = _arr(src["curves"]["kl"])
            x = np.arange(1, len(y) + 1)
            ok = np.isfinite(y)
            if not ok.any():
                continue
            color = _MODEL if i == 0 else cmap(0.15 + 0.7 * (i - 1) / max(1, len(series) - 2))
            band = src.get("curve_ci", {}).get("kl")
            if band is not None:
                _band(ax, x, _arr(band["lo"]), _arr(band["hi"]), color)
            if i == 0:
                ax.plot(x[ok], y[ok], marker="o", ms=4, lw=2.0, color=color, label=lab, zorder=4)
            else:  # longer lengths share the training prefix: draw them under it, dashed
                ax.plot(x[ok], y[ok], marker="^", ms=3, lw=1.1, ls="--", color=color, label=lab, zorder=3 - i / 100)
            positive &= bool((y[ok] > 0).all())
            drawn.append(y[ok])
        if drawn and positive:
            ax.set_yscale("log")
        if horizon is not None:
            ax.axvline(horizon + 0.5, color="0.35", ls="--", lw=1.2)
            ax.text(horizon + 0.5, 0.98, " training horizon", transform=ax.get_xaxis_transform(),
                    ha="left", va="top", fontsize=9, color="0.25")
        ax.set_xlabel("position in episode (scored positions only)")
        ax.set_ylabel("KL(Bayes ‖ model) (bits)")
        ax.set_title(f"Per-position KL to the exact posterior\n{_task_label(d)}", fontsize=10)
        ax.legend(frameon=False, fontsize=9)
        return _save(fig, path)


def calibration(logits: torch.Tensor, episodes: Any, path: str | Path, bins: int = 15,
                scatter: bool = True, max_points: int = 20000, seed: int = 0) -> Path:
    """Reliability diagram of ``softmax(logits)`` at the scored positions.

    Every (position, class) pair is one prediction ``q_c`` binned on ``[0, 1]``; per bin we plot
    the empirical frequency of ``target == c`` (with a binomial ±2σ bar) and the mean exact
    posterior ``p_c`` (the noise-free reference) against the mean ``q_c``.  With ``scatter`` a
    second panel shows ``q_c`` against ``p_c`` directly (a random subsample of ``max_points``):
    a Bayes-exact model lies on the diagonal.
    """
    q = torch.softmax(logits.detach().double().cpu(), dim=-1)
    p = episodes.posterior.detach().double().cpu()
    mask = episodes.mask.cpu().bool()
    targets = episodes.targets.cpu()
    valid = mask & (targets >= 0)
    C = q.shape[-1]
    qv = q[valid].reshape(-1).numpy()
    pv = p[valid].reshape(-1).numpy()
    hit = torch.nn.functional.one_hot(targets[valid].clamp_min(0), C).double().reshape(-1).numpy()
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(qv, edges) - 1, 0, bins - 1)
    cnt = np.bincount(which, minlength=bins).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_q = np.bincount(which, qv, bins) / cnt
        freq = np.bincount(which, hit, bins) / cnt
        mean_p = np.bincount(which, pv, bins) / cnt
        err = 2 * np.sqrt(freq * (1 - freq) / cnt)
    ece = float(np.nansum(cnt * np.abs(freq - mean_q)) / max(cnt.sum(), 1))
    ece_p = float(np.nansum(cnt * np.abs(mean_p - mean_q)) / max(cnt.sum(), 1))
    ok = cnt > 0
    with plt.rc_context(_STYLE):
        ncol = 2 if scatter else 1
        fig, axes = plt.subplots(1, ncol, figsize=(5.2 * ncol, 4.6), squeeze=False)
        ax = axes[0, 0]
        ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls=":")
        ax.errorbar(mean_q[ok], freq[ok], yerr=err[ok], fmt="o", ms=4, color=_MODEL, capsize=2,
                    label=f"empirical frequency of target (ECE {ece:.3g})")
        ax.plot(mean_q[ok], mean_p[ok], "s--", ms=4, color=_BAYES, lw=1,
                label=f"mean Bayes posterior (gap {ece_p:.3g})")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("model probability q (bin mean)")
        ax.set_ylabel("probability / frequency")
        ax.set_title(f"Reliability ({int(valid.sum())} scored positions × {C} classes)")
        ax.legend(frameon=False, fontsize=8, loc="upper left")
        if scatter:
            ax2 = axes[0, 1]
            rng = np.random.default_rng(seed)
            idx = rng.choice(len(qv), size=min(max_points, len(qv)), replace=False) if len(qv) else []
            ax2.plot([0, 1], [0, 1], color="0.6", lw=1, ls=":")
            ax2.scatter(pv[idx], qv[idx], s=4, alpha=0.25, color=_MODEL, linewidths=0)
            ax2.set_xlim(-0.02, 1.02)
            ax2.set_ylim(-0.02, 1.02)
            ax2.set_xlabel("exact posterior probability p")
            ax2.set_ylabel("model probability q")
            ax2.set_title(f"Model vs Bayes, per class ({len(idx)} points)")
        return _save(fig, path)


def _finite(x: Any) -> float | None:
    if isinstance(x, Mapping):
        x = x.get("value")
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def training_curves(metrics_jsonl_path: str | Path, path: str | Path) -> Path:
    """Training loss and Bayes gap (bits) against step, log y, from a run's ``metrics.jsonl``.

    Lines ``{"step", "loss", "bayes_gap", "lr", …}`` give the curves; lines with an ``"eval"``
    dict contribute its ``kl`` (or ``bayes_gap``) as markers; the learning rate, when logged, is
    drawn in a small lower panel.  Anything else is skipped.  Loss is drawn in the units it was
    logged in (the training loop's cross-entropy); the Bayes gap is ``KL(Bayes ‖ model)`` in bits.
    """
    from ..run.runs import read_jsonl

    rows = read_jsonl(metrics_jsonl_path)
    series: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in ("loss", "bayes_gap", "lr", "eval")}
    for r in rows:
        step = _finite(r.get("step"))
        if step is None:
            continue
        for k in ("loss", "bayes_gap", "lr"):
            v = _finite(r.get(k))
            if v is not None:
                series[k][0].append(step)
                series[k][1].append(v)
        ev = r.get("eval")
        if isinstance(ev, Mapping):
            src = ev.get("metrics", ev)
            v = _finite(src.get("kl")) if isinstance(src, Mapping) else None
            if v is None and isinstance(src, Mapping):
                v = _finite(src.get("bayes_gap"))
            if v is not None:
                series["eval"][0].append(step)
                series["eval"][1].append(v)
    has_lr = bool(series["lr"][0])
    with plt.rc_context(_STYLE):
        if has_lr:
            fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7.5, 5.6), sharex=True,
                                          gridspec_kw={"height_ratios": [3, 1]})
        else:
            fig, ax = plt.subplots(figsize=(7.5, 4.4))
        anything = False
        for k, color, lab in (("loss", "0.35", "training loss"),
                              ("bayes_gap", _MODEL, "Bayes gap: KL(Bayes ‖ model), bits")):
            xs, ys = series[k]
            pos = [(x, y) for x, y in zip(xs, ys) if y > 0]
            if pos:
                ax.plot(*zip(*pos), lw=1.3, color=color, label=lab)
                anything = True
        xs, ys = series["eval"]
        pos = [(x, y) for x, y in zip(xs, ys) if y > 0]
        if pos:
            ax.plot(*zip(*pos), "D", ms=5, color=_BAYES, label="eval KL (bits)")
            anything = True
        if anything:
            ax.set_yscale("log")
            ax.legend(frameon=False)
        else:
            ax.text(0.5, 0.5, "no loss / bayes_gap entries in metrics.jsonl", ha="center", va="center",
                    transform=ax.transAxes, color="0.4")
        ax.set_ylabel("loss / gap (log scale)")
        ax.set_title("Training")
        if has_lr:
            ax2.plot(*series["lr"], color="0.4", lw=1.2)
            ax2.set_ylabel("learning rate")
            ax2.set_xlabel("step")
        else:
            ax.set_xlabel("step")
        return _save(fig, path)
