"""The Bayes lens: where in depth the posterior forms.

Each layer's residual stream is read out through the model's own final norm and output head (a
logit lens), and the distribution it gives is scored against the exact posterior at every scored
position:

    q_l = softmax(unembed(x_l))              x_l: the stream after block l (``embed``: before block 0);
                                             unembed: the model's final norm and head (``model.unembed``)
    KL_l = mean over positions of KL(p ‖ q_l) in bits,   Herr_l = mean |H(q_l) − H(p)| in bits

The last layer's lens is the model's output, so ``KL_L`` equals the evaluation's KL on the same
episodes (a check recorded as ``final_kl_vs_output``).  ``formation_layer`` is the first layer whose
KL is within twice the final one — ``None`` when the lens is flat (the embedding's readout is already
within twice the output's: no layer forms anything the embedding lacks, as for a model that learned
nothing).  The untrained model's lens is the null: a readout that has
learned nothing gives its KL at every depth.

The **tuned lens** replaces the raw stream by an affine translation of it before the same readout,
``q̃_l = softmax(unembed(A_l x_l + b_l))``, with ``A_l, b_l`` (identity and zero at the start) fitted
briefly — at most :data:`TUNED_STEPS` full-batch L-BFGS iterations — to the model's own output, minimising
``KL(q_out ‖ q̃_l)`` on half of the episodes, and scored against the posterior on the other half
(held out).  A layer whose stream holds the posterior in another basis than the readout's is invisible
to the logit lens and visible to the tuned one; the gap between the two is how much of the information
the readout cannot yet see.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..evaluation.metrics import kl_bits
from ..tasks.base import Episodes, Task, entropy_bits
from ..evaluation.log_axis import log_scale, loggable
from . import _plot
from ._common import GEOMETRY_SEED, collect_scored, episodes_for, n_layers
from .registry import Diagnostic, Reading, missing, needs, register

__all__ = ["bayes_lens", "bayes_lens_figure", "lens_layers"]


def lens_layers(model: torch.nn.Module) -> list[tuple[str, str]]:
    """``(label, hook name)`` of every stream the lens reads: the input to block 0, then each block's output."""
    return [("embed", "blocks.0.hook_resid_pre")] + [(f"L{l}", f"blocks.{l}.hook_resid_post") for l in range(n_layers(model))]


@torch.no_grad()
def _lens(model: torch.nn.Module, episodes: Episodes) -> dict[str, Any]:
    layers = lens_layers(model)
    sc = collect_scored(model, episodes, [name for _, name in layers])
    p, h = sc.posterior, sc.entropy
    dev, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    kl, herr = [], []
    for _, name in layers:
        logits = model.unembed(sc.acts[name].to(dev, dtype)).double().cpu()
        q = torch.softmax(logits, -1)
        kl.append(float(kl_bits(p, q).mean()))
        herr.append(float((entropy_bits(q) - h).abs().mean()))
    output_kl = float(kl_bits(p, torch.softmax(sc.logits, -1)).mean())
    return {"layers": [label for label, _ in layers], "kl_by_layer": kl, "entropy_error_by_layer": herr,
            "output_kl": output_kl}


TUNED_STEPS = 100
"""L-BFGS iterations (at most) of each layer's tuned-lens translator."""


def _tuned_lens(model: torch.nn.Module, episodes: Episodes, seed: int) -> dict[str, Any]:
    """Held-out KL and entropy error to the posterior of each layer's tuned lens (module docstring); the
    translators are fitted on the first half of ``episodes`` and scored on the second."""
    half = len(episodes) // 2
    layers = lens_layers(model)
    names = [name for _, name in layers[:-1]]  # the last stream is the output: its lens needs no translation
    fit, held = collect_scored(model, episodes[:half], names), collect_scored(model, episodes[half:], names)
    dev, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    target = torch.softmax(fit.logits, -1).to(dev, torch.float32)
    frozen = [(p, p.requires_grad) for p in model.parameters()]
    kl, herr = [], []
    try:
        for p, _ in frozen:
            p.requires_grad_(False)
        torch.manual_seed(seed)
        for name in names:
            x, x_held = fit.acts[name].to(dev, dtype), held.acts[name].to(dev, dtype)
            d = x.shape[-1]
            translator = torch.nn.Linear(d, d).to(dev, dtype)
            with torch.no_grad():
                translator.weight.copy_(torch.eye(d))
                translator.bias.zero_()
            # full-batch L-BFGS: it stops where the gradient vanishes (Adam would rescale rounding noise
            # into full-size steps and walk away from a translator that is already optimal)
            opt = torch.optim.LBFGS(translator.parameters(), lr=1.0, max_iter=TUNED_STEPS, history_size=20,
                                    line_search_fn="strong_wolfe")

            def closure(translator: torch.nn.Linear = translator, x: torch.Tensor = x,
                        opt: torch.optim.LBFGS = opt) -> torch.Tensor:
                opt.zero_grad(set_to_none=True)
                log_q = torch.log_softmax(model.unembed(translator(x)).float(), -1)
                loss = torch.nn.functional.kl_div(log_q, target, reduction="batchmean")
                loss.backward()
                return loss

            opt.step(closure)
            with torch.no_grad():
                q = torch.softmax(model.unembed(translator(x_held)).double().cpu(), -1)
            kl.append(float(kl_bits(held.posterior, q).mean()))
            herr.append(float((entropy_bits(q) - held.entropy).abs().mean()))
    finally:
        for p, flag in frozen:
            p.requires_grad_(flag)
    q_out = torch.softmax(held.logits, -1)
    kl.append(float(kl_bits(held.posterior, q_out).mean()))
    herr.append(float((entropy_bits(q_out) - held.entropy).abs().mean()))
    return {"kl_by_layer": kl, "entropy_error_by_layer": herr, "n_fit_episodes": half,
            "n_held_out_episodes": len(episodes) - half, "max_iterations": TUNED_STEPS}


@needs("blocks.{l}.hook_resid_pre", "blocks.{l}.hook_resid_post", "unembed()")
def bayes_lens(model: torch.nn.Module, task: Task, n: int = 256, seed: int = GEOMETRY_SEED,
               episodes: Episodes | None = None, untrained: torch.nn.Module | None = None) -> dict[str, Any]:
    """The KL and entropy error to the exact posterior of every layer's readout (see the module
    docstring), on at most ``n`` episodes, beside the untrained model's."""
    ep = episodes_for(task, n, seed, episodes)
    ep = ep[: min(n, len(ep))]
    trained = _lens(model, ep)
    kl = trained["kl_by_layer"]
    final = kl[-1]
    flat = kl[0] <= 2 * final
    formation = None if flat else next((i for i, v in enumerate(kl) if v <= 2 * final), None)
    out: dict[str, Any] = {
        "applicable": True,
        "n_episodes": len(ep),
        **trained,
        "summary": {
            "kl_by_layer": kl,
            "entropy_error_by_layer": trained["entropy_error_by_layer"],
            "final_kl": final,
            "final_kl_vs_output": abs(final - trained["output_kl"]),
            "formation_layer": trained["layers"][formation] if formation is not None else None,
            "flat": flat,
        },
    }
    if untrained is not None and not missing(untrained, bayes_lens.requires):
        null = _lens(untrained, ep)
        out["untrained"] = null
        out["summary"]["kl_by_layer_untrained"] = null["kl_by_layer"]
    if len(ep) >= 4:
        with torch.enable_grad():
            out["tuned"] = _tuned_lens(model, ep, seed)
        out["summary"]["tuned_kl_by_layer"] = out["tuned"]["kl_by_layer"]
    return out


def bayes_lens_figure(result: dict[str, Any], path: Path) -> Path:
    """KL to the posterior of each layer's readout, trained beside untrained (log scale)."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"Bayes lens: {result.get('reason', 'not applicable')}", path)
    fig, ax = _plot.figure(w=4.8, h=3.4)
    a = ax[0, 0]
    x = list(range(len(result["layers"])))
    drawn = [result["kl_by_layer"]]
    a.plot(x, loggable(drawn[-1]), "o-", label="trained (logit lens)")
    if "tuned" in result:
        drawn.append(result["tuned"]["kl_by_layer"])
        a.plot(x, loggable(drawn[-1]), "^-", color="C2", label="trained (tuned lens, held out)")
    if "untrained" in result:
        drawn.append(result["untrained"]["kl_by_layer"])
        a.plot(x, loggable(drawn[-1]), "s--", color="0.5", label="untrained")
    a.set_xticks(x, result["layers"])
    log_scale(a, *drawn)
    a.set_ylabel("KL(posterior ‖ layer readout), bits")
    a.set_title("Bayes lens: where in depth the posterior forms", fontsize=9)
    a.legend(fontsize=7)
    return _plot.save(fig, path)


def _interpret(r: dict[str, Any]) -> list[Reading]:
    """B10 through the model's own readout: the stream before the last block already holds the posterior."""
    s = r["summary"]
    kl, null = s["kl_by_layer"], s.get("kl_by_layer_untrained")
    if len(kl) < 3 or not null:
        return []
    before, base = kl[-2], null[-2]
    where = ("no layer: the lens is flat, the embedding already reads within 2× of the output" if s.get("flat")
             else f"first within 2× of the output: {s['formation_layer']}")
    return [Reading("bayes_lens.kl_by_layer[-2]", before, "untrained model", base,
                    "below half the untrained model's is consistent", before < 0.5 * base, "B10",
                    f"the stream entering the last block, read through the final norm and head, is {before:.3g} bits "
                    f"from the posterior (output {kl[-1]:.3g}; {where})")]


register(Diagnostic("bayes_lens", bayes_lens, bayes_lens_figure, _interpret, untrained=True, order=65, version=4,
                    claims=("B10",)))
