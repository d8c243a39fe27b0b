"""Distance, in bits, between a model's predictive distribution and the exact Bayesian posterior.

``compute(logits, episodes)`` is a pure function: it never runs a model.  The model distribution
is ``q = softmax(logits)`` over the ``C = task.n_classes`` output classes, taken in float64; the
reference is ``p = episodes.posterior`` (exact, float64).  Everything is measured over the
*scored* positions (``episodes.mask``), in bits (``log2``) unless stated otherwise.

Definitions (the project's metric contract; the papers and the authors' released code use
the four entropy-MAE variants and two KL directions of the original code — these are ours):

* ``entropy_mae_curve`` — the papers' published number (their ``evaluate_entropy_calibration``
  order): average over sequences first, ``H̄_q(t) = mean_b H(q_bt)``, ``H̄_p(t) = mean_b H(p_bt)``
  over the sequences scored at ``t``, then ``mean_t |H̄_q(t) − H̄_p(t)|`` over the positions scored in
  at least one sequence.  Errors of opposite sign in different sequences cancel.
* ``entropy_mae`` — ``mean_(b,t) |H(q_bt) − H(p_bt)|`` over all scored (sequence, position) pairs
  (stricter; cannot hide cancelling errors).  When every scored position is scored in the same
  number of sequences (every task here: the mask depends on the position only),
  ``entropy_mae_curve ≤ entropy_mae`` by the triangle inequality.
* ``kl`` — ``mean KL(p ‖ q) = Σ_c p_c (log2 p_c − log2 q_c)`` with ``0·log 0 = 0``; the Bayes side
  is never clipped, the model side is clipped at ``q ≥ 1e-300`` only to stay finite.  This is the
  excess cross-entropy over the Bayes optimum (``bayes_gap``).
* ``tv`` — total variation ``½ Σ_c |p_c − q_c|``.
* ``infeasible_mass`` — ``Σ_{c : p_c = 0} q_c``: model probability on classes the posterior rules
  out exactly (a support error that entropy cannot see).
* ``accuracy`` — ``argmax_c logits == target``, over scored positions with a valid target.
* ``nll`` — ``−log2 q(target)``; ``bayes_nll`` — ``−log2 p(target)`` (its Bayes-optimal value on the
  same targets; ``nll − bayes_nll`` is a sampled estimate of ``kl``).

The first five are *errors*: the Bayes oracle scores 0 on them (``ERROR_METRICS``).

A task that selects among classes of hypotheses (``class_posterior`` and ``within_class_predictive``: model
selection) adds ``class_posterior_mae`` — the error of the class posterior read from the model's predictive, at the
positions where it is identified — and ``class_identified_share`` (:func:`class_posterior_metrics`); no other task's
record holds them.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..tasks.base import IGNORE, Episodes
from ..tasks.base import entropy_bits  # one definition, shared with the tasks
from ..errors import InvalidValue

__all__ = [
    "CLASS_METRICS",
    "ERROR_METRICS",
    "METRICS",
    "SCORE_METRICS",
    "bayes_gap",
    "class_posterior_metrics",
    "compute",
    "entropy_bits",
    "kl_bits",
    "pooled_mean",
]

ERROR_METRICS: tuple[str, ...] = ("entropy_mae_curve", "entropy_mae", "kl", "tv", "infeasible_mass")
"""Metrics that are 0 for the Bayes oracle (distances to the posterior)."""

SCORE_METRICS: tuple[str, ...] = ("accuracy", "nll", "bayes_nll")
"""Metrics against the sampled targets (the oracle scores ``nll == bayes_nll``, not 0)."""

METRICS: tuple[str, ...] = ERROR_METRICS + SCORE_METRICS
"""Every scalar metric ``compute`` returns, in display order."""

_LN2 = math.log(2.0)
_LOG_FLOOR = math.log(1e-300)  # model probabilities are clipped here (natural log)


# --- small helpers -------------------------------------------------------------------------------
def _kl_from_log(p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """``KL(p ‖ q)`` in bits from probabilities ``p`` and natural-log ``log_q`` (clipped at log 1e-300)."""
    log_q = log_q.double().clamp_min(_LOG_FLOOR)
    pos = p > 0
    log_p = torch.where(pos, p.clamp_min(1e-300).log(), torch.zeros_like(p))
    terms = torch.where(pos, p * (log_p - log_q), torch.zeros_like(p))
    return (terms.sum(-1) / _LN2).clamp_min(0.0)  # KL ≥ 0: only rounding (~1e-16) is removed


def kl_bits(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``KL(p ‖ q) = Σ_c p_c (log2 p_c − log2 q_c)`` in bits along the last axis.

    ``0·log 0 = 0`` (classes with ``p_c = 0`` contribute nothing, whatever ``q_c`` is); ``p`` is
    never clipped, ``q`` is clipped at ``1e-300`` so the result stays finite (at most ~997 bits per
    unit of mass on a class the model rules out).  Float64; ``[..., C]`` → ``[...]``; rounding
    residue below 0 (~1e-16 for ``q = p``) is clamped to 0.
    """
    p = p.double()
    q = q.double()
    return _kl_from_log(p, q.clamp_min(1e-300).log())


def pooled_mean(values: torch.Tensor, weights: torch.Tensor) -> float:
    """``Σ w·x / Σ w`` ignoring entries with zero weight (NaN if the total weight is 0)."""
    w = weights.double()
    x = torch.where(w > 0, values.double(), torch.zeros_like(w))
    total = w.sum()
    return float((x * w).sum() / total) if total > 0 else math.nan


def _check(logits: torch.Tensor, episodes: Episodes) -> None:
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() != 3 or tuple(logits.shape) != tuple(episodes.posterior.shape):
        raise InvalidValue(
            f"logits shape {tuple(logits.shape)} does not match the posterior's "
            f"{tuple(episodes.posterior.shape)} ([B, T, C] with C = task.n_classes)"
        )


def _log_q(logits: torch.Tensor) -> torch.Tensor:
    """Natural-log model distribution, float64 softmax over the class axis."""
    return torch.log_softmax(logits.detach().double(), dim=-1)


_ROW_BUDGET = 1 << 21  # rows × classes processed at once (bounds float64 temporaries to ~16 MiB each)


def _row_stats(logits: torch.Tensor, p: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-row statistics of ``logits [N,C]`` vs the posterior ``p [N,C]`` (float64), ``targets [N]``.

    ``H(q)``, ``H(p)``, ``KL(p‖q)`` (bits), ``TV``, infeasible mass, correctness of the argmax and
    the target log-losses (bits; meaningless where ``target == IGNORE``, masked by the caller).
    """
    log_q = _log_q(logits)
    q = log_q.exp()
    log_qc = log_q.clamp_min(_LOG_FLOOR)  # q clipped at 1e-300: finite everywhere
    feasible = p > 0
    log_p = torch.where(feasible, p, torch.ones_like(p)).log()  # log 1 = 0 where p = 0 (0·log 0 = 0)
    t = targets.clamp(0, p.shape[-1] - 1)[:, None]
    return {
        "entropy_model": -(q * log_qc).sum(-1) / _LN2,
        "entropy_bayes": -(p * log_p).sum(-1) / _LN2,
        "kl": ((p * (log_p - log_qc)).sum(-1) / _LN2).clamp_min(0.0),
        "tv": 0.5 * (p - q).abs().sum(-1),
        "infeasible_mass": torch.where(feasible, torch.zeros_like(q), q).sum(-1),
        "accuracy": (logits.argmax(-1) == targets).double(),
        "nll": -log_qc.gather(-1, t).squeeze(-1) / _LN2,
        "bayes_nll": -log_p.gather(-1, t).squeeze(-1).clamp_min(_LOG_FLOOR) / _LN2,
    }


# --- the main entry point ------------------------------------------------------------------------
def compute(logits: torch.Tensor, episodes: Episodes) -> dict[str, Any]:
    """All metrics of ``logits [B,T,C]`` against ``episodes`` (the same batch), in bits.

    Returns a dict (all tensors float64 on CPU)::

        {
          "values":       {name: float},          # the scalar metrics, names in METRICS
          "curves":       {name: Tensor[T]},      # per-position value, NaN where no sequence is scored
          "per_sequence": {name: Tensor[B]},      # per-sequence mean over its scored positions (NaN if none);
                                                  #   not for entropy_mae_curve, which is not a per-sequence mean
          "per_position": {name: Tensor[B,T]},    # element values, NaN off the mask: every metric except
                                                  #   entropy_mae_curve, plus "entropy_model" and "entropy_bayes"
          "masks":        {"scored": Tensor[B,T] bool,   # episodes.mask
                           "target": Tensor[B,T] bool},  # scored and target != IGNORE (accuracy, nll, bayes_nll)
          "entropy_model_curve": Tensor[T],       # H̄_q(t) = mean_b H(q_bt), bits
          "entropy_bayes_curve": Tensor[T],       # H̄_p(t) = mean_b H(p_bt), bits
          "n_sequences": int, "n_scored": int,
        }

    ``values[name]`` is the mean of ``per_position[name]`` over the relevant mask — pooled over
    (sequence, position) pairs — except ``entropy_mae_curve`` (mean over positions of
    ``curves["entropy_mae_curve"] = |H̄_q(t) − H̄_p(t)|``).  ``per_position`` and ``masks`` are what
    ``windtunnel.evaluate`` resamples for bootstrap intervals (curve re-averaged per resample).
    See the module docstring for the formulas.
    """
    _check(logits, episodes)
    p_all = episodes.posterior.detach()
    B, T, C = p_all.shape
    mask = episodes.mask.detach().bool().cpu()
    targets = episodes.targets.detach().long().cpu()
    tmask = mask & (targets != IGNORE)
    nan = torch.tensor(math.nan, dtype=torch.float64)

    # only the scored rows are touched, a bounded number at a time (C can be in the hundreds)
    rows = mask.reshape(-1).nonzero().squeeze(-1)
    flat_logits = logits.detach().reshape(-1, C)
    flat_p = p_all.reshape(-1, C)
    flat_t = targets.reshape(-1)
    step = max(1, _ROW_BUDGET // max(C, 1))
    parts: dict[str, list[torch.Tensor]] = {}
    for i in range(0, rows.numel(), step):
        r = rows[i : i + step]
        stats = _row_stats(flat_logits[r.to(flat_logits.device)].cpu(), flat_p[r.to(flat_p.device)].cpu().double(),
                           flat_t[r])
        for k, v in stats.items():
            parts.setdefault(k, []).append(v)

    def scatter(name: str) -> torch.Tensor:
        out = torch.full((B * T,), math.nan, dtype=torch.float64)
        if rows.numel():
            out[rows] = torch.cat(parts[name])
        return out.view(B, T)

    maps = {k: scatter(k) for k in ("entropy_model", "entropy_bayes", "kl", "tv", "infeasible_mass",
                                    "accuracy", "nll", "bayes_nll")}
    h_q, h_p = maps["entropy_model"], maps["entropy_bayes"]
    elementwise = {
        "entropy_mae": ((h_q - h_p).abs(), mask),
        "kl": (maps["kl"], mask),
        "tv": (maps["tv"], mask),
        "infeasible_mass": (maps["infeasible_mass"], mask),
        "accuracy": (maps["accuracy"], tmask),
        "nll": (maps["nll"], tmask),
        "bayes_nll": (maps["bayes_nll"], tmask),
        "entropy_model": (h_q, mask),
        "entropy_bayes": (h_p, mask),
        # signed gap per element: the curve metric averages this (one sum, the same summands in the
        # point estimate and in every bootstrap resample) instead of subtracting two averages
        "entropy_gap": (h_q - h_p, mask),
    }
    per_position = {k: torch.where(m, x, nan) for k, (x, m) in elementwise.items()}

    def curve(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        cnt = m.double().sum(0)
        s = torch.where(m, x, torch.zeros_like(x)).sum(0)
        return torch.where(cnt > 0, s / cnt.clamp_min(1), nan)

    def per_seq(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        cnt = m.double().sum(1)
        s = torch.where(m, x, torch.zeros_like(x)).sum(1)
        return torch.where(cnt > 0, s / cnt.clamp_min(1), nan)

    h_q_curve = curve(h_q, mask)
    h_p_curve = curve(h_p, mask)
    mae_curve = curve(*elementwise["entropy_gap"]).abs()
    curves = {"entropy_mae_curve": mae_curve}
    curves.update({k: curve(*elementwise[k]) for k in METRICS[1:]})
    curves["entropy_model"] = h_q_curve
    curves["entropy_bayes"] = h_p_curve

    values: dict[str, float] = {}
    scored_t = ~mae_curve.isnan()
    values["entropy_mae_curve"] = float(mae_curve[scored_t].mean()) if scored_t.any() else math.nan
    for k in METRICS[1:]:
        x, m = elementwise[k]
        values[k] = pooled_mean(x, m.double())

    return {
        "values": values,
        "curves": curves,
        "per_sequence": {k: per_seq(x, m) for k, (x, m) in elementwise.items() if k in METRICS},
        "per_position": per_position,
        "masks": {"scored": mask, "target": tmask},
        "entropy_model_curve": h_q_curve,
        "entropy_bayes_curve": h_p_curve,
        "n_sequences": int(mask.shape[0]),
        "n_scored": int(mask.sum()),
    }


def bayes_gap(logits: torch.Tensor, episodes: Episodes) -> float:
    """Excess cross-entropy over the Bayes optimum on this batch, in bits (no gradient).

    ``mean over scored (b,t) of CE(p_bt, q_bt) − H(p_bt) = KL(p_bt ‖ q_bt)`` — the ``kl`` metric,
    computed cheaply on the logits' own device (float64; CPU for backends without float64) so a
    training loop can show it in its progress bar.  0 for the Bayes oracle.
    """
    _check(logits, episodes)
    device = logits.device
    if device.type == "mps":  # no float64 there
        device = torch.device("cpu")
    mask = episodes.mask.to(device).bool()
    n = int(mask.sum())
    if n == 0:
        return math.nan
    log_q = _log_q(logits.to(device)[mask])  # scored rows only: [N, C]
    # the scored rows are picked where the posterior lives (the host, for a training batch) and only they are copied:
    # a recall batch's whole posterior is tens of MB, its scored rows a few kB
    p = episodes.posterior[episodes.mask.to(episodes.posterior.device).bool()].to(device).double()
    return float(_kl_from_log(p, log_q).sum() / n)


# --- the model's class posterior (tasks that select among classes of hypotheses) -------------------------------------
CLASS_METRICS: tuple[str, ...] = ("class_posterior_mae", "class_identified_share")
"""The metrics :func:`class_posterior_metrics` adds for a task that defines ``class_posterior`` and
``within_class_predictive`` (model selection); other tasks' records do not hold them."""

RANK_TOL = 1e-9
"""Within-class predictives whose matrix has a singular value below this (relative to the largest) are taken as
coinciding: the mixture weights are not identified there."""
_BISECTIONS = 200
_EM_ITERATIONS = 5000


def fit_class_weights(q: torch.Tensor, within: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
    """The mixture weights ``w`` on the simplex of the ``alive`` classes that make ``Σ_C w_C p_C`` closest to ``q``
    in ``KL(q̃ ‖ Σ_C w_C p_C)``, row by row (float64).

    ``q [N, n]`` a predictive (the model's), ``within [N, K, n]`` the classes' exact predictives ``p_C``, ``alive
    [N, K]`` the classes still consistent with the context (``w_C = 0`` for the others).  ``q̃`` is ``q`` restricted
    to the values some alive class allows and renormalised (mass on values no class allows — ``infeasible_mass`` —
    cannot be explained by any mixture, and is left out).  The objective ``Σ_v q̃_v log Σ_C w_C p_Cv`` is concave in
    ``w``: with two alive classes its maximiser is found by bisection on the derivative
    ``Σ_v q̃_v (p_1v − p_2v) / m_v`` (decreasing in ``w_1``; to float64 precision), with more by the EM fixed point
    ``w_C ← w_C Σ_v q̃_v p_Cv / m_v`` (5000 iterations); with one alive class ``w`` is that class.  When ``q`` is
    itself a mixture of the ``p_C`` with weights ``P`` and the ``p_C`` are linearly independent, ``w = P``."""
    q, within = q.double(), within.double()
    N, K, n = within.shape
    alive = alive.bool()
    w = alive.double() / alive.sum(1, keepdim=True).clamp_min(1)
    support = ((within > 0) & alive[:, :, None]).any(1)  # [N, n]
    qt = torch.where(support, q, torch.zeros_like(q))
    qt = qt / qt.sum(1, keepdim=True).clamp_min(1e-300)
    count = alive.sum(1)
    two = count == 2
    if bool(two.any()):
        idx = alive[two].double().argsort(dim=1, descending=True, stable=True)[:, :2]  # the two alive classes
        p = within[two].gather(1, idx[:, :, None].expand(-1, 2, n))  # [M, 2, n]
        p1, p2, qq = p[:, 0], p[:, 1], qt[two]
        diff = p1 - p2

        def slope(a: torch.Tensor) -> torch.Tensor:
            m = (a[:, None] * p1 + (1 - a[:, None]) * p2).clamp_min(1e-300)
            return torch.where(qq > 0, qq * diff / m, torch.zeros_like(qq)).sum(1)

        lo = torch.zeros(p1.shape[0], dtype=torch.float64)
        hi = torch.ones_like(lo)
        for _ in range(_BISECTIONS):
            mid = 0.5 * (lo + hi)
            up = slope(mid) > 0  # the objective still rises: the maximiser lies above mid
            lo, hi = torch.where(up, mid, lo), torch.where(up, hi, mid)
        a = 0.5 * (lo + hi)
        sub = torch.zeros(p1.shape[0], K, dtype=torch.float64)
        sub.scatter_(1, idx, torch.stack([a, 1 - a], 1))
        w[two] = sub
    many = count > 2
    if bool(many.any()):
        p, qq, v = within[many], qt[many], w[many]
        for _ in range(_EM_ITERATIONS):
            m = (v[:, :, None] * p).sum(1).clamp_min(1e-300)
            v = v * torch.where(qq[:, None, :] > 0, qq[:, None, :] * p / m[:, None, :], torch.zeros_like(p)).sum(2)
            v = v / v.sum(1, keepdim=True).clamp_min(1e-300)
        w[many] = v
    return w


def class_identified(within: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
    """``[N]``: whether the mixture weights of the alive classes are identified from a predictive — at least two
    classes alive (with one, the class is certain and there is nothing to select), and their exact predictives
    linearly independent (no singular value of the ``[alive, n]`` matrix below :data:`RANK_TOL` of the largest: for
    two classes, predictives that differ).  Where the within-class predictives coincide every weighting gives the
    same predictive, so no class posterior can be read from one."""
    alive = alive.bool()
    count = alive.sum(1)
    out = torch.zeros(alive.shape[0], dtype=torch.bool)
    for k in sorted(set(count.tolist()) - {0, 1}):
        rows = (count == k).nonzero().squeeze(1)
        order = alive[rows].double().argsort(dim=1, descending=True, stable=True)[:, :k]
        p = within[rows].double().gather(1, order[:, :, None].expand(-1, k, within.shape[-1]))
        s = torch.linalg.svdvals(p)
        out[rows] = s[:, -1] > RANK_TOL * s[:, 0].clamp_min(1e-300)
    return out


def class_posterior_metrics(task: Any, logits: torch.Tensor, episodes: Episodes) -> dict[str, Any] | None:
    """The model's class posterior against the exact one, for a task that defines ``class_posterior`` and
    ``within_class_predictive`` (``None`` for any other task: its records are unchanged).

    The model states no class posterior; it is read from its predictive ``q`` at each scored position as the mixture
    weights ``w`` whose Bayes mixture ``Σ_C w_C p_C(· | D)`` of the exact within-class predictives is closest to ``q``
    (:func:`fit_class_weights`), and compared with the exact ``P(C | D)``:
    ``class_posterior_mae`` is ``mean_C |w_C − P(C | D)|`` (for two classes ``|w_1 − P(C_1 | D)|``) averaged over
    the scored positions where the weights are identified (:func:`class_identified`); the others (one class left,
    or within-class predictives that coincide) are left out, and ``class_identified_share`` is the share of scored
    positions kept.  The Bayes oracle's own predictive gives ``w = P`` there (0 up to rounding).

    Returns ``{"per_position": {name: [B, T]}, "masks": {name: [B, T] bool}}``: each metric's elements (NaN off its
    mask) and the positions it averages over (the identified ones for the error, the scored ones for the share)."""
    if not (callable(getattr(task, "class_posterior", None)) and callable(getattr(task, "within_class_predictive", None))):
        return None
    mask = episodes.mask.detach().bool().cpu()
    tokens, features = episodes.tokens, getattr(episodes, "features", None)
    post = task.class_posterior(tokens, features).double()[mask]  # [N, K]
    within = task.within_class_predictive(tokens, features).double()[mask]  # [N, K, n]
    q = torch.softmax(logits.detach().double().cpu()[mask], dim=-1)
    alive = post > 0
    ident = class_identified(within, alive)
    w = fit_class_weights(q, within, alive)
    err = (w - post).abs().mean(1)
    B, T = mask.shape
    nan = torch.full((B, T), math.nan, dtype=torch.float64)
    err_map, share_map = nan.clone(), nan.clone()
    err_map[mask] = torch.where(ident, err, torch.full_like(err, math.nan))
    share_map[mask] = ident.double()
    ident_map = torch.zeros(B, T, dtype=torch.bool)
    ident_map[mask] = ident
    return {"per_position": {"class_posterior_mae": err_map, "class_identified_share": share_map},
            "masks": {"class_posterior_mae": ident_map, "class_identified_share": mask}}
