"""Attention focusing with depth (Paper I's "progressive QK alignment")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..tasks.base import Episodes, Task
from . import _plot
from .registry import Diagnostic, Reading, needs, register
from ._common import GEOMETRY_SEED, clean, device_of, episodes_for, eval_mode, inputs_on, n_layers

__all__ = ["attention_focusing", "attention_focusing_figure", "attention_regions"]

_SELF = "the query position itself"


def attention_regions(task: Task, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Named key-position sets ``R[b, t, j]`` (bool ``[B,T,T]``, ``j <= t``) for each query ``t``.

    A region is *defined* at query ``(b, t)`` when it is non-empty there; statistics average over
    the scored queries where it is defined.  ``self`` (the query position) for every task, the rest
from the task's own anatomy (``Task.attention_regions``, described in ``Task.region_descriptions``).
    """
    B, T = tokens.shape
    return {"self": torch.eye(T, dtype=torch.bool)[None].expand(B, T, T), **task.attention_regions(tokens)}


def _pattern_stats(model: torch.nn.Module, task: Task, ep: Episodes, chunk: int) -> dict[str, Any]:
    """Sums over scored queries: per layer/head entropy and region masses, plus the uniform nulls."""
    L = n_layers(model)
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(L)]
    dev = device_of(model)
    ent = None
    mass: dict[str, torch.Tensor] = {}
    spread = None
    n_spread = 0
    counts: dict[str, int] = {}
    null_ent_sum = 0.0
    null_mass: dict[str, float] = {}
    n_q = 0
    with eval_mode(model):
        for part in ep.chunks(chunk):
            _, cache = model.run_with_cache(**inputs_on(part, dev), names=names)
            m = part.mask  # [B,T]
            b_idx, t_idx = m.nonzero(as_tuple=True)
            regions = attention_regions(task, part.tokens)
            n_q += len(t_idx)
            null_ent_sum += float(torch.log2(t_idx.double() + 1).sum())
            vals = regions.get("value_positions")
            for l, nm in enumerate(names):
                P = cache[nm].double().cpu()  # [B,H,T,T]
                rows = P[b_idx, :, t_idx]  # [Q,H,T]
                if ent is None:
                    H = rows.shape[1]
                    ent = torch.zeros(L, H, dtype=torch.float64)
                    spread = torch.zeros(L, H, dtype=torch.float64)
                h = -(torch.where(rows > 0, rows * torch.log2(rows.clamp_min(1e-300)), torch.zeros_like(rows))).sum(-1)
                ent[l] += h.sum(0)
                for rname, R in regions.items():
                    Rq = R[b_idx, t_idx]  # [Q,T]
                    defined = Rq.any(-1)
                    if rname not in mass:
                        mass[rname] = torch.zeros(L, rows.shape[1], dtype=torch.float64)
                    mass[rname][l] += (rows * Rq[:, None, :].double()).sum(-1)[defined].sum(0)
                    if l == 0:
                        counts[rname] = counts.get(rname, 0) + int(defined.sum())
                        null_mass[rname] = null_mass.get(rname, 0.0) + float(
                            (Rq.double().sum(-1) / (t_idx.double() + 1))[defined].sum())
                if vals is not None:  # how evenly the attention on shown values is spread
                    Vq = vals[b_idx, t_idx]  # [Q,T]
                    k = Vq.sum(-1)
                    ok = k >= 2
                    if ok.any():
                        r = rows[ok] * Vq[ok][:, None, :].double()
                        r = r / r.sum(-1, keepdim=True).clamp_min(1e-300)
                        hr = -(torch.where(r > 0, r * torch.log2(r.clamp_min(1e-300)), torch.zeros_like(r))).sum(-1)
                        spread[l] += (hr / torch.log2(k[ok].double())[:, None]).sum(0)
                        if l == 0:
                            n_spread += int(ok.sum())
    return {"ent": ent, "mass": mass, "counts": counts, "null_ent": null_ent_sum, "null_mass": null_mass,
            "n_q": n_q, "spread": spread, "n_spread": n_spread}


@needs("blocks.{l}.attn.hook_pattern")
def attention_focusing(
    model: torch.nn.Module,
    task: Task,
    *,
    untrained: torch.nn.Module | None = None,
    n: int = 256,
    seed: int = GEOMETRY_SEED,
    episodes: Episodes | None = None,
    chunk: int = 64,
) -> dict[str, Any]:
    r"""Attention entropy and attention mass on task-defined position sets, per layer and head,
    at the scored (query) positions.

    **Definitions.**  For head ``h`` of layer ``l`` and a scored query ``t`` with causal pattern
    :math:`A_{tj}` (:math:`j \le t`): entropy :math:`H = -\sum_j A_{tj}\log_2 A_{tj}` bits, averaged
    over scored queries (per head; layer values are means over heads, so there is no Jensen bias);
    ``normalised_entropy`` = mean ``H / log2(t+1)``.  Mass on a region ``R_t`` (:func:`attention_regions`)
    is :math:`\sum_{j\in R_t} A_{tj}`, averaged over the scored queries where ``R_t`` is non-empty.

    For bijection the still-feasible values are, by construction, *not in the context* for a new key
    (every value shown is ruled out), so focusing is measured as: ``value_positions`` — mass on the
    shown (eliminated) values, the set an elimination head must read — and ``value_spread``, the
    normalised entropy of that head's attention *restricted* to the shown values (1 = reads them
    all evenly; new keys with at least 2 shown values); with replacement, ``repeat_answer`` — mass
    on the value right after an earlier occurrence of the query key, the single feasible
    hypothesis of a repeated key.  HMM: mass on ``observations`` vs the header (``transition``,
    ``emission``, ``specials``) and on ``emission_column``, the ``S`` entries ``E[s, o_t]`` of the
    current symbol.  Recall: ``stored_key`` / ``stored_value`` of the queried pair.

    **Nulls.**  Uniform causal attention: entropy ``log2(t+1)`` and mass ``|R_t|/(t+1)``, averaged
    over the same queries; ``value_spread`` null is 1; the same statistics for ``untrained``.
    Any model whose layers expose ``blocks.{l}.attn.hook_pattern`` (our transformer, ``hf:``
    attention families, a model of one's own that names its layers' hooks so), and Mamba, whose layers
    expose their selective scan's *effective* attention there (:mod:`windtunnel.models.mamba`, Paper I's
    second architecture): one row per layer, ``Σ_i |α_i[t,s]|`` over the ``d_inner`` channels normalised
    per row, the share of the layer's absolute token-mixing weight on each position.  It is not a softmax
    (the scan's ``α`` is signed and unnormalised, and the skip ``D``, the gate and the short convolution
    lie outside it), and its one "head" is the entropy of the channels' mixture, not a mean over heads:
    compare its depth profile and its untrained null, not its bits with a transformer's.
    """
    ep = episodes_for(task, n, seed, episodes)
    st = _pattern_stats(model, task, ep, chunk)
    ust = _pattern_stats(untrained, task, ep, chunk) if untrained is not None else None
    L, H = st["ent"].shape
    nq = st["n_q"]
    regions = [r for r in st["mass"] if st["counts"].get(r, 0) > 0]

    def per_head(s: dict[str, Any], l: int, h: int) -> dict[str, Any]:
        d = {"entropy_bits": float(s["ent"][l, h]) / nq,
             "mass": {r: float(s["mass"][r][l, h]) / s["counts"][r] for r in regions}}
        if s["n_spread"]:
            d["value_spread"] = float(s["spread"][l, h]) / s["n_spread"]
        return d

    null_ent = st["null_ent"] / nq
    layers = []
    for l in range(L):
        heads = []
        for h in range(H):
            d = {"head": h, **per_head(st, l, h)}
            d["normalised_entropy"] = d["entropy_bits"] / null_ent if null_ent > 0 else None
            if ust is not None:
                d["untrained_entropy_bits"] = float(ust["ent"][l, h]) / nq
            heads.append(d)
        lay: dict[str, Any] = {
            "layer": l,
            "mean_entropy_bits": sum(hd["entropy_bits"] for hd in heads) / H,
            "min_entropy_bits": min(hd["entropy_bits"] for hd in heads),
            "mean_mass": {r: sum(hd["mass"][r] for hd in heads) / H for r in regions},
            "max_mass": {r: max(hd["mass"][r] for hd in heads) for r in regions},
            "heads": heads,
        }
        if st["n_spread"]:
            lay["mean_value_spread"] = sum(hd["value_spread"] for hd in heads) / H
        if ust is not None:
            lay["untrained_mean_entropy_bits"] = float(ust["ent"][l].mean()) / nq
            lay["untrained_mean_mass"] = {r: float(ust["mass"][r][l].mean()) / ust["counts"][r] for r in regions}
        layers.append(lay)
    summary: dict[str, Any] = {
        "entropy_by_layer": [lay["mean_entropy_bits"] for lay in layers],
        "uniform_entropy_bits": null_ent,
    }
    if ust is not None:
        summary["untrained_entropy_by_layer"] = [lay["untrained_mean_entropy_bits"] for lay in layers]
    main = task.main_region(regions)
    if main in regions:
        summary["main_region"] = main
        summary["main_region_max_mass_by_layer"] = [lay["max_mass"][main] for lay in layers]
        summary["main_region_uniform_mass"] = st["null_mass"][main] / st["counts"][main]
    return clean({
        "applicable": True,
        "definition": "entropy (bits) of each head's causal attention row at scored queries; mass on named "
                      "position sets; nulls: uniform causal attention",
        "regions": {r: _SELF if r == "self" else task.region_descriptions.get(r, r) for r in regions},
        "n_queries": nq,
        "region_queries": {r: st["counts"][r] for r in regions},
        "layers": layers,
        "null": {
            "uniform_entropy_bits": null_ent,
            "uniform_mass": {r: st["null_mass"][r] / st["counts"][r] for r in regions},
            "uniform_value_spread": 1.0 if st["n_spread"] else None,
        },
        "summary": summary,
    })


def attention_focusing_figure(result: dict[str, Any], path: str | Path) -> Path:
    """Left: attention entropy per layer (head mean, per-head dots) against uniform attention and the
    untrained model.  Right: the largest per-head mass on each region per layer against its uniform null."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"attention focusing: {result.get('reason', 'not applicable')}", path)
    fig, axes = _plot.figure(1, 2, w=5.6, h=4.0)
    ax = axes[0, 0]
    layers = result["layers"]
    xs = [lay["layer"] for lay in layers]
    for lay in layers:
        ax.scatter([lay["layer"]] * len(lay["heads"]), [h["entropy_bits"] for h in lay["heads"]],
                   color="C0", alpha=0.4, s=14)
    ax.plot(xs, [lay["mean_entropy_bits"] for lay in layers], "o-", color="C0", label="trained (mean over heads)")
    if "untrained_mean_entropy_bits" in layers[0]:
        ax.plot(xs, [lay["untrained_mean_entropy_bits"] for lay in layers], "x--", color="0.5", label="untrained")
    ax.axhline(result["null"]["uniform_entropy_bits"], color="C3", ls="--", label="uniform causal")
    ax.set_xlabel("layer")
    ax.set_ylabel("attention entropy at scored queries (bits)")
    ax.set_xticks(xs)
    ax.legend(fontsize=8)
    ax.set_title("Focusing with depth")
    ax = axes[0, 1]
    for i, r in enumerate(result["regions"]):
        if r == "self":
            continue
        ax.plot(xs, [lay["max_mass"][r] for lay in layers], "o-", color=f"C{i % 10}", label=f"{r} (best head)")
        ax.axhline(result["null"]["uniform_mass"][r], color=f"C{i % 10}", ls=":", lw=1)
    ax.set_xlabel("layer")
    ax.set_ylabel("attention mass (dotted: uniform null)")
    ax.set_xticks(xs)
    ax.set_ylim(0, 1.02)
    if ax.get_legend_handles_labels()[0]:  # a task without regions (Mess3) has nothing to label
        ax.legend(fontsize=7)
    ax.set_title("Mass on task-defined positions")
    return _plot.save(fig, path)

def _interpret(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    ent, un = s.get("entropy_by_layer"), s.get("untrained_entropy_by_layer")
    if not ent or ent[0] is None or ent[-1] is None:
        return []
    drop = 1 - ent[-1] / ent[0] if ent[0] > 0 else None
    consistent = ent[-1] < ent[0] and (un is None or un[-1] is None or ent[-1] < un[-1])
    flags = ("one layer: no depth to focus over",) if len(ent) < 2 else ()
    meaning = (f"attention entropy falls {drop:.0%} from the first layer to the last: it focuses with depth"
               if consistent and drop is not None else "attention does not focus with depth")
    return [Reading("attention_focusing.entropy_by_layer[-1]", ent[-1], "first layer", ent[0],
                    "lower than the first layer and the untrained model is consistent",
                    None if flags else consistent, "B6", meaning, flags)]


register(Diagnostic("attention_focusing", attention_focusing, attention_focusing_figure, _interpret, untrained=True,
                    order=20, claims=("B6",)))
