r"""State patching with an exact target: put a counterfactual context's representation into a run, and score the
run against the exact posterior of *the context that representation stands for*, in bits.

**Pairs** are those of :mod:`~windtunnel.geometry.steering` (:func:`~windtunnel.geometry.steering.counterfactual_pairs`),
drawn over all the episodes read (nothing is fitted here): for each episode ``A`` a counterfactual context ``B`` —
another episode whole, or, on a task with a hidden state (``Task.belief``: HMM, Mess3), ``A``'s prefix (the HMM's
header) with another episode's tokens after it — and one position ``t`` scored in both where their exact posteriors
differ.

**The patch.**  ``A`` is run with the residual stream at layer ``l`` (``blocks.{l}.hook_resid_post``) and position
``t`` replaced by ``B``'s, :math:`x_A^{(l)}(t) \leftarrow x_B^{(l)}(t)`; every other position, and every layer
before ``l``, still carries ``A``.  What "the patched context" is depends on where the prediction is read:

* **at t** the target is ``p_B(t)``: had the model's state at ``t`` been ``B``'s, the answer at ``t`` is ``B``'s
  (``at_t``);
* **after t**, on a task with a hidden state only: the target is the exact filter *started from ``B``'s belief at
  ``t`` and run on ``A``'s later observations* — the posterior of the spliced context :math:`S = B_{\le t}\,A_{>t}`
  (``B``'s tokens up to and including ``t``, ``A``'s after; a valid episode, with ``A``'s process, because ``B``
  shares ``A``'s prefix): since the belief at ``t`` is all the past says about the future, ``p_S(u)`` for ``u > t``
  is exactly that filter (``after_t``, pooled over the scored positions after ``t``).  This is what a model whose
  state at ``t`` *is* its belief would do; a transformer's later positions still read ``A``'s earlier positions
  through attention, so its share after ``t`` says how much of the past it takes from position ``t``'s state alone.
  A task without a hidden state has no such target (a bijection's later pairs contradict ``B``'s), and only ``t``
  is scored.

**Reference and controls**, each scored against the same target: ``no_patch`` (the model reading ``A``),
``reads_counterfactual`` (the model reading ``B`` itself, at ``t``; reading ``S``, after ``t``: the floor a patch
can reach), and three patches of the same place: ``random`` (a uniformly random direction with the norm of ``B``'s
vector), ``shuffled`` (the ``B`` vector of another pair, at that pair's own position: a mismatched episode and,
usually, position) and ``mean`` (the mean over the episodes of ``A``'s vector at that layer and position ``t``).

**Share recovered**, per layer, on a log scale as :mod:`~windtunnel.geometry.counterfactual`'s r(l):

.. math:: r(l) = \frac{\log \mathrm{KL}(p \| m(A)) - \log \mathrm{KL}(p \| m_{A \leftarrow B, l})}{\log
          \mathrm{KL}(p \| m(A)) - \log \mathrm{KL}(p \| m(\text{counterfactual}))}

(1: the patch brings the model as close to the target as reading the counterfactual context does; ``None`` when
that is less than 2× closer than reading ``A``), and linearly, :math:`r_{lin}(l) = (\mathrm{KL}_{none} -
\mathrm{KL}_{patch}) / (\mathrm{KL}_{none} - \mathrm{KL}_{ref})`.  Patching the last layer's full vector at ``t``
reproduces ``m(B)(t)`` exactly (the readout at ``t`` reads only that vector), so ``r = 1`` there at ``t``: the
summary's best layer at ``t`` is sought among the layers before the last.
**Statistics**: every mean KL has a percentile bootstrap interval over pairs (positions after ``t`` pooled per
episode), and the patch is compared with each control by a paired sign-flip p-value
(:mod:`windtunnel.evaluation.stats`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..evaluation.metrics import _kl_from_log
from ..evaluation.stats import bootstrap_mean, paired_effect
from ..tasks.base import Episodes, Task
from ..evaluation.log_axis import drawable, log_scale, loggable
from . import _plot
from ._common import GEOMETRY_SEED, clean, device_of, episodes_for, eval_mode, n_layers, not_applicable
from .registry import Diagnostic, Reading, needs, register
from .steering import Pairs, counterfactual_pairs, run_patched, same_norm_random, setter, share_recovered

__all__ = ["state_patching", "state_patching_figure", "CONTROLS", "spliced"]

CONTROLS = ("no_patch", "random", "shuffled", "mean")
"""The patch's controls (module docstring)."""


def spliced(pairs: Pairs) -> dict[str, torch.Tensor]:
    r"""The inputs of the spliced contexts :math:`S = B_{\le t}\, A_{>t}` of each pair (module docstring)."""
    out = {}
    T = pairs.a["tokens"].shape[1]
    later = torch.arange(T)[None, :] > pairs.pos[:, None]
    for k, a in pairs.a.items():
        b = pairs.b[k]
        m = later.reshape(*later.shape, *([1] * (a.dim() - 2)))
        out[k] = torch.where(m, a, b)
    return out


def _mean_by_position(model: torch.nn.Module, inputs: dict[str, torch.Tensor], names: list[str],
                      chunk: int) -> dict[str, torch.Tensor]:
    """The mean over the episodes of each named activation at every position, ``[T, d]`` (float64, CPU)."""
    dev = device_of(model)
    sums: dict[str, torch.Tensor] = {}
    n = len(inputs["tokens"])
    with eval_mode(model):
        for i in range(0, n, chunk):
            _, cache = model.run_with_cache(**{k: v[i:i + chunk].to(dev) for k, v in inputs.items()}, names=names)
            for nm in names:
                s = cache[nm].double().cpu().sum(0)
                sums[nm] = s if nm not in sums else sums[nm] + s
    return {nm: s / n for nm, s in sums.items()}


class _Scorer:
    """Per-pair KL sums and counts against one target (at ``t``, or pooled over the scored positions after ``t``)."""

    def __init__(self, post: torch.Tensor, where: torch.Tensor) -> None:
        self.post, self.where = post, where
        self.counts = where.double().sum(1)

    def sums(self, log_q: torch.Tensor) -> torch.Tensor:
        kl = _kl_from_log(self.post, log_q)
        return torch.where(self.where, kl, torch.zeros_like(kl)).sum(1)


@needs("blocks.{l}.hook_resid_post")
def state_patching(model: torch.nn.Module, task: Task, *, episodes: Episodes | None = None, n: int = 256,
                   seed: int = GEOMETRY_SEED, n_boot: int = 1000, chunk: int = 128) -> dict[str, Any]:
    """Patch each counterfactual context's residual at (layer, t) into its episode and score the run against the
    exact posterior of the patched context, at ``t`` and (hidden-state tasks) after it, with four controls,
    bootstrap intervals and sign-flip p-values (module docstring), on ``episodes`` (or ``n`` sampled with ``seed``)."""
    ep = episodes_for(task, n, seed, episodes)
    L = n_layers(model)
    names = [f"blocks.{l}.hook_resid_post" for l in range(L)]
    pairs = counterfactual_pairs(task, ep, torch.arange(len(ep)), seed + 1)
    if pairs is None:
        return not_applicable(f"task {task.name!r}: no pair of episodes whose exact posteriors differ at a position "
                              "scored in both")
    k = len(pairs)
    T = pairs.a["tokens"].shape[1]
    rows = torch.arange(k)
    at_t = torch.zeros(k, T, dtype=torch.bool)
    at_t[rows, pairs.pos] = True
    log_a, _ = run_patched(model, pairs.a, pairs.pos, chunk=chunk)
    log_b, acts_b = run_patched(model, pairs.b, pairs.pos, names, chunk=chunk)
    means = _mean_by_position(model, pairs.a, names, chunk)
    targets: dict[str, tuple[_Scorer, torch.Tensor]] = {"at_t": (_Scorer(pairs.post_b, at_t), log_b)}
    if pairs.hidden_state:
        s_inputs = spliced(pairs)
        later = pairs.mask_a & (torch.arange(T)[None, :] > pairs.pos[:, None])
        if bool(later.any()):
            log_s, _ = run_patched(model, s_inputs, pairs.pos, chunk=chunk)
            post_s = task.posterior(s_inputs["tokens"], s_inputs.get("features")).double()
            targets["after_t"] = (_Scorer(post_s, later), log_s)
    shuffle = torch.roll(rows, 1)
    g = torch.Generator().manual_seed(seed + 2)

    def stats(sums: torch.Tensor, sc: _Scorer) -> dict[str, Any]:
        return bootstrap_mean(sums, sc.counts, n_boot=n_boot, seed=seed + 3)

    record: dict[str, Any] = {}
    for key, (sc, log_ref) in targets.items():
        none_s, ref_s = sc.sums(log_a), sc.sums(log_ref)
        keep = sc.counts > 0
        record[key] = {"n_pairs": int(keep.sum()), "n_positions": int(sc.counts.sum()),
                       "no_patch": stats(none_s[keep], _sub(sc, keep)),
                       "reads_counterfactual": stats(ref_s[keep], _sub(sc, keep)), "layers": [],
                       "_none": none_s, "_ref": ref_s, "_keep": keep}
    for l, name in enumerate(names):
        donor = acts_b[name]
        vectors = {
            "patch": donor,
            "random": same_norm_random(donor, g),
            "shuffled": donor[shuffle],
            "mean": means[name][pairs.pos],
        }
        logs = {cond: run_patched(model, pairs.a, pairs.pos, patch=(name, setter(v)), chunk=chunk)[0]
                for cond, v in vectors.items()}
        for key, (sc, _) in targets.items():
            rec = record[key]
            keep = rec["_keep"]
            sub = _sub(sc, keep)
            sums = {cond: sc.sums(lq)[keep] for cond, lq in logs.items()}
            sums["no_patch"] = rec["_none"][keep]
            none_m, ref_m = rec["no_patch"]["mean"], rec["reads_counterfactual"]["mean"]
            row: dict[str, Any] = {"layer": l}
            for cond in ("patch", "random", "shuffled", "mean"):
                st = stats(sums[cond], sub)
                row[cond] = {**st, "recovered": share_recovered(none_m, st["mean"], ref_m),
                             "recovered_linear": _linear(none_m, st["mean"], ref_m)}
            row["vs"] = {c: paired_effect(sums["patch"], sums[c], sub.counts, n_boot=n_boot, seed=seed + 4 + i)
                         for i, c in enumerate(CONTROLS)}
            rec["layers"].append(row)
    for rec in record.values():
        for tmp in ("_none", "_ref", "_keep"):
            rec.pop(tmp)
    summary: dict[str, Any] = {}
    for key, rec in record.items():
        lays = rec["layers"]
        rec_by_layer = [lay["patch"]["recovered"] for lay in lays]
        summary[f"{key}_no_patch_kl"] = rec["no_patch"]["mean"]
        summary[f"{key}_reads_counterfactual_kl"] = rec["reads_counterfactual"]["mean"]
        summary[f"{key}_patched_kl_by_layer"] = [lay["patch"]["mean"] for lay in lays]
        summary[f"{key}_recovered_by_layer"] = rec_by_layer
        # at t the last layer's patch reproduces m(B)(t) by construction: the best layer is sought before it
        cands = range(L - 1) if key == "at_t" and L > 1 else range(L)
        best = min(cands, key=lambda i: lays[i]["patch"]["mean"] if lays[i]["patch"]["mean"] is not None
                   else float("inf"))
        summary[f"{key}_best_layer"] = best
        summary[f"{key}_best_patched_kl"] = lays[best]["patch"]["mean"]
        summary[f"{key}_best_patched_kl_ci"] = lays[best]["patch"]["ci"]
        summary[f"{key}_best_recovered"] = lays[best]["patch"]["recovered"]
        summary[f"{key}_controls_min_kl"] = min((lays[best][c]["mean"] for c in ("random", "shuffled", "mean")
                                                 if lays[best][c]["mean"] is not None), default=None)
        summary[f"{key}_p_max_vs_controls"] = max((v["p_value"] for v in lays[best]["vs"].values()
                                                   if v["p_value"] is not None), default=None)
    return clean({
        "applicable": True,
        "definition": "A run with blocks.l.hook_resid_post at position t replaced by the counterfactual context B's; "
                      "KL (bits) at t against p_B(t) and, for hidden-state tasks, at the scored positions after t "
                      "against the exact posterior of the spliced context B<=t A>t (the filter started from B's "
                      "belief at t on A's later observations); controls: no patch, a random vector of |x_B|, "
                      "another pair's B vector (shuffled), the mean vector at t; reads_counterfactual: the model "
                      "reading B (at t) or the spliced context (after t); recovered = log(KL_none/KL_patch) / "
                      "log(KL_none/KL_reads_counterfactual); 95% bootstrap intervals over pairs, paired sign-flip "
                      "p-values of the patch against each control",
        "counterfactual_context": ("A's prefix (before the first scored position) kept, another episode's tokens "
                                   "after it" if pairs.hidden_state else "another episode, whole, at the same position"),
        "scored": list(record),
        "n_pairs": k,
        "pair_tv": float(0.5 * (pairs.at_t(pairs.post_b) - pairs.at_t(pairs.post_a)).abs().sum(-1).mean()),
        **record,
        "summary": summary,
    })


def _sub(sc: _Scorer, keep: torch.Tensor) -> _Scorer:
    out = _Scorer.__new__(_Scorer)
    out.post, out.where, out.counts = sc.post[keep], sc.where[keep], sc.counts[keep]
    return out


def _linear(none: float | None, patched: float | None, ref: float | None) -> float | None:
    r""":math:`(\mathrm{KL}_{none} - \mathrm{KL}_{patch}) / (\mathrm{KL}_{none} - \mathrm{KL}_{ref})`; ``None`` when
    reading the counterfactual is not closer than reading ``A``."""
    if none is None or patched is None or ref is None or none - ref <= 1e-12:
        return None
    return (none - patched) / (none - ref)


def state_patching_figure(result: dict[str, Any], path: str | Path) -> Path:
    """Per scored target (at t; after t), the KL to the patched context's exact posterior by patched layer, the
    patch beside its controls with 95% bootstrap error bars, the no-patch and reads-counterfactual levels, and
    the largest p-value of the patch against a control at each layer in the text."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"state_patching: {result.get('reason', 'not applicable')}", path)
    keys = result["scored"]
    fig, axes = _plot.figure(1, len(keys), w=5.0, h=3.8)
    style = {"patch": ("o-", "C0"), "random": ("x:", "0.5"), "shuffled": ("^--", "C1"), "mean": ("v:", "C4")}
    for ax, key in zip(axes[0], keys):
        rec = result[key]
        lays = rec["layers"]
        x = [lay["layer"] for lay in lays]
        shown = []
        for cond, (fmt, color) in style.items():
            m = _plot.nan(lay[cond]["mean"] for lay in lays)
            lo = [max(0.0, a - (lay[cond]["ci"][0] if lay[cond]["ci"][0] is not None else a)) for a, lay in zip(m, lays)]
            hi = [max(0.0, (lay[cond]["ci"][1] if lay[cond]["ci"][1] is not None else a) - a) for a, lay in zip(m, lays)]
            # a log axis draws only positive finite values (loggable: the rest become gaps; log_scale says how many)
            ax.errorbar(x, loggable(m), yerr=[lo, hi], fmt=fmt, color=color, capsize=3, label=cond)
            shown += [v for v in m if v == v]
        for ref, color, ls in (("no_patch", "C3", "--"), ("reads_counterfactual", "C2", "-.")):
            s = rec[ref]
            if s["mean"] is not None:
                shown.append(s["mean"])
            if drawable(s["mean"]):
                ax.axhline(s["mean"], color=color, ls=ls, label=f"{ref} {s['mean']:.3g}")
                if s["ci"][0] is not None and all(drawable(v) for v in s["ci"]):
                    ax.axhspan(s["ci"][0], s["ci"][1], color=color, alpha=0.12)
        for lay in lays:
            ps = [v["p_value"] for v in lay["vs"].values() if v["p_value"] is not None]
            if ps and lay["patch"]["mean"] is not None:
                ax.annotate(f"p≤{max(ps):.2g}", (lay["layer"], lay["patch"]["mean"]), fontsize=6,
                            textcoords="offset points", xytext=(3, 5))
        log_scale(ax, shown)
        ax.set_xticks(x)
        ax.set_xlabel("layer patched (blocks.l.hook_resid_post, position t)")
        ax.set_ylabel("KL(exact counterfactual ‖ model), bits")
        where = "at t vs p_B(t)" if key == "at_t" else "after t vs filter from B's belief at t"
        ax.set_title(f"State patching {where}\n{rec['n_pairs']} pairs (p: largest vs a control)", fontsize=8)
        ax.legend(fontsize=6)
    return _plot.save(fig, path)


def _interpret(r: dict[str, Any]) -> list[Reading]:
    """B10 read causally through a patch.  At t (the layers before the last, whose patch reproduces m(B)(t) by
    construction): if the stream at t is where the belief lives, B's state there gives B's posterior, beyond every
    control.  After t (hidden-state tasks), stated without a verdict: whether later positions take the past from
    t's state alone (a recurrent model whose state is the belief does; a transformer that reads the observations
    again through attention need not, and the substrate claim does not require it)."""
    s = r["summary"]
    out: list[Reading] = []
    for key in r["scored"]:
        k, none = s.get(f"{key}_best_patched_kl"), s.get(f"{key}_no_patch_kl")
        if k is None or none is None:
            continue
        n_layers_ = len(s.get(f"{key}_patched_kl_by_layer") or [])
        if key == "at_t" and n_layers_ < 2:
            continue  # one layer: its patch at t is the readout's input, nothing is tested
        ctrl, p = s.get(f"{key}_controls_min_kl"), s.get(f"{key}_p_max_vs_controls")
        ok = None
        if key == "at_t" and ctrl is not None and p is not None:
            ok = k < 0.5 * none and k < ctrl and p < 0.05
        where = ("after t, against the filter started from B's belief at t on A's later observations" if key == "after_t"
                 else "at t, against B's posterior")
        rec = s.get(f"{key}_best_recovered")
        rec_txt = f", {rec:.2f} of the way to the model reading the counterfactual (log scale)" if rec is not None else ""
        out.append(Reading(f"state_patching.{key}_best_patched_kl", k, "no patch", none,
                           "below half the unpatched KL and below every control, each at p < 0.05, is consistent"
                           if key == "at_t" else "informational: how much of the past later positions take from t's "
                           "state", ok, "B10",
                           f"patching B's layer-{s[f'{key}_best_layer']} state into A leaves the model {k:.3g} bits "
                           f"from the exact counterfactual {where} (no patch {none:.3g}, closest control "
                           f"{'—' if ctrl is None else f'{ctrl:.3g}'}){rec_txt}"))
    return out


register(Diagnostic("state_patching", state_patching, state_patching_figure, _interpret, resamples=True, order=98,
                    claims=("B10",)))
