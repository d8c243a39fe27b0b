"""Paper II's EM reading of attention: weights as soft responsibilities (E-step), values as
prototypes (M-step) (arXiv 2512.22473, abstract).

Measured where the exact posterior puts its mass on a hypothesis that sits in the context — the
answer of a repeated key on the sawtooth (``repeat_answer``), the queried pair's stored value in
recall (``stored_value``): there the exact responsibility of that position is 1.

* **Responsibilities** — per layer, the largest over heads of the mean attention mass a scored
  query puts on that region (where it is defined).  Nulls: uniform causal attention
  (``|R_t|/(t+1)``) and the untrained model.
* **Prototypes** — a value vector is a prototype if what it writes points at its own hypothesis:
  for every position holding a hypothesis token (``Task.hypothesis_tokens``), head ``h``'s write
  ``W_O^h v_j`` read through the final norm's gain and the output head (direct logit attribution);
  ``prototype_accuracy`` is the share of those positions whose largest direct logit is the class of
  their own token.  Null: chance, ``1 / n_classes``, and the untrained model.
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

__all__ = ["em_reading", "em_reading_figure", "SUPPORT_REGIONS"]

SUPPORT_REGIONS = ("repeat_answer", "stored_value")
"""Task regions that hold the exact posterior's whole mass (a one-hot posterior on a hypothesis in context)."""


def _stats(model: torch.nn.Module, task: Task, ep: Episodes, region: str, hyp: list[int], chunk: int = 64) -> dict[str, Any]:
    L = n_layers(model)
    names = [f"blocks.{l}.attn.hook_{x}" for l in range(L) for x in ("pattern", "v")]
    dev = device_of(model)
    cls_of = torch.full((max(hyp) + 1,), -1, dtype=torch.long)
    cls_of[torch.tensor(hyp)] = torch.arange(len(hyp))
    readout = (model.head.weight.detach().double() * model.norm.weight.detach().double()[None]).cpu()  # [C, d]
    mass: torch.Tensor | None = None
    hits: torch.Tensor | None = None
    uniform = 0.0
    n_q = 0
    n_v = 0
    with eval_mode(model):
        for part in ep.chunks(chunk):
            _, cache = model.run_with_cache(**inputs_on(part, dev), names=names)
            R = attention_regions(task, part.tokens)[region]  # [B,T,T]
            b_idx, t_idx = part.mask.nonzero(as_tuple=True)
            Rq = R[b_idx, t_idx]  # [Q,T]
            ok = Rq.any(-1)
            b_q, t_q, Rq = b_idx[ok], t_idx[ok], Rq[ok].double()
            n_q += len(b_q)
            uniform += float((Rq.sum(-1) / (t_q.double() + 1)).sum())
            tok = part.tokens
            is_hyp = (tok <= cls_of.numel() - 1) & (cls_of[tok.clamp(max=cls_of.numel() - 1)] >= 0)
            pb, pt = is_hyp.nonzero(as_tuple=True)
            target = cls_of[tok[pb, pt]]
            n_v += len(pb)
            for l in range(L):
                P = cache[f"blocks.{l}.attn.hook_pattern"].double().cpu()  # [B,H,T,T]
                H = P.shape[1]
                if mass is None or hits is None:
                    mass = torch.zeros(L, H, dtype=torch.float64)
                    hits = torch.zeros(L, H, dtype=torch.float64)
                mass[l] += (P[b_q, :, t_q] * Rq[:, None, :]).sum(-1).sum(0)
                V = cache[f"blocks.{l}.attn.hook_v"].double().cpu()[pb, pt]  # [N,H,dh]
                W = model.blocks[l].attn.out_proj.weight.detach().double().cpu()
                W = W.view(W.shape[0], H, V.shape[-1])  # [d,H,dh]: the columns that head h's z meets
                write = torch.einsum("dhe,nhe->nhd", W, V)  # [N,H,d]
                logits = write @ readout.T  # [N,H,C]
                hits[l] += (logits.argmax(-1) == target[:, None]).double().sum(0)
    if mass is None or hits is None:  # no episodes
        mass = hits = torch.zeros(L, 0, dtype=torch.float64)
    return {"responsibility": (mass / max(n_q, 1)).tolist(), "uniform_responsibility": uniform / max(n_q, 1),
            "prototype_accuracy": (hits / max(n_v, 1)).tolist(), "n_queries": n_q, "n_values": n_v}


@needs("blocks.{l}.attn.hook_pattern", "blocks.{l}.attn.hook_v", "blocks.{l}.attn.out_proj", "norm", "head")
def em_reading(model: torch.nn.Module, task: Task, *, untrained: torch.nn.Module | None = None, n: int = 256,
               seed: int = GEOMETRY_SEED, episodes: Episodes | None = None) -> dict[str, Any]:
    """Responsibilities and prototypes per layer and head (module docstring), with their nulls."""
    ep = episodes_for(task, n, seed, episodes)
    regions = attention_regions(task, ep.tokens)
    region = next((r for r in SUPPORT_REGIONS if r in regions and bool(regions[r].any())), None)
    hyp = task.hypothesis_tokens() if hasattr(task, "hypothesis_tokens") else None
    if region is None or not hyp:
        return not_applicable(f"task {getattr(task, 'name', '?')!r} never puts the posterior's mass on a hypothesis "
                              "in its context (no repeated-key answer or stored value)")
    tokens, _ = hyp
    st = _stats(model, task, ep, region, list(tokens))
    out: dict[str, Any] = {
        "applicable": True, "definition": "responsibility: attention mass on the region holding the exact posterior's "
        "support; prototype: share of hypothesis-token positions whose head write W_O v, read through the final norm "
        "gain and the head, favours its own class", "region": region, **st,
        "summary": {"region": region,
                    "responsibility_by_layer": [max(r) for r in st["responsibility"]],
                    "uniform_responsibility": st["uniform_responsibility"],
                    "prototype_accuracy_by_layer": [max(r) for r in st["prototype_accuracy"]],
                    "chance": 1.0 / task.n_classes}}
    if untrained is not None:
        u = _stats(untrained, task, ep, region, list(tokens))
        out["untrained"] = u
        out["summary"]["untrained_responsibility_by_layer"] = [max(r) for r in u["responsibility"]]
        out["summary"]["untrained_prototype_accuracy_by_layer"] = [max(r) for r in u["prototype_accuracy"]]
    return clean(out)


def em_reading_figure(result: dict[str, Any], path: str | Path) -> Path:
    s = result["summary"]
    fig, ax = _plot.figure(w=5.2, h=3.4)
    a = ax[0, 0]
    L = len(s["responsibility_by_layer"])
    a.plot(range(L), s["responsibility_by_layer"], "o-", label="responsibility (best head)")
    a.plot(range(L), s["prototype_accuracy_by_layer"], "s-", label="prototype accuracy (best head)")
    if "untrained_responsibility_by_layer" in s:
        a.plot(range(L), s["untrained_responsibility_by_layer"], "x:", color="grey", label="untrained")
        a.plot(range(L), s["untrained_prototype_accuracy_by_layer"], "+:", color="grey")
    a.axhline(s["uniform_responsibility"], color="C0", lw=0.8, ls="--", label="uniform attention")
    a.axhline(s["chance"], color="C1", lw=0.8, ls="--", label="chance")
    a.set_xlabel("layer")
    a.set_ylim(0, 1.05)
    a.set_title(f"EM reading on {s['region']}", fontsize=9)
    a.legend(fontsize=6)
    return _plot.save(fig, path)


RESPONSIBILITY = 0.5
"""A head reads as a responsibility when at least this much of its attention sits on the posterior's support."""


def _interpret(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    resp, proto = s["responsibility_by_layer"], s["prototype_accuracy_by_layer"]
    best = max(range(len(resp)), key=lambda l: resp[l])
    ok = resp[best] >= RESPONSIBILITY and max(proto) >= 0.5 and (
        "untrained_responsibility_by_layer" not in s or resp[best] > max(s["untrained_responsibility_by_layer"]))
    return [Reading("em_reading.responsibility_by_layer", resp[best], "uniform attention", s["uniform_responsibility"],
                    f"≥ {RESPONSIBILITY} on the posterior's support with values that write their own class (≥ 0.5) is "
                    "consistent", ok, "C9",
                    f"layer {best}'s best head puts {resp[best]:.2f} of its attention on {s['region']}; the best value "
                    f"write favours its own class on {max(proto):.0%} of hypothesis positions (chance {s['chance']:.0%})")]


register(Diagnostic("em_reading", em_reading, em_reading_figure, _interpret, untrained=True, order=68, claims=("C9",)))
