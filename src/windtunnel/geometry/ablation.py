"""Head and layer ablations with paired bootstrap intervals and paired sign-flip p-values (Paper I's
"Geometry and ablation"; the frame-head criterion of the authors' released code is discussed below)."""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from ..evaluation import metrics as M
from ..evaluation.evaluate import predict
from ..evaluation.stats import sign_flip_p
from ..tasks.base import Episodes, Task
from . import _plot
from .registry import Diagnostic, Reading, needs, register
from ._common import GEOMETRY_SEED, ci, clean, device_of, episodes_for, eval_mode, inputs_on, n_layers, resample_weights
from ..errors import InvalidValue

__all__ = ["ablation_effects", "heads_per_layer", "zero_head", "head_ablation", "layer_ablation", "ablation_figure", "head_ablation_figure", "layer_ablation_figure"]

METRICS = ("entropy_mae", "kl")


def _per_sequence(logits: torch.Tensor, ep: Episodes) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per-sequence (sum over scored positions, count) of each metric."""
    res = M.compute(logits, ep)
    out = {}
    for m in METRICS:
        x = res["per_position"][m]
        ok = ~torch.isnan(x)
        out[m] = (torch.where(ok, x, torch.zeros_like(x)).sum(1), ok.double().sum(1))
    return out


def ablation_effects(model: torch.nn.Module, task: Task, ep: Episodes,
                     variants: list[tuple[dict[str, Any], Callable[[], AbstractContextManager]]],
                     n_boot: int, seed: int, metric: str) -> dict[str, Any]:
    r"""Each variant (a label and a context manager that ablates something) scored against the intact
    model on the same episodes: per variant and metric the ablated value, ``delta``, its paired
    bootstrap interval over sequences, ``fold = ablated / intact`` and ``p_value``, the two-sided paired
    sign-flip p-value of ``delta`` (:func:`windtunnel.evaluation.stats.sign_flip_p` on the per-sequence
    differences :math:`d_i = s^{abl}_i - s^{intact}_i` of the metric summed over the sequence's ``c_i`` scored
    positions, statistic :math:`\sum d_i / \sum c_i`: under "the ablation changes nothing" each sequence's
    difference is as likely to have either sign); the top variant by ``metric`` and its ratio to the runner-up.
    Shared by every ablation diagnostic."""
    base_logits = predict(model, ep)
    base = _per_sequence(base_logits, ep)
    W = resample_weights(len(ep), n_boot, seed)  # [R, B]

    def pooled(s: torch.Tensor, c: torch.Tensor) -> float:
        return float(s.sum() / c.sum())

    def boot(s: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return (W @ s) / (W @ c)

    base_vals = {m: pooled(*base[m]) for m in METRICS}
    base_boot = {m: boot(*base[m]) for m in METRICS}
    rows = []
    deltas_boot = []
    for info, ctx in variants:
        with ctx():
            logits = predict(model, ep)
        ab = _per_sequence(logits, ep)
        row = dict(info)
        for m in METRICS:
            v = pooled(*ab[m])
            db = boot(*ab[m]) - base_boot[m]  # paired: the same resampled sequences
            row[m] = {
                "ablated": v,
                "delta": v - base_vals[m],
                "delta_ci": ci(db),
                "p_value": sign_flip_p(ab[m][0] - base[m][0], base[m][1], seed=seed + 1),
                "fold": v / base_vals[m] if base_vals[m] > 0 else None,
            }
            if m == metric:
                deltas_boot.append(db)
        rows.append(row)
    out: dict[str, Any] = {
        "metric": metric,
        "baseline": {m: {"value": base_vals[m], "ci": ci(base_boot[m])} for m in METRICS},
        "n_sequences": len(ep),
        "n_boot": n_boot,
        "rows": rows,
    }
    if len(rows) >= 1:
        D = torch.stack(deltas_boot, 1)  # [R, variants]
        d = torch.tensor([r[metric]["delta"] for r in rows])
        order = torch.argsort(d, descending=True)
        top = int(order[0])
        out["top"] = top
        out["top_share"] = float((D.argmax(1) == top).double().mean())
        if len(rows) >= 2:
            second = int(order[1])
            out["runner_up"] = second
            out["ratio_to_runner_up"] = float(d[top] / d[second]) if d[second] > 0 else None
            Ds = torch.sort(D, dim=1, descending=True).values
            ok = Ds[:, 1] > 0
            out["ratio_to_runner_up_ci"] = ci(Ds[ok, 0] / Ds[ok, 1]) if ok.any() else [None, None]
    return out


def heads_per_layer(model: torch.nn.Module, ep: Episodes) -> list[int]:
    """The number of heads of each layer: the third axis of ``blocks.{l}.attn.hook_z`` ``[B, T, H, d_head]``
    on one episode."""
    names = [f"blocks.{l}.attn.hook_z" for l in range(n_layers(model))]
    with eval_mode(model):
        _, cache = model.run_with_cache(**inputs_on(ep[:1], device_of(model)), names=names)
    return [int(cache[name].shape[2]) for name in names]


@contextmanager
def zero_head(model: torch.nn.Module, layer: int, head: int) -> Iterator[torch.nn.Module]:
    """Inside the ``with`` block, head ``head``'s output ``z`` in layer ``layer`` (``blocks.{layer}.attn.hook_z``,
    ``[B, T, H, d_head]``, before the output projection) is set to 0."""

    def zero(z: torch.Tensor, _name: str) -> torch.Tensor:
        z = z.clone()
        z[:, :, head] = 0
        return z

    with model.hooks([(f"blocks.{layer}.attn.hook_z", zero)]):
        yield model


@needs("blocks.{l}.attn.hook_z")
def head_ablation(
    model: torch.nn.Module,
    task: Task,
    *,
    n: int = 256,
    seed: int = GEOMETRY_SEED,
    episodes: Episodes | None = None,
    n_boot: int = 1000,
    metric: str = "entropy_mae",
    layers: list[int] | None = None,
) -> dict[str, Any]:
    r"""Zero each attention head (:func:`zero_head`: its ``z`` at ``blocks.{l}.attn.hook_z`` is set to 0
    before ``W_O``, what ``Transformer.ablate_head`` does; no renormalisation, no mean ablation) and measure the change in ``entropy_mae`` and ``kl``
    (bits; :mod:`windtunnel.evaluation.metrics`, pooled over scored positions) on the same ``n`` episodes.

    ``delta = metric(ablated) − metric(intact)``; ``delta_ci`` is a paired 95% percentile bootstrap
    over sequences (the same resampled sequences for both); ``fold = ablated / intact``.  The
    *hypothesis-frame head* is the head with the largest ``delta`` of ``metric`` (Paper I's
    indispensability criterion; the authors' released analysis shows that the lowest-key-cosine criterion
    picks a different head), ``ratio_to_runner_up`` = its delta over the second largest (``None``
    when that is ≤ 0; 1 when two heads are interchangeable), with a bootstrap interval of the
    top-two ratio and ``top_share``, the fraction of resamples in which the same head is the top.

    **Null.**  An inert head has ``delta = 0``: the interval tests it; for the ratio, exchangeable
    heads give 1.  Models exposing ``blocks.{l}.attn.hook_z`` on every layer.
    """
    if metric not in METRICS:
        raise InvalidValue(f"invalid metric: must be one of {', '.join(METRICS)}")
    ep = episodes_for(task, n, seed, episodes)
    heads = heads_per_layer(model, ep)
    ls = list(range(len(heads))) if layers is None else layers
    variants = [({"layer": l, "head": h}, (lambda l=l, h=h: zero_head(model, l, h))) for l in ls for h in range(heads[l])]
    out = ablation_effects(model, task, ep, variants, n_boot, seed, metric)
    rows = out.pop("rows")
    out = {"applicable": True,
           "definition": "z of one head set to 0 before W_O; delta of pooled entropy_mae / KL(Bayes||model) in bits, "
                         "paired bootstrap over sequences", **out, "heads": rows}
    top = rows[out.pop("top")]
    out["hypothesis_frame_head"] = {"layer": top["layer"], "head": top["head"], "delta": top[metric]["delta"],
                                    "delta_ci": top[metric]["delta_ci"], "p_value": top[metric]["p_value"],
                                    "fold": top[metric]["fold"]}
    if "runner_up" in out:
        ru = rows[out.pop("runner_up")]
        out["runner_up_head"] = {"layer": ru["layer"], "head": ru["head"], "delta": ru[metric]["delta"]}
    out["summary"] = {
        "hypothesis_frame_head": f"L{top['layer']}H{top['head']}",
        "frame_head_delta": top[metric]["delta"],
        "frame_head_fold": top[metric]["fold"],
        "frame_head_p_value": top[metric]["p_value"],
        "ratio_to_runner_up": out.get("ratio_to_runner_up"),
        "top_share": out.get("top_share"),
        "baseline": out["baseline"][metric]["value"],
    }
    return clean(out)


@needs("bypass_layer()")
def layer_ablation(
    model: torch.nn.Module,
    task: Task,
    *,
    n: int = 256,
    seed: int = GEOMETRY_SEED,
    episodes: Episodes | None = None,
    n_boot: int = 1000,
    metric: str = "entropy_mae",
) -> dict[str, Any]:
    r"""Bypass each block (``model.bypass_layer``: the block returns its input, so the residual
    stream skips it) and measure the change in ``entropy_mae`` and ``kl`` as in :func:`head_ablation`
    (paired bootstrap, ``fold = ablated / intact``; Paper I claims > 10× per middle layer).
    ``min_fold`` is the smallest fold over layers.  Null: ``delta = 0``.  Every model that implements
    ``bypass_layer`` (each of this package's architectures built of blocks; a model of one's own through its
    ``blocks.{l}.hook_resid_pre`` and ``hook_resid_post``).
    """
    if metric not in METRICS:
        raise InvalidValue(f"invalid metric: must be one of {', '.join(METRICS)}")
    ep = episodes_for(task, n, seed, episodes)
    variants = [({"layer": l}, (lambda l=l: model.bypass_layer(l))) for l in range(n_layers(model))]
    out = ablation_effects(model, task, ep, variants, n_boot, seed, metric)
    rows = out.pop("rows")
    top = rows[out.pop("top")]
    out.pop("runner_up", None)
    folds = [r[metric]["fold"] for r in rows if r[metric]["fold"] is not None]
    out = {"applicable": True,
           "definition": "block l made the identity; delta of pooled entropy_mae / KL(Bayes||model) in bits, paired "
                         "bootstrap over sequences", **out, "layers": rows,
           "most_damaging_layer": top["layer"]}
    out["summary"] = {
        "most_damaging_layer": top["layer"],
        "max_fold": max(folds) if folds else None,
        "min_fold": min(folds) if folds else None,
        "fold_by_layer": [r[metric]["fold"] for r in rows],
        "p_value_by_layer": [r[metric]["p_value"] for r in rows],
        "baseline": out["baseline"][metric]["value"],
    }
    return clean(out)


def ablation_figure(result: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Bars of the change in each metric per ablated unit, with 95% paired-bootstrap intervals and each bar's
    paired sign-flip p-value above it (the count below 0.05 in the title)."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"ablation: {result.get('reason', 'not applicable')}", path)
    rows = result.get("heads") or result.get("layers")
    labels = [f"L{r['layer']}H{r['head']}" if "head" in r else f"L{r['layer']}" for r in rows]
    fig, axes = _plot.figure(2, 1, w=max(6.0, 0.28 * len(rows) + 2), h=2.8)
    for ax, m in zip(axes[:, 0], METRICS):
        d = [r[m]["delta"] for r in rows]
        lo = [r[m]["delta_ci"][0] for r in rows]
        hi = [r[m]["delta_ci"][1] for r in rows]
        err = [[max(0.0, a - b) if b is not None else 0 for a, b in zip(d, lo)],
               [max(0.0, b - a) if b is not None else 0 for a, b in zip(d, hi)]]
        colors = ["C3" if i == (result.get("most_damaging_layer") if "layers" in result else None) else "C0"
                  for i in range(len(rows))]
        if "heads" in result:
            fh = result["hypothesis_frame_head"]
            colors = ["C3" if (r["layer"], r["head"]) == (fh["layer"], fh["head"]) else f"C{r['layer'] % 2}"
                      for r in rows]
        ax.bar(range(len(rows)), d, yerr=err, color=colors, capsize=2)
        ax.axhline(0, color="k", lw=0.6)
        ps = [r[m].get("p_value") for r in rows]
        for i, (p, top) in enumerate(zip(ps, hi)):
            if p is not None and top is not None:
                ax.annotate(f"{p:.2g}", (i, max(d[i], top)), fontsize=5 if len(rows) > 12 else 6, ha="center",
                            va="bottom", rotation=90 if len(rows) > 12 else 0)
        ax.set_ylabel(f"Δ {m} (bits)")
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, rotation=90 if len(rows) > 12 else 0, fontsize=7)
        base = result["baseline"][m]["value"]
        n_sig = sum(1 for p in ps if p is not None and p < 0.05)
        ax.set_title(f"{title}: intact {m} {base:.3g} bits; {n_sig}/{len(rows)} at p < 0.05 (sign-flip p above "
                     "bars)", fontsize=8)
    return _plot.save(fig, path)


def head_ablation_figure(result: dict[str, Any], path: str | Path) -> Path:
    return ablation_figure(result, path, "head ablation (z = 0)")


def layer_ablation_figure(result: dict[str, Any], path: str | Path) -> Path:
    return ablation_figure(result, path, "layer ablation (block bypassed)")

RUNNER_UP_MARGIN = 1.5
"""A 'single frame head' needs its damage at least this many times the runner-up's."""


def _interpret_heads(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    fold, ratio = s.get("frame_head_fold"), s.get("ratio_to_runner_up")
    if fold is None:
        return []
    flags = []
    if ratio is not None and ratio < RUNNER_UP_MARGIN:
        flags.append(f"the runner-up head does {1 / ratio:.0%} of the top head's damage: no single frame head")
    consistent = fold >= 10 and not flags and str(s.get("hypothesis_frame_head", "")).startswith("L0")
    return [Reading("head_ablation.frame_head_fold", fold, "intact model", 1.0,
                    "≥ 10× from one layer-0 head, well ahead of the runner-up, is consistent", consistent, "B3",
                    f"ablating {s.get('hypothesis_frame_head')} multiplies the error by {fold:.3g}", tuple(flags))]


def _interpret_layers(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    lo, hi = s.get("min_fold"), s.get("max_fold")
    if lo is None:
        return []
    return [Reading("layer_ablation.min_fold", lo, "intact model", 1.0, "≥ 10× for every layer is consistent",
                    lo >= 10, "B5", f"the least damaging layer's bypass multiplies the error by {lo:.3g} (the most "
                    f"damaging, layer {s.get('most_damaging_layer')}, by {hi:.3g})")]


register(Diagnostic("head_ablation", head_ablation, head_ablation_figure, _interpret_heads, resamples=True, order=40,
                    version=2, claims=("B3", "B13")))
register(Diagnostic("layer_ablation", layer_ablation, layer_ablation_figure, _interpret_layers, resamples=True,
                    order=50, version=2, claims=("B5",)))
