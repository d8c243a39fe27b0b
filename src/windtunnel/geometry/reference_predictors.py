"""Which strategy a network passes through in training: its distance to each reference predictor over
its checkpoints (a phase diagram of the path from ignorance to the posterior)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..run import checkpoint as ckpt
from .. import models
from ..evaluation.evaluate import predict
from ..evaluation.metrics import _kl_from_log
from ..evaluation.references import predictors
from ..run.runs import RunDir
from ..evaluation.log_axis import log_scale, loggable
from . import _plot
from ._common import GEOMETRY_SEED, clean, evenly_spaced, finite_checkpoints
from .registry import Diagnostic, Reading, register

__all__ = ["nearest_reference", "reference_predictors", "reference_predictors_figure", "reference_path"]


def _mean_kl(p: torch.Tensor, log_q: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over the scored positions of ``KL(p ‖ q)`` in bits."""
    return float(_kl_from_log(p, log_q)[mask].mean())


TIE = 0.05
"""References within this fraction of the smallest distance (or :data:`TIE_BITS` of it) count as tied;
a tie goes to the least informed (the one listed first), so sampling noise between near-identical
references (uniform and unigram on a task whose marginal is uniform) does not make the path flicker."""
TIE_BITS = 1e-4
"""The absolute part of the tie: distances this close (bits) are not told apart."""


def nearest_reference(kl_from: dict[str, float], tie: float = TIE, tie_bits: float = TIE_BITS) -> str:
    """The first reference (least informed first) whose distance is within ``(1 + tie)`` × the smallest
    plus ``tie_bits``."""
    best = min(kl_from.values())
    return next(name for name, v in kl_from.items() if v <= best * (1 + tie) + tie_bits)


def reference_path(nearest: list[str]) -> list[str]:
    """The sequence of nearest references over checkpoints with repeats collapsed:
    ``[a, a, b, a, c] -> [a, b, a, c]``."""
    out: list[str] = []
    for name in nearest:
        if not out or out[-1] != name:
            out.append(name)
    return out


def reference_predictors(
    run_dir: str | Path,
    *,
    n: int = 256,
    seed: int = GEOMETRY_SEED,
    device: str | torch.device | None = None,
    max_checkpoints: int | None = None,
    fit_n: int = 20000,
) -> dict[str, Any]:
    r"""The KL from each reference predictor (:mod:`windtunnel.evaluation.references`) to the network at every
    checkpoint of ``run_dir``, on ``n`` fixed episodes:

    .. math:: D_r(s) = \frac{1}{|\mathcal{S}|}\sum_{(b,t)\in\mathcal{S}} \mathrm{KL}\big(q_r(\cdot \mid x_{\le t}) \,\|\, p_{\theta_s}(\cdot \mid x_{\le t})\big)

    in bits over the scored positions ``𝒮`` — for ``r = oracle`` exactly the run's KL to the posterior.
    The *nearest* reference at a checkpoint is the one with the smallest ``D_r`` (ties within 5% or
    10⁻⁴ bits go to the least informed: :func:`nearest_reference`); ``path`` lists the
    nearest references in training order with repeats collapsed (which strategies the network passes
    through).  Beside them, each reference's own distance to the posterior,
    ``KL(posterior ‖ q_r)`` — how far that strategy is from Bayes.  ``fit_n``: episodes averaged by the
    conditional-mean references.  Applies to any model: it reads only the outputs.
    """
    run = RunDir(run_dir)
    record = run.read_config()
    paths = run.checkpoint_paths()
    if not paths:
        return {"applicable": False, "reason": f"no complete checkpoints in {run.checkpoints}"}
    paths = evenly_spaced(paths, max_checkpoints)
    from .. import tasks

    task = tasks.make(record["task"]["name"], **record["task"]["params"])
    ep = task.sample(n, seed)
    refs = predictors(task, n=fit_n)
    probs = {name: torch.softmax(predict(m, ep).double(), -1) for name, m in refs.items()}
    quality = {name: _mean_kl(ep.posterior, p.clamp_min(1e-300).log(), ep.mask) for name, p in probs.items()}

    model = models.build(record["model"])
    if device is not None:
        model.to(device)
    series: list[dict[str, Any]] = []
    skipped: list[int] = []
    for path in finite_checkpoints(paths, model, skipped):
        log_q = torch.log_softmax(predict(model, ep).double(), -1)
        kl_from = {name: _mean_kl(p, log_q, ep.mask) for name, p in probs.items()}
        series.append({"step": ckpt.step_of(path), "kl_from": kl_from, "nearest": nearest_reference(kl_from)})
    nearest = [r["nearest"] for r in series]
    path_names = reference_path(nearest)
    final = series[-1]["kl_from"]
    summary: dict[str, Any] = {"path": " → ".join(path_names), "nearest_final": nearest[-1], "n_checkpoints": len(series)}
    summary.update({f"kl_from_{name}": v for name, v in final.items()})
    return clean({
        "applicable": True,
        "definition": "KL(q_ref ‖ model) in bits, mean over scored positions, at every checkpoint; nearest = the "
                      "reference with the smallest (ties within 5% or 1e-4 bits go to the least informed); reference_kl_to_posterior = KL(posterior ‖ q_ref)",
        "references": list(refs),
        "reference_kl_to_posterior": quality,
        "n_episodes": n,
        "steps": [r["step"] for r in series],
        "series": series,
        "path": path_names,
        "first_nearest_step": {name: next(r["step"] for r in series if r["nearest"] == name) for name in path_names},
        "summary": summary,
        **({"skipped_non_finite_steps": skipped} if skipped else {}),  # checkpoints whose weights are not numbers
    })


def reference_predictors_figure(result: dict[str, Any], path: str | Path) -> Path:
    """KL from each reference to the network over checkpoint steps (symlog x, log y), the references'
    own distance to the posterior as dotted levels on the right, and the nearest reference per
    checkpoint as a coloured strip along the bottom."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"reference predictors: {result.get('reason', 'not applicable')}", path)
    s, names = result["series"], result["references"]
    steps = [r["step"] for r in s]
    fig, axes = _plot.figure(2, 1, w=7.0, h=2.2, sharex=True, gridspec_kw={"height_ratios": [4, 1]})
    ax, strip = axes[0, 0], axes[1, 0]
    colour = {name: f"C{i % 10}" for i, name in enumerate(names)}
    # a KL of exactly 0 (the network equal to a reference) sits at the floor 1e-12; NaN and inf are left out
    kls = [[None if r["kl_from"][name] is None else max(r["kl_from"][name], 1e-12) for r in s] for name in names]
    for name, kl in zip(names, kls):
        ax.plot(steps, loggable(kl), "o-", ms=3, color=colour[name], label=name)
    log_scale(ax, *kls)
    ax.set_ylabel("KL(reference ‖ model), bits")
    ax.set_title("Which strategy the network passes through (nearest reference below)", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    for i, r in enumerate(s):
        right = steps[i + 1] if i + 1 < len(steps) else steps[i] * 1.3 + 1
        strip.axvspan(steps[i], right, color=colour[r["nearest"]])
    strip.set_yticks([])
    strip.set_ylabel("nearest", fontsize=8)
    for a in (ax, strip):
        a.set_xscale("symlog", linthresh=1)
        a.set_xlim(left=0)
    strip.set_xlabel("training step")
    return _plot.save(fig, path)


def _interpret(r: dict[str, Any]) -> list[Reading]:
    """A27 on this run: training with cross-entropy should end nearer the posterior than any cheaper strategy."""
    s = r["summary"]
    final = r["series"][-1]["kl_from"]
    bayes = [k for k in ("oracle", "oracle_true_prior") if k in final]
    cheaper = {k: v for k, v in final.items() if k not in bayes}
    if not cheaper:
        return []
    rival = min(cheaper, key=cheaper.__getitem__)
    to_bayes = min(final[k] for k in bayes)
    return [Reading("reference_predictors.kl_from_oracle", to_bayes, f"nearest cheaper strategy ({rival})",
                    cheaper[rival], "nearer the posterior than any cheaper strategy is consistent",
                    to_bayes < cheaper[rival], "A27",
                    f"{final['oracle']:.3g} bits from the posterior, {cheaper[rival]:.3g} from {rival}; path over "
                    f"training: {s['path']}")]


register(Diagnostic("reference_predictors", reference_predictors, reference_predictors_figure, _interpret,
                    checkpoints=True, order=92, version=2, claims=("A27",)))
