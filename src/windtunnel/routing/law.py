r"""Paper II's routing law, computed from one forward/backward pass and checked against autograd.

For one attention head (Paper II, arXiv 2512.22473, §3): scores :math:`s_{ij}`, weights
:math:`\alpha_{ij} = \mathrm{softmax}_{j \le i}(s_{ij})`, output :math:`o_i = \sum_j \alpha_{ij} v_j`
and the upstream gradient :math:`u_i = \partial L / \partial o_i`.  With the *compatibility*
:math:`b_{ij} = u_i^\top v_j`,

.. math::

    \frac{\partial L}{\partial s_{ij}} = \alpha_{ij}\,\bigl(b_{ij} - \mathbb{E}_{\alpha_i}[b]\bigr),
    \qquad \mathbb{E}_{\alpha_i}[b] = \sum_k \alpha_{ik} b_{ik}
    \qquad\text{(the advantage: routing, the E-step)}

.. math::

    \frac{\partial L}{\partial v_j} = \sum_i \alpha_{ij}\, u_i,
    \qquad \Delta v_j = -\eta \sum_i \alpha_{ij} u_i
    \qquad\text{(responsibility-weighted values, the M-step)}

Under gradient descent a score rises when its value is *below* the attention-weighted mean of
:math:`b` (``v_j`` points along :math:`-u_i`, so attending more lowers the loss).

``L`` is the mean cross-entropy over the scored positions against ``episodes.targets`` (what
``training.loss_fn`` computes for hard targets).  The law only needs the attention pattern, the
values and the gradient at the head's output (``hook_pattern``, ``hook_v``, ``hook_z``); the
reference gradients come from autograd at ``hook_scores`` and ``hook_v``, so the check is
independent of the formula.  Works for every model with these hooks (the transformer, the single
attention layer), in any dtype: in float64 the two agree to ~1e-12.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..errors import InvalidValue, is_int
from ..tasks.base import Episodes

IGNORE = -100


@dataclass
class HeadGradients:
    """Everything the law says about one head on one batch (tensors detached, float64 where derived).

    ``pattern [B,T,T]`` :math:`\\alpha`; ``values [B,T,d]`` :math:`v`; ``upstream [B,T,d]`` :math:`u`;
    ``compatibility [B,T,T]`` :math:`b` (zero above the diagonal); ``score_grad [B,T,T]`` the law's
    :math:`\\partial L/\\partial s`; ``value_grad [B,T,d]`` the law's :math:`\\partial L/\\partial v`;
    ``score_grad_autograd``, ``value_grad_autograd`` the same from autograd; ``loss`` the scalar L.
    """

    layer: int
    head: int
    loss: float
    pattern: torch.Tensor
    values: torch.Tensor
    upstream: torch.Tensor
    compatibility: torch.Tensor
    score_grad: torch.Tensor
    value_grad: torch.Tensor
    score_grad_autograd: torch.Tensor
    value_grad_autograd: torch.Tensor

    @property
    def score_rel_error(self) -> float:
        """``max |law − autograd| / max |autograd|`` for the score gradient."""
        return _rel(self.score_grad, self.score_grad_autograd)

    @property
    def value_rel_error(self) -> float:
        """``max |law − autograd| / max |autograd|`` for the value gradient."""
        return _rel(self.value_grad, self.value_grad_autograd)

    def summary(self) -> dict[str, Any]:
        """JSON-able statistics: the check, and how the gradient splits between routing and values.

        ``advantage_positive_share``: among attended pairs (``α > 1e-6``), the share with
        ``b_ij > E[b]`` (their scores fall under gradient descent); ``routing_grad_norm`` /
        ``value_grad_norm``: Frobenius norms of ∂L/∂s and ∂L/∂v (the two timescales' drives).
        """
        attended = self.pattern > 1e-6
        adv = self.compatibility - (self.pattern * self.compatibility).sum(-1, keepdim=True)
        return {
            "layer": self.layer,
            "head": self.head,
            "loss": self.loss,
            "score_rel_error": self.score_rel_error,
            "value_rel_error": self.value_rel_error,
            "advantage_positive_share": float((adv[attended] > 0).double().mean()) if attended.any() else None,
            "routing_grad_norm": float(self.score_grad.norm()),
            "value_grad_norm": float(self.value_grad.norm()),
        }


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = b.abs().max().item()
    return float((a - b).abs().max().item() / scale) if scale > 0 else float((a - b).abs().max().item())


def scored_cross_entropy(logits: torch.Tensor, episodes: Episodes) -> torch.Tensor:
    """Mean cross-entropy (nats) over the scored positions against ``episodes.targets``."""
    targets = episodes.targets.to(logits.device).clone()
    targets[~episodes.mask.to(logits.device)] = IGNORE
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE)


def _score_layers(names: list[str]) -> list[int]:
    """The layers with softmax attention heads: those that expose ``attn.hook_scores``."""
    return sorted({int(n.split(".")[1]) for n in names if n.startswith("blocks.") and n.endswith("attn.hook_scores")})


def _attention_names(model: torch.nn.Module, layer: int) -> dict[str, str]:
    names = model.hook_names() if hasattr(model, "hook_names") else []
    prefix = f"blocks.{layer}.attn."
    want = {k: prefix + f"hook_{k}" for k in ("scores", "pattern", "v", "z")}
    if not all(n in names for n in want.values()):
        arch = getattr(getattr(model, "config", None), "arch", type(model).__name__)
        layers = _score_layers(names)  # a pattern alone (Mamba's effective attention) has no scores to route
        if not layers:
            raise InvalidValue(f"invalid model: architecture {arch!r} has no attention heads the routing law can read "
                               "(it reads blocks.{l}.attn.hook_scores, hook_pattern, hook_v and hook_z)")
        raise InvalidValue(f"invalid layer: must be one of {layers}, got {layer!r}")
    return want


def layer_gradients(model: torch.nn.Module, episodes: Episodes, layer: int,
                    heads: list[int] | None = None) -> list[HeadGradients]:
    """One forward/backward pass: the law's score and value gradients beside autograd's for the
    given heads of ``layer`` (default: all of them).

    The model is put in eval mode for the pass (no dropout) and restored; its parameters' ``.grad``
    are untouched (gradients are taken with ``torch.autograd.grad`` at the hooked activations).
    """
    names = _attention_names(model, layer)
    captured: dict[str, torch.Tensor] = {}

    def keep(t: torch.Tensor, name: str) -> None:
        captured[name] = t

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in episodes.inputs.items()}
    try:
        with torch.enable_grad(), model.hooks([(n, keep) for n in names.values()]):
            logits = model(**inputs)
            loss = scored_cross_entropy(logits, episodes)
            pattern, v, z, scores = (captured[names[k]] for k in ("pattern", "v", "z", "scores"))
            H = pattern.shape[1]
            heads = list(range(H)) if heads is None else heads
            for head in heads:
                if not is_int(head) or not 0 <= head < H:
                    raise InvalidValue(f"invalid head: must be an integer in [0, {H - 1}], got {head!r}")
            g_z, g_s, g_v = torch.autograd.grad(loss, [z, scores, v])
    finally:
        model.train(was_training)
    causal = torch.ones(pattern.shape[-1], pattern.shape[-1], dtype=torch.bool, device=pattern.device).tril()
    out = []
    for head in heads:
        a = pattern[:, head].detach()  # [B,T,T]
        vv = v[:, :, head].detach()  # [B,T,d]
        u = g_z[:, :, head].detach()  # [B,T,d]: ∂L/∂o_i
        b = (u @ vv.transpose(-1, -2)) * causal  # b_ij = u_i · v_j (j ≤ i)
        out.append(HeadGradients(
            layer=layer, head=head, loss=float(loss.detach()),
            pattern=a, values=vv, upstream=u, compatibility=b,
            score_grad=a * (b - (a * b).sum(-1, keepdim=True)),
            value_grad=a.transpose(-1, -2) @ u,  # Σ_i α_ij u_i
            score_grad_autograd=(g_s[:, head] * causal).detach(), value_grad_autograd=g_v[:, :, head].detach(),
        ))
    return out


def head_gradients(model: torch.nn.Module, episodes: Episodes, layer: int, head: int) -> HeadGradients:
    """:func:`layer_gradients` for one head."""
    return layer_gradients(model, episodes, layer, [head])[0]


def score_gradients(model: torch.nn.Module, episodes: Episodes, layer: int, head: int) -> torch.Tensor:
    r"""``[B, T, T]``: :math:`\partial L/\partial s_{ij} = \alpha_{ij}(b_{ij} - \mathbb{E}_{\alpha_i}[b])` for one head.

    ``L`` is the mean cross-entropy over the scored positions against ``episodes.targets``;
    ``s`` the head's pre-softmax scores (zero above the diagonal, where the causal mask removes them).
    Computed by the law from the pattern, the values and the upstream gradient, not by autograd
    (:func:`head_gradients` returns both).
    """
    return head_gradients(model, episodes, layer, head).score_grad


def value_gradients(model: torch.nn.Module, episodes: Episodes, layer: int, head: int) -> torch.Tensor:
    r"""``[B, T, d]``: :math:`\partial L/\partial v_j = \sum_i \alpha_{ij} u_i` for one head (the law's M-step drive)."""
    return head_gradients(model, episodes, layer, head).value_grad


def check_all_heads(model: torch.nn.Module, episodes: Episodes) -> list[dict[str, Any]]:
    """:meth:`HeadGradients.summary` for every attention head of the model, layer by layer."""
    names = model.hook_names() if hasattr(model, "hook_names") else []
    layers = _score_layers(names)
    if not layers:
        _attention_names(model, 0)  # raises the "no attention heads" message
    return [g.summary() for layer in layers for g in layer_gradients(model, episodes, layer)]  # one pass a layer
