"""The Jacobian lens: each layer's stream read through the later blocks' average linear map.

The logit lens of :mod:`windtunnel.geometry.bayes_lens` reads an intermediate stream ``x_l`` as if it
were already the final one.  The later blocks transform the stream, though, so ``x_l`` may hold the
posterior in a frame the readout cannot see.  The Jacobian lens carries ``x_l`` to the final stream's
frame through the first-order (linear) approximation of the later blocks, averaged over positions, and
only then applies the readout:

    J̄_l = E_{(b,t) scored}[ ∂x_L[b,t] / ∂x_l[b,t] ]       (a d×d matrix; fitted on the fit half)
    x̂_L = x̄_L + J̄_l (x_l − x̄_l)                         (x̄: means over the fit half's scored positions)
    q_l  = softmax(unembed(x̂_L))
    KL_l = mean over held-out positions of KL(p ‖ q_l) in bits,   Herr_l = mean |H(q_l) − H(p)| in bits

``x_L`` is the stream leaving the last block (what ``unembed`` turns into the model's output), ``x_l``
the stream leaving block ``l`` (``embed``: entering block 0), ``p`` the exact posterior.

**Same position only.**  ``∂x_L[b,t]/∂x_l[b,t]`` is the derivative of the final stream at position
``t`` with respect to layer ``l``'s stream *at the same position*, with the stream at every other
position held fixed.  A causal model's ``x_L[t]`` also depends on ``x_l[t']`` for ``t' < t`` (through
attention, or a recurrent state); those cross-position terms are left out, because the lens reads one
position's stream alone and has no other position's deviation to multiply them by.  (Summing them in
would describe a perturbation of the stream at every earlier position at once, which is not what a
single position's reading is.)

**The offset.**  Linearising the later blocks around the mean stream ``x̄_l`` gives
``x_L ≈ x_L(x̄_l) + J̄_l (x_l − x̄_l)``; the mean of the left side over the fit positions is ``x̄_L``, so
the first-order estimate of the intercept is ``x̄_L`` itself, and the lens reads
``x̄_L + J̄_l (x_l − x̄_l)``.  The lens is *exact* wherever the later blocks are a position-wise affine
map ``x_L = A x_l + c``: then ``J̄_l = A`` and ``x̄_L = A x̄_l + c``, so ``x̂_L = A x_l + c = x_L``.  The
bare ``unembed(J̄_l x_l)`` would miss ``c`` and be exact only for a linear map.  Where the later blocks
are the identity (bypassed, or the last layer itself, ``J̄_L = I``), ``x̂_L = x_l`` and the Jacobian lens
*is* the logit lens (``tests/test_jacobian_lens.py`` checks both cases).

**Fit and score.**  ``J̄_l`` and the means are computed on the first half of the episodes and the lens
is scored on the second half (held out), the split the tuned lens of ``bayes_lens`` uses; the logit
lens and — unless ``tuned=False`` — the tuned lens are scored on the same held-out half beside it.
Unlike the tuned lens, nothing is optimised: ``J̄_l`` is an average of the model's own derivatives, so
it cannot overfit the fit half, and its distance from the tuned lens says how much of what a fitted
affine translator finds is the later blocks' average linear action.  ``linear_error_by_layer`` is the
held-out relative squared error of the linearisation itself,
``Σ ‖x_L − x̂_L‖² / Σ ‖x_L − x̄_L‖²`` (0: the later blocks act on this layer's stream as an affine map;
1: no better than the mean final stream), and ``jacobian_distance_from_identity_by_layer`` is
``‖J̄_l − I‖_F / √d`` (0: the later blocks add nothing that depends linearly on ``x_l``).

The derivatives come from one forward pass per chunk of episodes in which the stream entering block 0 is
replaced, through its hook, by a leaf tensor that requires grad, and every block's outgoing stream is
kept from its hook; one backward pass per scored position ``t`` and output coordinate ``i`` (reverse
mode, the graph retained) then gives row ``i`` of ``∂x_L[·,t]/∂x_l[·,t]`` for every layer at once
(episodes are independent, so a batch's rows are its episodes' own).  That is ``(scored positions) × d``
backward passes per chunk.

It registers no ``interpret``: the claim about where in depth the posterior forms (B10) is read by the
Bayes lens and the probes; the Jacobian lens compares readers of the same stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import InvalidValue
from ..evaluation.log_axis import log_scale, loggable
from ..evaluation.metrics import kl_bits
from ..tasks.base import Episodes, Task, entropy_bits
from . import _plot
from ._common import GEOMETRY_SEED, collect_scored, device_of, episodes_for, eval_mode, inputs_on
from .bayes_lens import _tuned_lens, lens_layers
from .registry import Diagnostic, needs, register

__all__ = ["JacobianFit", "average_jacobians", "jacobian_lens", "jacobian_lens_figure", "jacobian_readout"]


@dataclass
class JacobianFit:
    """The average same-position Jacobians of the final stream and the mean streams (module docstring),
    all float64 on CPU.  ``jacobian[name]``: ``J̄_l`` ``[d, d]`` (row ``i``: ``∂x_L,i``) for every stream
    but the final one; ``mean[name]``: ``x̄_l`` ``[d]`` for every stream, the final one included
    (``final``); ``n_positions``: the scored positions averaged over."""

    layers: list[tuple[str, str]]
    jacobian: dict[str, torch.Tensor]
    mean: dict[str, torch.Tensor]
    final: str
    n_positions: int


def average_jacobians(model: torch.nn.Module, episodes: Episodes, chunk: int = 128) -> JacobianFit:
    """``J̄_l = mean over scored (b, t) of ∂x_L[b,t] / ∂x_l[b,t]`` for every stream ``x_l`` the lens reads
    (:func:`~windtunnel.geometry.bayes_lens.lens_layers`) before the last, with the stream at every other
    position held fixed, and the mean streams ``x̄_l`` over the same positions; by reverse-mode autograd
    through the model's own blocks (module docstring).  The model's parameters are left untouched (no
    gradient is accumulated into them) and its train/eval flags restored."""
    layers = lens_layers(model)
    names = [name for _, name in layers]
    entry, final, readers = names[0], names[-1], names[:-1]
    dev = device_of(model)
    jac: dict[str, torch.Tensor] = {}
    sums: dict[str, torch.Tensor] = {}
    count = 0
    # cuDNN's recurrent kernels have no backward pass in eval mode: differentiate a GRU/LSTM through the native ones
    with eval_mode(model), torch.enable_grad(), torch.backends.cudnn.flags(enabled=False):
        for part in episodes.chunks(chunk):
            streams: dict[str, torch.Tensor] = {}

            def leaf(x: torch.Tensor, name: str) -> torch.Tensor:
                streams[name] = x.detach().requires_grad_(True)
                return streams[name]

            def keep(x: torch.Tensor, name: str) -> None:
                streams[name] = x

            with model.hooks([(entry, leaf)] + [(n, keep) for n in names[1:]]):
                model(**inputs_on(part, dev))
            mask = part.mask.to(dev)
            x_final = streams[final]
            d = x_final.shape[-1]
            for n in names:
                total = streams[n].detach()[mask].double().sum(0).cpu()
                sums[n] = sums.get(n, torch.zeros(d, dtype=torch.float64)) + total
            count += int(mask.sum())
            inputs = [streams[n] for n in readers]
            for t in mask.any(0).nonzero().flatten().tolist():
                weight = mask[:, t].to(x_final.dtype)
                rows: list[list[torch.Tensor]] = [[] for _ in readers]
                for i in range(d):
                    grads = torch.autograd.grad(x_final[:, t, i], inputs, grad_outputs=weight, retain_graph=True,
                                                allow_unused=True)
                    for k, g in enumerate(grads):
                        rows[k].append(torch.zeros(d, device=dev, dtype=x_final.dtype) if g is None
                                       else g[:, t].sum(0))
                for k, n in enumerate(readers):
                    block = torch.stack(rows[k]).double().cpu()
                    jac[n] = jac[n] + block if n in jac else block
            del streams, inputs, x_final
    if count == 0:
        raise InvalidValue("invalid episodes: no scored position to average the Jacobian over")
    return JacobianFit(layers=layers, jacobian={n: j / count for n, j in jac.items()},
                       mean={n: s / count for n, s in sums.items()}, final=final, n_positions=count)


def jacobian_readout(fit: JacobianFit, name: str, x: torch.Tensor) -> torch.Tensor:
    """The final stream the Jacobian lens reads for stream ``name``'s rows ``x`` ``[N, d]`` (float64):
    ``x̄_L + (x − x̄_l) J̄_lᵀ``; the final stream itself (``J̄_L = I``) maps to itself."""
    x = x.double()
    if name == fit.final:
        return fit.mean[name] + (x - fit.mean[name])
    return fit.mean[fit.final] + (x - fit.mean[name]) @ fit.jacobian[name].T


def _formation(kl: list[float]) -> int | None:
    """The Bayes lens's rule: the first layer within twice the output's KL, ``None`` when the first already is."""
    final = kl[-1]
    if kl[0] <= 2 * final:
        return None
    return next((i for i, v in enumerate(kl) if v <= 2 * final), None)


@needs("blocks.{l}.hook_resid_pre", "blocks.{l}.hook_resid_post", "unembed()")
def jacobian_lens(model: torch.nn.Module, task: Task, n: int = 256, seed: int = GEOMETRY_SEED,
                  episodes: Episodes | None = None, tuned: bool = True) -> dict[str, Any]:
    """The held-out KL and entropy error to the exact posterior of every layer's Jacobian lens (module
    docstring), ``J̄_l`` fitted on the first half of at most ``n`` episodes, beside the logit lens and
    (``tuned``) the tuned lens on the same held-out half."""
    ep = episodes_for(task, n, seed, episodes)
    ep = ep[: min(n, len(ep))]
    if len(ep) < 2:
        raise InvalidValue(f"invalid episodes: the Jacobian lens fits on half and scores on the other, "
                           f"so it needs at least 2, got {len(ep)}")
    half = len(ep) // 2
    fit = average_jacobians(model, ep[:half])
    names = [name for _, name in fit.layers]
    held = collect_scored(model, ep[half:], names)
    p, h = held.posterior, held.entropy
    dev = device_of(model)
    dtype = next(model.parameters()).dtype
    x_final = held.acts[fit.final]
    spread = float(((x_final - fit.mean[fit.final]) ** 2).sum())
    kl, herr, logit_kl, logit_herr, lin_err, dist = [], [], [], [], [], []
    with torch.no_grad():
        for name in names:
            x = held.acts[name]
            x_hat = jacobian_readout(fit, name, x)
            q = torch.softmax(model.unembed(x_hat.to(dev, dtype)).double().cpu(), -1)
            kl.append(float(kl_bits(p, q).mean()))
            herr.append(float((entropy_bits(q) - h).abs().mean()))
            q_logit = torch.softmax(model.unembed(x.to(dev, dtype)).double().cpu(), -1)
            logit_kl.append(float(kl_bits(p, q_logit).mean()))
            logit_herr.append(float((entropy_bits(q_logit) - h).abs().mean()))
            lin_err.append(float(((x_final - x_hat) ** 2).sum()) / spread if spread > 0 else None)
            j = fit.jacobian.get(name)
            dist.append(0.0 if j is None else float((j - torch.eye(len(j), dtype=j.dtype)).norm() / math.sqrt(len(j))))
    output_kl = float(kl_bits(p, torch.softmax(held.logits, -1)).mean())
    labels = [label for label, _ in fit.layers]
    formation, logit_formation = _formation(kl), _formation(logit_kl)
    out: dict[str, Any] = {
        "applicable": True,
        "layers": labels,
        "n_fit_episodes": half,
        "n_held_out_episodes": len(ep) - half,
        "n_fit_positions": fit.n_positions,
        "kl_by_layer": kl,
        "entropy_error_by_layer": herr,
        "logit_kl_by_layer": logit_kl,
        "logit_entropy_error_by_layer": logit_herr,
        "linear_error_by_layer": lin_err,
        "jacobian_distance_from_identity_by_layer": dist,
        "output_kl": output_kl,
    }
    summary: dict[str, Any] = {
        "kl_by_layer": kl,
        "logit_kl_by_layer": logit_kl,
        "entropy_error_by_layer": herr,
        "linear_error_by_layer": lin_err,
        "final_kl": kl[-1],
        "final_kl_vs_output": abs(kl[-1] - output_kl),
        "kl_before_last_block": kl[-2] if len(kl) >= 2 else None,
        "logit_kl_before_last_block": logit_kl[-2] if len(kl) >= 2 else None,
        "formation_layer": labels[formation] if formation is not None else None,
        "logit_formation_layer": labels[logit_formation] if logit_formation is not None else None,
    }
    if tuned and len(ep) >= 4:  # as the Bayes lens: at least two episodes each to fit and to score
        with torch.enable_grad():
            tuned_result = _tuned_lens(model, ep, seed)  # the same split: first half fitted, second held out
        out["tuned_kl_by_layer"] = tuned_result["kl_by_layer"]
        summary["tuned_kl_by_layer"] = tuned_result["kl_by_layer"]
    out["summary"] = summary
    return out


def jacobian_lens_figure(result: dict[str, Any], path: Path) -> Path:
    """Held-out KL to the posterior by layer: the logit lens, the tuned lens (where computed) and the
    Jacobian lens (log scale)."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"Jacobian lens: {result.get('reason', 'not applicable')}", path)
    fig, ax = _plot.figure(w=4.8, h=3.4)
    a = ax[0, 0]
    x = list(range(len(result["layers"])))
    drawn = [result["logit_kl_by_layer"], result["kl_by_layer"]]
    a.plot(x, loggable(drawn[0]), "o-", color="C0", label="logit lens (Bayes lens)")
    if "tuned_kl_by_layer" in result:
        drawn.append(result["tuned_kl_by_layer"])
        a.plot(x, loggable(drawn[-1]), "^-", color="C2", label="tuned lens")
    a.plot(x, loggable(drawn[1]), "D-", color="C3", label="Jacobian lens")
    a.set_xticks(x, result["layers"])
    log_scale(a, *drawn)
    a.set_ylabel("KL(posterior ‖ layer readout), bits")
    a.set_title("Jacobian lens vs logit lens (held-out episodes)", fontsize=9)
    a.legend(fontsize=7)
    return _plot.save(fig, path)


register(Diagnostic("jacobian_lens", jacobian_lens, jacobian_lens_figure, order=66))
