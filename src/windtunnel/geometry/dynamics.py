"""Frame–precision dissociation over a run's checkpoints (Paper II's prediction, arXiv 2512.22473)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ..run import checkpoint as ckpt
from ..evaluation import metrics as M
from .. import models, tasks
from ..run.runs import RunDir
from ..tasks.base import Episodes
from ..evaluation.log_axis import log_scale, loggable
from . import _plot
from .registry import Diagnostic, Reading, lacks, missing, register
from ._common import (GEOMETRY_SEED, clean, collect_scored, device_of, eval_mode, inputs_on, n_layers, spearman,
                      evenly_spaced, finite_checkpoints)
from .readouts import pca

REQUIRES = ("blocks.{l}.hook_resid_post",)
"""What :func:`frame_precision` reads from the model: each layer's output (the last one's is the state it
follows); the attention patterns ``blocks.{l}.attn.hook_pattern``, where every layer has them, add the frame
change."""

__all__ = ["frame_precision", "frame_precision_figure", "first_below", "frame_first", "settle_step",
           "settle_step_first10pct", "js_bits"]

SETTLE_FRACTION = 0.1


def js_bits(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence in bits along the last axis (0 ≤ JS ≤ 1)."""
    p, q = p.double(), q.double()
    m = 0.5 * (p + q)

    def kl(a: torch.Tensor) -> torch.Tensor:
        return torch.where(a > 0, a * (torch.log2(a.clamp_min(1e-300)) - torch.log2(m.clamp_min(1e-300))),
                           torch.zeros_like(a)).sum(-1)

    return (0.5 * kl(p) + 0.5 * kl(q)).clamp_min(0.0)


def settle_step(steps: list[int], values: list[float | None], fraction: float = SETTLE_FRACTION, *,
                log: bool = True) -> int | None:
    r"""The first checkpoint step from which the quantity's remaining change to its end-of-run value
    stays ≤ ``fraction`` of its total change (first checkpoint → last), measured in decades
    (``log=True``) or on its own scale (``log=False``); ``None`` if that holds only at the last
    checkpoint (it had not settled within the run).  A pure function of the committed series, so a
    claim can recompute it from a ``geometry.json``'s ``frame_precision.series``.

    With :math:`d(v) = \log_{10} v` (``log=True``) or :math:`d(v) = v` (``log=False``), end value
    :math:`v_\mathrm{end}` (the last checkpoint) and first value :math:`v_0`:

    .. math:: \mathrm{settle} = \min\{ s_i,\ i < n-1 :
              |d(v_j) - d(v_\mathrm{end})| \le f\,|d(v_0) - d(v_\mathrm{end})|\ \forall j \ge i \}

    i.e. the remaining change to the end value is at most ``fraction`` (f = 10%) of the total change,
    at that checkpoint and every later one.  For an error that falls over orders of magnitude (KL,
    entropy MAE, ``log=True``) this is "the remaining fall, in log10, is ≤ 10% of the total fall in
    log10": a KL going 0.92 → 0.085 → 0.0007 bits has 2.1 of its 3.1 decades still to fall at 0.085,
    so it has not settled there.  (The old reading, :func:`settle_step_first10pct` — "≤ 10% of the
    first value" — calls it settled at 0.085: a fall of 1.03 decades out of 3.1 is already enough.)

    ``log=False`` is the same rule for a quantity that already *is* the distance to the end state:
    the JS of the attention rows to the final checkpoint's is 0 there by construction, so on a log
    scale every earlier checkpoint would be infinitely far from the end; on its own scale the rule is
    ``JS(t) ≤ 0.1 · JS(first)`` (the attention has covered 90% of its way to the final pattern).
    Both readings ask the same question — has the remaining change to the end-of-run state shrunk
    to 10% of the change at the start? — each in the quantity's natural distance to that state.

    The last checkpoint meets the rule by definition (its distance to itself is 0), so it does not
    count: a quantity that gets within 10% only there is still moving when the run ends (``None``).
    A series that does not change (first value = end value, e.g. constant) has nothing left to
    settle: it is settled from the first checkpoint on which it equals its end value.  ``None`` too
    with a missing value, fewer than 2 checkpoints, or (``log=True``) a value that is not positive.
    """
    if len(values) < 2 or len(values) != len(steps) or any(v is None for v in values):
        return None
    if log:
        if any(not v > 0 for v in values):  # type: ignore[operator]
            return None
        d = [math.log10(v) for v in values]  # type: ignore[arg-type]
    else:
        d = [float(v) for v in values]  # type: ignore[arg-type]
    end = d[-1]
    tol = fraction * abs(d[0] - end)
    ok = [abs(x - end) <= tol for x in d]
    for i in range(len(ok) - 1):
        if all(ok[i:]):
            return steps[i]
    return None


def settle_step_first10pct(steps: list[int], values: list[float | None],
                           fraction: float = SETTLE_FRACTION) -> int | None:
    """The old reading of "settled": the first checkpoint step from which ``values`` stays at or below
    ``fraction`` × its value at the first checkpoint (``None`` if it never does or the initial value
    is not positive).  For an error that falls over orders of magnitude this is met after the first
    decade of its fall, however many decades are still to come; kept so both readings can be
    reported (``*_settle_step_first10pct``).  For the JS to the final attention (0 at the end) it
    agrees with :func:`settle_step` ``(log=False)`` except where only the last checkpoint qualifies."""
    if not values or values[0] is None or not values[0] > 0:
        return None
    thr = fraction * values[0]
    ok = [v is not None and v <= thr for v in values]
    for i in range(len(ok)):
        if all(ok[i:]):
            return steps[i]
    return None


def first_below(steps: list[int], values: list[float | None], fraction: float = SETTLE_FRACTION) -> int | None:
    """The first checkpoint step at which ``values`` is at or below ``fraction`` × its first value."""
    if not values or values[0] is None or not values[0] > 0:
        return None
    return next((s for s, v in zip(steps, values) if v is not None and v <= fraction * values[0]), None)


def frame_first(js_step: int | None, error_step: int | None) -> bool | None:
    """Whether the attention settled before the error (settle steps from :func:`settle_step`, ``None``:
    not settled within the run): true if the attention settled and the error later or never; false if
    the error settled at or before the attention's step, or the attention never did; ``None`` if neither."""
    if js_step is None and error_step is None:
        return None
    if js_step is None:
        return False
    return error_step is None or js_step < error_step


def _patterns(model: torch.nn.Module, ep: Episodes, chunk: int = 64) -> torch.Tensor:
    """Attention rows at the scored queries: ``[L, H, Q, T]`` float32 (CPU)."""
    L = n_layers(model)
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(L)]
    dev = device_of(model)
    rows = []
    with eval_mode(model):
        for part in ep.chunks(chunk):
            _, cache = model.run_with_cache(**inputs_on(part, dev), names=names)
            b, t = part.mask.nonzero(as_tuple=True)
            rows.append(torch.stack([cache[nm].float().cpu()[b, :, t] for nm in names]))  # [L,Q,H,T]
    return torch.cat(rows, 1).transpose(1, 2)


def frame_precision(
    run_dir: str | Path,
    *,
    n: int = 128,
    seed: int = GEOMETRY_SEED,
    device: str | torch.device | None = None,
    max_checkpoints: int | None = None,
) -> dict[str, Any]:
    r"""Attention-frame change, value-manifold precision and error over a run's checkpoints.

    On ``n`` fixed episodes, for every checkpoint in ``run_dir/checkpoints`` (oldest first):

    * **frame change** (transformers): Jensen–Shannon divergence (bits) between each head's
      attention row at every scored query and the same row of the *final* checkpoint, averaged over
      queries; per layer (mean over heads) and overall (``js_mean``).  0 at the final checkpoint by
      construction.  Null scale: ``js_uniform``, the JS between uniform causal attention and the
      final patterns.
    * **precision**: :math:`|\rho_S|` between PC1 of the last block's ``hook_resid_post`` at the
      scored positions (centred covariance PCA) and the Bayes entropy.
    * **error**: ``entropy_mae`` and ``kl`` (bits, :mod:`windtunnel.evaluation.metrics`); null: the uniform
      predictor's values.

    Settling (:func:`settle_step`, one rule for attention and error): the first checkpoint from which
    the remaining change to the end-of-run value stays ≤ 10% of the total change, for the KL and
    ``entropy_mae`` in decades (:math:`\log_{10} v - \log_{10} v_\mathrm{end} \le 0.1\,(\log_{10} v_0 -
    \log_{10} v_\mathrm{end})`), for the JS to the final attention — itself the distance to the end
    state, 0 there — on its own scale (:math:`\mathrm{JS}(t) \le 0.1\,\mathrm{JS}(t_0)`); ``None``
    if only the last checkpoint qualifies (still moving when the run ended).
    ``js_settle_step`` (+ ``_by_layer``), ``error_settle_step`` (``kl``), ``entropy_mae_settle_step``.
    Before this rule ``error_settle_step`` / ``entropy_mae_settle_step`` meant "first step from which
    the value stays ≤ 10% of its first-checkpoint value", met after the first decade of a fall of
    three or more; that reading is kept as ``*_settle_step_first10pct`` (:func:`settle_step_first10pct`),
    as is ``frame_before_error_first10pct``.  ``*_first_below_step``: the first step at which the value
    is ≤ 10% of its first value, even if it rises again.  ``precision_step_90`` is the first step from
    which ``|ρ|`` stays ≥ 90% of its final value.
    ``frame_before_error`` answers Paper II's prediction (the frame settles first): true where the
    attention settled within the run and the KL settled later or not at all, false where the KL
    settled first (or at the same step) or the attention never did, ``None`` where neither settled
    (it used to be ``None`` whenever either had not settled).
    ``kl_fold_after_js_settle`` = KL at the JS settle step / final KL (how much the error still
    improves once the frame has settled; the authors' follow-up reports 2.4x and ~40x);
    ``kl_fold_last_interval`` = KL at the second-last checkpoint / final KL (> 1: still falling at the end).
    """
    run = RunDir(run_dir)
    record = run.read_config()
    task = tasks.make(record["task"]["name"], **record["task"]["params"])
    paths = run.checkpoint_paths()
    if not paths:
        return {"applicable": False, "reason": f"no complete checkpoints in {run.checkpoints}"}
    paths = evenly_spaced(paths, max_checkpoints)
    model = models.build(record["model"])
    gap = lacks(model, REQUIRES)
    if gap is not None:
        return gap
    L = n_layers(model)
    if device is not None:
        model.to(device)
    ep = task.sample(n, seed)
    attn = not missing(model, ("blocks.{l}.attn.hook_pattern",))
    last_name = f"blocks.{L - 1}.hook_resid_post"

    ckpt.load(paths[-1], model)
    final = _patterns(model, ep) if attn else None
    js_uniform = None
    if final is not None:
        t = ep.mask.nonzero(as_tuple=True)[1]
        T = final.shape[-1]
        uni = (torch.arange(T)[None, :] <= t[:, None]).float()
        uni = uni / uni.sum(-1, keepdim=True)
        js_uniform = float(js_bits(final, uni[None, None]).mean())

    uniform_logits = torch.zeros_like(ep.posterior, dtype=torch.float32)
    uv = M.compute(uniform_logits, ep)["values"]
    series: list[dict[str, Any]] = []
    skipped: list[int] = []
    for path in finite_checkpoints(paths, model, skipped):
        step = ckpt.step_of(path)
        sc = collect_scored(model, ep, [last_name])
        full = torch.zeros(ep.posterior.shape, dtype=torch.float64)
        full[ep.mask] = sc.logits
        vals = M.compute(full, ep)["values"]
        lam, vec = pca(sc.acts[last_name])
        pc1 = (sc.acts[last_name] - sc.acts[last_name].mean(0)) @ vec[:, 0]
        rho = spearman(pc1, sc.entropy)
        row: dict[str, Any] = {"step": step, "entropy_mae": vals["entropy_mae"], "kl": vals["kl"],
                               "precision_abs_rho": None if rho is None else abs(rho),
                               "pc1_var": float(lam[0] / lam.sum()) if float(lam.sum()) > 0 else None}
        if final is not None:
            js = js_bits(_patterns(model, ep), final).mean(-1)  # [L,H]
            row["js_by_layer"] = [float(x) for x in js.mean(1)]
            row["js_by_head"] = [[float(x) for x in r] for r in js]
            row["js_mean"] = float(js.mean())
        series.append(row)
    steps = [r["step"] for r in series]  # the checkpoints read: those with non-finite weights are in `skipped`

    def col(k: str) -> list[Any]:
        return [r.get(k) for r in series]

    prec = col("precision_abs_rho")
    prec_step = None
    if prec and prec[-1] is not None and prec[-1] > 0:
        ok = [p is not None and p >= 0.9 * prec[-1] for p in prec]
        prec_step = next((steps[i] for i in range(len(ok)) if all(ok[i:])), None)
    js_step = settle_step(steps, col("js_mean"), log=False) if final is not None else None
    err_step = settle_step(steps, col("kl"))
    js_old = settle_step_first10pct(steps, col("js_mean")) if final is not None else None
    err_old = settle_step_first10pct(steps, col("kl"))
    by_layer = ([[r["js_by_layer"][l] for r in series] for l in range(L)] if final is not None else None)
    out = {
        "applicable": True,
        "definition": "JS(bits) of attention rows at scored queries to the final checkpoint's; |Spearman| of "
                      "last-layer resid PC1 with Bayes entropy; entropy_mae and KL in bits; settle = first step "
                      "(before the last) from which the remaining change to the end-of-run value stays <= 10% of "
                      "the total change: KL and entropy_mae in log10, JS (0 at the end) on its own scale; "
                      "*_first10pct: the old reading, first step from which the value stays <= 10% of its "
                      "first-checkpoint value",
        "steps": steps,
        "n_episodes": n,
        "series": series,
        "null": {"js_uniform_vs_final": js_uniform,
                 "uniform_entropy_mae": uv["entropy_mae"], "uniform_kl": uv["kl"]},
        "js_settle_step": js_step,
        "js_settle_step_by_layer": ([settle_step(steps, v, log=False) for v in by_layer]
                                    if by_layer is not None else None),
        "js_settle_step_first10pct": js_old,
        "js_settle_step_by_layer_first10pct": ([settle_step_first10pct(steps, v) for v in by_layer]
                                               if by_layer is not None else None),
        "js_first_below_step": first_below(steps, col("js_mean")) if final is not None else None,
        "error_settle_step": err_step,
        "error_settle_step_first10pct": err_old,
        "error_first_below_step": first_below(steps, col("kl")),
        "entropy_mae_settle_step": settle_step(steps, col("entropy_mae")),
        "entropy_mae_settle_step_first10pct": settle_step_first10pct(steps, col("entropy_mae")),
        "precision_step_90": prec_step,
        "frame_before_error": frame_first(js_step, err_step),
        "frame_before_error_first10pct": (js_old < err_old) if (js_old is not None and err_old is not None) else None,
    }
    if skipped:
        out["skipped_non_finite_steps"] = skipped
    kls = col("kl")
    out["kl_fold_after_js_settle"] = (kls[steps.index(js_step)] / kls[-1]
                                      if js_step is not None and kls[-1] and kls[-1] > 0 else None)
    out["kl_fold_last_interval"] = (kls[-2] / kls[-1] if len(kls) > 1 and kls[-2] is not None and kls[-1]
                                    and kls[-1] > 0 else None)
    out["summary"] = {k: out[k] for k in ("js_settle_step", "js_settle_step_by_layer", "error_settle_step",
                                          "js_settle_step_first10pct", "error_settle_step_first10pct",
                                          "precision_step_90", "frame_before_error", "frame_before_error_first10pct",
                                          "kl_fold_after_js_settle", "kl_fold_last_interval")}
    out["summary"]["n_checkpoints"] = len(steps)
    out["summary"]["final_precision_abs_rho"] = prec[-1]
    return clean(out)


def frame_precision_figure(result: dict[str, Any], path: str | Path) -> Path:
    """Three stacked panels over checkpoint steps (symlog x): attention JS to the final checkpoint per
    layer; |ρ(PC1, H)|; entropy_mae and KL (log y).  Vertical lines: settle steps."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"frame vs precision: {result.get('reason', 'not applicable')}", path)
    s = result["series"]
    steps = [r["step"] for r in s]
    fig, axes = _plot.figure(3, 1, w=7.0, h=2.5, sharex=True)
    ax = axes[0, 0]
    if "js_by_layer" in s[0]:
        for l in range(len(s[0]["js_by_layer"])):
            ax.plot(steps, [r["js_by_layer"][l] for r in s], "o-", ms=3, label=f"layer {l}")
        if result["null"].get("js_uniform_vs_final") is not None:
            ax.axhline(result["null"]["js_uniform_vs_final"], color="k", ls=":", lw=1, label="uniform vs final")
        ax.legend(fontsize=7, ncol=2)
    else:
        ax.text(0.5, 0.5, "no attention (not a transformer)", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("JS to final (bits)")
    ax = axes[1, 0]
    ax.plot(steps, _plot.nan(r["precision_abs_rho"] for r in s), "o-", color="C2", ms=3)
    ax.set_ylabel("|ρ(PC1, H_Bayes)|")
    ax.set_ylim(0, 1.02)
    ax = axes[2, 0]
    errors, kls = [r["entropy_mae"] for r in s], [r["kl"] for r in s]
    ax.plot(steps, loggable(errors), "o-", ms=3, label="entropy MAE")
    ax.plot(steps, loggable(kls), "s-", ms=3, label="KL")
    uniform_kl = loggable([result["null"]["uniform_kl"]])[0]
    if not math.isnan(uniform_kl):  # a level a log axis can show
        ax.axhline(uniform_kl, color="C1", ls=":", lw=1, label="uniform KL")
    log_scale(ax, errors, kls)
    ax.set_ylabel("bits")
    ax.legend(fontsize=7)
    for a in axes[:, 0]:
        a.set_xscale("symlog", linthresh=1)
        a.set_xlim(left=0)
        for key, c in (("js_settle_step", "C0"), ("error_settle_step", "C3"), ("precision_step_90", "C2")):
            if result.get(key) is not None:
                a.axvline(result[key], color=c, ls="--", lw=0.8)
    axes[2, 0].set_xlabel("training step (dashed: JS settle, error settle, 90% precision)")
    axes[0, 0].set_title("Frame (attention) vs precision (value manifold) over training")
    return _plot.save(fig, path)

MIN_CHECKPOINTS = 4
"""Fewer kept checkpoints than this cannot order two settling times."""


def _interpret(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    n = s.get("n_checkpoints") or 0
    flags = [f"only {n} checkpoints: too few to order the frame and the error"] if n < MIN_CHECKPOINTS else []
    first, js, err = s.get("frame_before_error"), s.get("js_settle_step"), s.get("error_settle_step")
    if first is None:
        flags.append("neither the attention nor the error settled within the kept checkpoints")
    consistent = None if flags else bool(first)
    fold = s.get("kl_fold_last_interval")
    kl_text = (f"the KL at step {err}" if err is not None else "the KL not within the run"
               + (f" (still falling {fold:.1f}x over the last interval)" if isinstance(fold, (int, float)) else ""))
    old = ""
    if "error_settle_step_first10pct" in s:
        old = (f"; read as 'stays <= 10% of the first value': attention {s.get('js_settle_step_first10pct')}, "
               f"the KL {s.get('error_settle_step_first10pct')}")
    return [Reading("frame_precision.frame_before_error", str(first), "the error's settling step", err,
                    "attention settling first is consistent", consistent, "B9",
                    f"attention settles at step {js}, {kl_text}{old}", tuple(flags))]


register(Diagnostic("frame_precision", frame_precision, frame_precision_figure, _interpret, checkpoints=True,
                    order=90, claims=("B8", "B9", "C12"), requires=REQUIRES))
