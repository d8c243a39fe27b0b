"""Counterfactuals with exact targets: edit one piece of evidence, score the model against the exact
posterior *of the edit*, and patch the edit into the unedited run layer by layer to see where in depth
the evidence leaves its position.

The edit is the task's (``Task.counterfactual_edit``): a shown value of the bijection or of the recall
store, an HMM observation — one token, changed to either of two values that keep the episode valid.
Writing ``A`` for the original episode, ``B`` for the edit and ``C`` for the other edit (the wrong
counterfactual), all scores are KL (bits) averaged over the *affected* queries: the scored positions
after the edit whose exact posterior the edit changes.

* **Input counterfactual** — the model reading ``B``: ``KL(p_B ‖ m(B))`` (it follows the edit) against
  ``KL(p_A ‖ m(B))`` (it ignored it); ``KL(p_B ‖ p_A)`` is how much the edit should move it.
* **By distance** — how far the edit should move the query ``d`` positions after it,
  ``TV(p_B, p_A)`` (total variation), against how far the model moves, ``TV(m(B), m(A))``, and their ratio: a filter
  that reads only the current observation moves 0 at ``d ≥ 1`` where the posterior still moves; the
  ``memory`` is how many positions the edit reaches with at least half its effect.
* **Activation patching** — the model reading ``A`` with the residual stream at the edited position
  replaced, at the input of block ``l`` (``blocks.{l}.hook_resid_pre``; ``l = L``: the last block's
  output), by ``B``'s.  The recovered share, on a log scale (the KL spans decades: deleting the evidence
  already removes most of the unedited model's distance to ``p_B`` in bits, but not in precision),

  .. math:: r(l) = \\frac{\\log \\mathrm{KL}(p_B \\| m(A)) - \\log \\mathrm{KL}(p_B \\| m_{A \\leftarrow B, l}(A))}{\\log \\mathrm{KL}(p_B \\| m(A)) - \\log \\mathrm{KL}(p_B \\| m(B))}

  (undefined — ``None`` — when reading the edit brings the model less than 2× closer to ``p_B``: its own
  error is then as large as the edit), is 1 at ``l = 0`` whenever the model's input at a position depends only on that position's token and
  index (the patch then *is* the edit), and falls to 0 once every later query has read what it needs
  from the edited position: the depth at which the evidence is routed away.
* **Controls**, each patched at the same place and scored against ``p_B``: the *wrong* counterfactual
  (``C``'s residual), the *shuffled* one (another episode's ``B`` residual at this position), the
  *mean* residual over episodes at this position, and a *random* vector of the patched vector's norm.
  A patch that recovers ``B`` and controls that do not are what make the profile evidence of where the
  model carries that token's information.
* **Statistics** (:mod:`windtunnel.evaluation.stats`), over episodes (each contributes the KL summed over its
  affected queries, pooled as above): a 95% percentile bootstrap interval of every KL and of every ``r(l)`` (the
  three KLs of ``r`` resampled together), and, per layer, the paired sign-flip p-value of the counterfactual
  patch against each control (``p_vs_controls``; two-sided, on ``KL(p_B ‖ ·)``), and of the input
  counterfactual's ``follows_edit`` against ``ignores_edit``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ..evaluation.metrics import _kl_from_log
from ..evaluation.stats import resample_weights, sign_flip_p
from . import _plot
from ._common import GEOMETRY_SEED, ci, clean, device_of, episodes_for, eval_mode, n_layers, not_applicable
from .registry import Diagnostic, Reading, needs, register

__all__ = ["counterfactual", "counterfactual_figure", "CONDITIONS"]

CONDITIONS = ("counterfactual", "wrong", "shuffled", "mean", "random")
"""The patch and its four controls (module docstring)."""


def _names(L: int) -> list[str]:
    return [f"blocks.{l}.hook_resid_pre" for l in range(L)] + [f"blocks.{L - 1}.hook_resid_post"]


def _run(model: torch.nn.Module, tokens: torch.Tensor, chunk: int, names: list[str] | None = None,
         patch: tuple[str, torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Log-probabilities ``[B,T,C]`` float64 (CPU) and the named activations (CPU); ``patch = (name,
    positions [B], vectors [B, d])`` replaces that activation at each row's position."""
    dev = device_of(model)
    outs, caches = [], {n: [] for n in names or []}
    for i in range(0, len(tokens), chunk):
        rows = slice(i, i + chunk)
        hooks = []
        if patch is not None:
            name, pos, vec = patch
            p, v = pos[rows].to(dev), vec[rows].to(dev)

            def put(x: torch.Tensor, _: str, p: torch.Tensor = p, v: torch.Tensor = v) -> torch.Tensor:
                x = x.clone()
                x[torch.arange(len(p), device=x.device), p] = v.to(x.dtype)
                return x

            hooks.append((name, put))
        cache: dict[str, torch.Tensor] = {}
        for n in names or []:
            hooks.append((n, lambda x, nm, c=cache: c.__setitem__(nm, x.detach().float().cpu())))
        with model.hooks(hooks):
            logits = model(tokens[rows].to(dev))
        outs.append(torch.log_softmax(logits.double().cpu(), -1))
        for n in names or []:
            caches[n].append(cache[n])
    return torch.cat(outs), {n: torch.cat(v) for n, v in caches.items()}


@needs("blocks.{l}.hook_resid_pre", "blocks.{l}.hook_resid_post")
def counterfactual(model: torch.nn.Module, task: Any, *, episodes: Any = None, n: int = 256,
                   seed: int = GEOMETRY_SEED, chunk: int = 128, n_boot: int = 1000) -> dict[str, Any]:
    """The input counterfactual and the layer-by-layer patching profile with its four controls, bootstrap
    intervals over episodes (``n_boot`` resamples) and sign-flip p-values (module docstring), on ``episodes`` (or
    ``n`` sampled with ``seed``)."""
    L = n_layers(model)
    if task.n_features:
        return not_applicable(f"task {task.name!r} has real-valued inputs (the edits change a token)")
    ep = episodes_for(task, n, seed, episodes)
    edit = task.counterfactual_edit(ep.tokens, seed + 1)
    if edit is None:
        return not_applicable(f"task {task.name!r} defines no counterfactual edit at these parameters "
                              "(Task.counterfactual_edit)")
    edited, other, pos = edit
    B = len(ep)
    post_a, post_b = ep.posterior, task.posterior(edited)
    later = torch.arange(ep.tokens.shape[1])[None, :] > pos[:, None]
    affected = ep.mask & later & ((post_b - post_a).abs().sum(-1) > 1e-12)
    if not bool(affected.any()):
        return not_applicable("no scored position after an edit changes its posterior")

    def kl(p: torch.Tensor, log_q: torch.Tensor) -> float:
        return float(_kl_from_log(p, log_q)[affected].mean())

    counts = affected.double().sum(1)  # affected queries per episode
    W = resample_weights(B, n_boot, seed + 3)
    den = W @ counts

    def sums(p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
        """Per episode, KL(p || q) summed over its affected queries."""
        k = _kl_from_log(p, log_q)
        return torch.where(affected, k, torch.zeros_like(k)).sum(1)

    def boot(s: torch.Tensor) -> torch.Tensor:
        """The pooled KL in each bootstrap resample of the episodes."""
        return (W @ s) / den.clamp_min(1e-300)

    names = _names(L)
    rows = torch.arange(B)
    with eval_mode(model):
        log_a, acts_a = _run(model, ep.tokens, chunk, names)
        log_b, acts_b = _run(model, edited, chunk, names)
        _, acts_c = _run(model, other, chunk, names)
        k_a, k_b = kl(post_b, log_a), kl(post_b, log_b)
        s_a, s_b, s_ign = sums(post_b, log_a), sums(post_b, log_b), sums(post_a, log_b)
        ba, bb = boot(s_a), boot(s_b)
        bspan = torch.log(ba / bb)
        by_distance = _by_distance(post_a, post_b, log_a, log_b, affected, pos)
        span = math.log(k_a / k_b) if k_a > 0 and k_b > 0 else 0.0
        resolved = span >= math.log(2.0)
        g = torch.Generator().manual_seed(seed + 2)
        shuffle = torch.roll(torch.arange(B), 1)
        profile: dict[str, list[float | None]] = {c: [] for c in CONDITIONS}
        kl_after: dict[str, list[float]] = {c: [] for c in CONDITIONS}
        kl_after_ci: dict[str, list[list[float | None]]] = {c: [] for c in CONDITIONS}
        recovered_ci: dict[str, list[list[float | None]]] = {c: [] for c in CONDITIONS}
        p_vs: dict[str, list[float | None]] = {c: [] for c in CONDITIONS[1:]}
        for name in names:
            donor = acts_b[name][rows, pos]
            noise = torch.randn(donor.shape, generator=g)
            vectors = {
                "counterfactual": donor,
                "wrong": acts_c[name][rows, pos],
                "shuffled": acts_b[name][shuffle, pos],
                "mean": acts_a[name].mean(0)[pos],
                "random": noise / noise.norm(dim=-1, keepdim=True).clamp_min(1e-12) * donor.norm(dim=-1, keepdim=True),
            }
            layer_sums = {}
            for cond, vec in vectors.items():
                log_p, _ = _run(model, ep.tokens, chunk, patch=(name, pos, vec))
                k = kl(post_b, log_p)
                kl_after[cond].append(k)
                profile[cond].append(math.log(k_a / max(k, 1e-300)) / span if resolved else None)
                layer_sums[cond] = sums(post_b, log_p)
                bk = boot(layer_sums[cond])
                kl_after_ci[cond].append(ci(bk))
                ok = bspan >= math.log(2.0)  # resamples where r is defined, as for the estimate
                recovered_ci[cond].append(ci((torch.log(ba / bk.clamp_min(1e-300)) / bspan)[ok]) if resolved
                                          else [None, None])
            for cond in CONDITIONS[1:]:
                p_vs[cond].append(sign_flip_p(layer_sums["counterfactual"] - layer_sums[cond], counts, seed=seed + 4))
    layers = [f"L{l}" for l in range(L)] + ["out"]
    cf = profile["counterfactual"]
    routed = next((layers[i] for i, r in enumerate(cf) if r is not None and r < 0.5), None)
    controls_max = max((r for c in CONDITIONS[1:] for r in profile[c] if r is not None), default=None)
    p_max = [max((p_vs[c][i] for c in CONDITIONS[1:] if p_vs[c][i] is not None), default=None)
             for i in range(len(layers))]
    p_follows = sign_flip_p(s_b - s_ign, counts, seed=seed + 5)
    return clean({
        "applicable": True,
        "definition": "KL (bits) over the affected queries (scored, after the edit, posterior changed by it); "
                      "r(l) = log(KL(p_B||m(A)) / KL(p_B||m patched at l)) / log(KL(p_B||m(A)) / KL(p_B||m(B))), the "
                      "residual at the edited position replaced at the input of block l ('out': after the last); "
                      "None unless reading the edit brings the model >= 2x closer to p_B; edit_size_tv: total "
                      "variation between the two exact posteriors; *_ci: 95% bootstrap intervals over episodes; "
                      "p_vs_controls: paired sign-flip p-values (two-sided) of the counterfactual patch against each "
                      "control",
        "n_episodes": B,
        "n_affected": int(affected.sum()),
        "edit_size_tv": float(0.5 * (post_b - post_a).abs().sum(-1)[affected].mean()),
        "resolved": resolved,
        "n_boot": n_boot,
        "input": {"follows_edit": k_b, "ignores_edit": kl(post_a, log_b), "unedited_model": k_a,
                  "follows_edit_ci": ci(bb), "ignores_edit_ci": ci(boot(s_ign)), "unedited_model_ci": ci(ba),
                  "p_follows_vs_ignores": p_follows},
        "layers": layers,
        "recovered": profile,
        "recovered_ci": recovered_ci,
        "kl_after_patch": kl_after,
        "kl_after_patch_ci": kl_after_ci,
        "p_vs_controls": p_vs,
        "p_max_vs_controls": p_max,
        "by_distance": by_distance,
        "summary": {
            "nearest_distance": by_distance["distance"][0] if by_distance["distance"] else None,
            "moved_share_nearest": by_distance["moved_share"][0] if by_distance["distance"] else None,
            "memory": by_distance["memory"],
            "follows_edit_kl": k_b,
            "ignores_edit_kl": kl(post_a, log_b),
            "recovered_at_input": cf[0],
            "recovered_at_input_ci": recovered_ci["counterfactual"][0],
            "p_max_vs_controls_at_input": p_max[0],
            "recovered_by_layer": cf,
            "routed_by": routed,
            "controls_max_recovered": controls_max,
        },
    })


MAX_DISTANCE = 8
"""The by-distance reading covers queries 1 … this many positions after the edit."""


def _by_distance(post_a: torch.Tensor, post_b: torch.Tensor, log_a: torch.Tensor, log_b: torch.Tensor,
                 affected: torch.Tensor, pos: torch.Tensor) -> dict[str, Any]:
    """How far the edit should move each query, and how far the model moves, by the query's distance from
    the edit, in total variation (bounded, and defined where an edit makes a value possible that was not):
    ``should_move(d) = TV(p_B, p_A)``, ``model_moved(d) = TV(m(B), m(A))`` (mean over the affected queries
    ``d`` positions after it) and their ratio ``moved_share`` (1: the model moves as far as the posterior;
    0: the edit does not reach that query).  ``memory``: the largest ``d`` up to which every
    share is at least 1/2 (0 if the first is below; ``None`` with no query at distance 1)."""
    dist = torch.arange(post_a.shape[1])[None, :] - pos[:, None]
    should_all = 0.5 * (post_b - post_a).abs().sum(-1)
    moved_all = 0.5 * (torch.exp(log_b) - torch.exp(log_a)).abs().sum(-1)
    out: dict[str, Any] = {"distance": [], "n": [], "should_move": [], "model_moved": [], "moved_share": []}
    for d in range(1, MAX_DISTANCE + 1):
        m = affected & (dist == d)
        if not bool(m.any()):
            continue
        should, moved = float(should_all[m].mean()), float(moved_all[m].mean())
        out["distance"].append(d)
        out["n"].append(int(m.sum()))
        out["should_move"].append(should)
        out["model_moved"].append(moved)
        out["moved_share"].append(moved / should if should > 0 else None)
    memory = None
    if out["distance"]:  # the distances present (a task may score every other position)
        memory = 0
        for d, share in zip(out["distance"], out["moved_share"]):
            if share is None or share < 0.5:
                break
            memory = d
    out["memory"] = memory
    return out


def counterfactual_figure(result: dict[str, Any], path: Path) -> Path:
    """The recovered fraction at each patched layer: the counterfactual patch beside its four controls."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"counterfactual: {result.get('reason', 'not applicable')}", path)
    fig, ax = _plot.figure(w=5.2, h=3.4)
    a = ax[0, 0]
    x = list(range(len(result["layers"])))
    style = {"counterfactual": ("o-", "C0"), "wrong": ("s--", "C3"), "shuffled": ("^--", "C1"),
             "mean": ("v:", "0.4"), "random": ("x:", "0.6")}
    rci = result.get("recovered_ci", {})
    for cond in CONDITIONS:
        m, c = style[cond]
        ys = _plot.nan(result["recovered"][cond])
        if cond in rci:
            lo = [max(0.0, y - b[0]) if b[0] is not None and y == y else 0.0 for y, b in zip(ys, rci[cond])]
            hi = [max(0.0, b[1] - y) if b[1] is not None and y == y else 0.0 for y, b in zip(ys, rci[cond])]
            a.errorbar(x, ys, yerr=[lo, hi], fmt=m, color=c, capsize=2, label=cond)
        else:
            a.plot(x, ys, m, color=c, label=cond)
    for i, p in enumerate(result.get("p_max_vs_controls", [])):
        y = result["recovered"]["counterfactual"][i]
        if p is not None and y is not None:
            a.annotate(f"p≤{p:.2g}", (i, y), fontsize=6, textcoords="offset points", xytext=(3, 5))
    a.axhline(0, color="k", lw=0.6)
    a.axhline(1, color="k", lw=0.6, ls=":")
    a.set_xticks(x, result["layers"])
    a.set_xlabel("residual stream patched at the edited position (input of block)")
    a.set_ylabel("share of the edit recovered (log KL), r")
    a.set_title(f"Counterfactual patching (input: KL {result['input']['follows_edit']:.3g} bits to the edit's "
                f"posterior)\n95% bootstrap bars; p: largest sign-flip p of the patch vs a control", fontsize=8)
    a.legend(fontsize=7)
    return _plot.save(fig, path)


def _interpret(r: dict[str, Any]) -> list[Reading]:
    """A27 read through an edit: a model that computes the posterior from its inputs follows an edit of them;
    B11's routing read from the patch: the edit's evidence leaves its position in depth."""
    s, inp = r["summary"], r["input"]
    follows, ignores = inp["follows_edit"], inp["ignores_edit"]
    out = [Reading("counterfactual.follows_edit_kl", follows, "KL to the unedited posterior", ignores,
                   "below a tenth of it is consistent", follows < 0.1 * ignores, "A27",
                   f"reading the edited episode, the model is {follows:.3g} bits from the edit's exact posterior and "
                   f"{ignores:.3g} from the one it replaced (the edit moves the posterior by {r['edit_size_tv']:.3g} in "
                   f"total variation)")]
    bd = r["by_distance"]
    if bd["distance"] and bd["moved_share"][0] is not None:
        shares = ", ".join(f"{d}: {x:.2f}" for d, x in zip(bd["distance"], bd["moved_share"]) if x is not None)
        out.append(Reading("counterfactual.summary.moved_share_nearest", bd["moved_share"][0],
                           "the posterior's own move", 1.0, "a share near 1: the model moves with the edit as far "
                           "as the posterior does", None, "A27",
                           f"the nearest affected query ({bd['distance'][0]} position(s) after the edit) moves "
                           f"{bd['moved_share'][0]:.2f} of the way the exact "
                           f"posterior moves (total variation {bd['model_moved'][0]:.3g} vs {bd['should_move'][0]:.3g}); by "
                           f"distance {shares}; the edit reaches {bd['memory']} position(s) with at least half its "
                           "effect"))
    cf = s["recovered_by_layer"]
    if not r["resolved"]:
        out.append(Reading("counterfactual.recovered_by_layer", None, "largest control", None,
                           "the patch recovers the edit and no control does", None, "B11",
                           "not resolved: reading the edit brings the model less than 2x closer to its posterior "
                           "(its own error is as large as the edit)", ("unresolved",)))
    elif cf and cf[0] is not None:
        where = (f"the edit has left its position by {s['routed_by']}" if s["routed_by"] else
                 "the edit never leaves its position (every later query reads it there at every depth)")
        out.append(Reading("counterfactual.recovered_by_layer", cf[0], "largest control", s["controls_max_recovered"],
                           "the patch recovers the edit and no control does", None, "B11",
                           f"patching the edited position recovers {cf[0]:.2f} of the edit at the input; {where}"))
    return out


register(Diagnostic("counterfactual", counterfactual, counterfactual_figure, _interpret, order=96, version=4,
                    resamples=True, claims=("A27", "B11")))
