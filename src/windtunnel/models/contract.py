"""The contract every model from outside the registry keeps (a user's factory, a Hugging Face family):
logits of shape ``[B,T,C]``, finite at initialisation, and causal."""

from __future__ import annotations

from typing import Any

import torch

from .base import WindTunnelModel
from ..errors import InvalidValue


def check_contract(model: WindTunnelModel, task: Any) -> None:
    """Output shape ``[B,T,C]``, finiteness and causality of a model from outside the registry, on
    two sampled episodes: the second half of the inputs is resampled and the first half's logits
    must not move.  ``InvalidValue`` naming the broken promise."""
    name = model.config.arch
    ep = task.sample(2, seed=0)
    other = task.sample(2, seed=1)
    T = ep.tokens.shape[1]
    cut = max(1, T // 2)
    tokens = torch.cat([ep.tokens[:, :cut], other.tokens[:, cut:]], dim=1)
    features = None
    if ep.features is not None and other.features is not None:
        features = torch.cat([ep.features[:, :cut], other.features[:, cut:]], dim=1)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            a = model(ep.tokens, ep.features)
            b = model(tokens, features)
    except Exception as exc:  # the user's forward failed on the task's own inputs
        raise InvalidValue(f"invalid arch {name!r}: forward on the task's inputs failed: {type(exc).__name__}: {exc}") from None
    finally:
        model.train(was_training)
    want = (2, T, task.n_classes)
    if not isinstance(a, torch.Tensor) or tuple(a.shape) != want:
        got = tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__
        raise InvalidValue(f"invalid arch {name!r}: the model must return logits of shape [B,T,C] = {list(want)}, got {got}")
    if not torch.isfinite(a).all():
        raise InvalidValue(f"invalid arch {name!r}: the model returned non-finite logits at initialisation")
    scale = a[:, :cut].abs().max().clamp_min(1.0)
    if ((a[:, :cut] - b[:, :cut]).abs().max() > 1e-4 * scale).item():
        raise InvalidValue(
            f"invalid arch {name!r}: the model is not causal (logits before position {cut} changed when only "
            "later inputs changed)"
        )
