"""Query–key alignment by layer (Paper I v1: "progressive query–key alignment").

Attention focusing (:mod:`windtunnel.geometry.attention`) measures where the softmax puts its mass;
this measures the geometry underneath it: how much more a query vector points at the keys of the
task's relevant positions than at the keys of the rest of its context.  For a scored query ``t``
of head ``h``, with ``R_t`` the task's main region (``Task.main_region``: the shown values for
bijection, the earlier answer of a repeated key on the sawtooth, the stored value for recall, the
emission column of the current symbol for HMM)::

    contrast_t = mean_{j in R_t} cos(q_t, k_j)  -  mean_{j < t} cos(q_t, k_j)

averaged over the scored queries where ``R_t`` is non-empty.  0 means the query does not single out
the region (the null for a head that ignores it); alignment that grows with depth is the paper's
"progressive" alignment.  The same statistic of the untrained model is the second null.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..tasks.base import Episodes, Task
from . import _plot
from ._common import GEOMETRY_SEED, clean, device_of, episodes_for, eval_mode, inputs_on, n_layers, not_applicable
from .attention import attention_regions
from .registry import Diagnostic, Reading, needs, register

__all__ = ["qk_alignment", "qk_alignment_figure"]


def _contrast(model: torch.nn.Module, task: Task, ep: Episodes, region: str, chunk: int) -> torch.Tensor | None:
    """``[L, H]`` mean contrast over scored queries where ``region`` is defined (``None``: never defined)."""
    L = n_layers(model)
    names = [f"blocks.{l}.attn.hook_{x}" for l in range(L) for x in ("q", "k")]
    dev = device_of(model)
    total, count = None, 0
    with eval_mode(model):
        for part in ep.chunks(chunk):
            _, cache = model.run_with_cache(**inputs_on(part, dev), names=names)
            regions = attention_regions(task, part.tokens)
            if region not in regions:
                return None
            b_idx, t_idx = part.mask.nonzero(as_tuple=True)
            Rq = regions[region][b_idx, t_idx]  # [Q,T]
            T = part.tokens.shape[1]
            earlier = torch.arange(T)[None, :] < t_idx[:, None]  # [Q,T]
            ok = Rq.any(-1) & earlier.any(-1)
            if not ok.any():
                continue
            b_idx, t_idx, Rq, earlier = b_idx[ok], t_idx[ok], Rq[ok].double(), earlier[ok].double()
            rows = []
            for l in range(L):
                q = cache[f"blocks.{l}.attn.hook_q"].double().cpu()[b_idx, t_idx]  # [Q,H,dh]
                k = cache[f"blocks.{l}.attn.hook_k"].double().cpu()[b_idx]  # [Q,T,H,dh]
                q = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-30)
                k = k / k.norm(dim=-1, keepdim=True).clamp_min(1e-30)
                cos = torch.einsum("qhd,qthd->qht", q, k)  # [Q,H,T]
                in_r = (cos * Rq[:, None]).sum(-1) / Rq.sum(-1)[:, None]
                all_e = (cos * earlier[:, None]).sum(-1) / earlier.sum(-1)[:, None]
                rows.append((in_r - all_e).sum(0))  # [H]
            s = torch.stack(rows)  # [L,H]
            total = s if total is None else total + s
            count += len(b_idx)
    return None if total is None else total / count


@needs("blocks.{l}.attn.hook_q", "blocks.{l}.attn.hook_k")
def qk_alignment(model: torch.nn.Module, task: Task, *, untrained: torch.nn.Module | None = None, n: int = 256,
                 seed: int = GEOMETRY_SEED, episodes: Episodes | None = None, chunk: int = 64) -> dict[str, Any]:
    r"""Per layer and head, the contrast :math:`\overline{\cos}(q_t, k_{R_t}) - \overline{\cos}(q_t, k_{j<t})`
    on the task's main region (module docstring); ``alignment_by_layer`` is the largest over heads.
    Nulls: 0 (a query blind to the region) and the untrained model.  Models exposing
    ``blocks.{l}.attn.hook_q`` and ``hook_k``."""
    ep = episodes_for(task, n, seed, episodes)
    regions = attention_regions(task, ep.tokens[:2])
    region = task.main_region(regions) if hasattr(task, "main_region") else None
    if region is None or region == "self":
        return not_applicable(f"task {getattr(task, 'name', '?')!r} names no main attention region")
    C = _contrast(model, task, ep, region, chunk)
    if C is None:
        return not_applicable(f"the region {region!r} is empty at every scored query")
    out: dict[str, Any] = {
        "applicable": True,
        "definition": "mean cos(q_t, k_j) over j in the main region minus over all j < t, at scored queries where "
                      "the region is non-empty; per layer and head",
        "region": region,
        "by_layer_head": C.tolist(),
        "summary": {"region": region, "alignment_by_layer": C.max(1).values.tolist(),
                    "mean_alignment_by_layer": C.mean(1).tolist()},
    }
    if untrained is not None:
        U = _contrast(untrained, task, ep, region, chunk)
        if U is not None:
            out["untrained_by_layer_head"] = U.tolist()
            out["summary"]["untrained_alignment_by_layer"] = U.max(1).values.tolist()
    return clean(out)


def qk_alignment_figure(result: dict[str, Any], path: str | Path) -> Path:
    import matplotlib.pyplot as plt

    s = result["summary"]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    L = len(s["alignment_by_layer"])
    ax.plot(range(L), s["alignment_by_layer"], "o-", label="trained (best head)")
    ax.plot(range(L), s["mean_alignment_by_layer"], "s--", label="trained (mean over heads)")
    if "untrained_alignment_by_layer" in s:
        ax.plot(range(L), s["untrained_alignment_by_layer"], "x:", color="grey", label="untrained (best head)")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xlabel("layer")
    ax.set_ylabel("cos contrast")
    ax.set_title(f"query–key alignment with {s['region']}", fontsize=9)
    ax.legend(fontsize=7)
    return _plot.save(fig, path)


def _interpret(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    a, u = s["alignment_by_layer"], s.get("untrained_alignment_by_layer")
    flags = ("one layer: no depth to compare",) if len(a) < 2 else ()
    consistent = None if flags else (a[-1] > a[0] and a[-1] > 0 and (u is None or a[-1] > u[-1]))
    return [Reading("qk_alignment.alignment_by_layer[-1]", a[-1], "first layer", a[0],
                    "higher than the first layer, above 0 and above the untrained model is consistent", consistent,
                    "B6", f"queries single out the keys of {s['region']} by a cosine margin of {a[0]:.3g} in layer 0 "
                    f"and {a[-1]:.3g} in the last layer", flags)]


register(Diagnostic("qk_alignment", qk_alignment, qk_alignment_figure, _interpret, untrained=True, order=25,
                    claims=("B6",)))
