"""Shared machinery of the geometric diagnostics: what a model exposes (layers, hooks, device), the
episodes they read, activations at the scored positions, the bootstrap interval and JSON cleaning.
Everything is float64 on CPU once collected; models run on their own device in eval mode under
``torch.no_grad`` (their train/eval flags are restored).  The read-outs fitted to those activations
(ridge, PCA, k-means) are in :mod:`windtunnel.geometry.readouts`.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from ..run import checkpoint as ckpt

from ..evaluation.stats import pearson, rankdata, spearman  # noqa: F401  (shared with llm through stats)

from ..tasks.base import Episodes, Task, entropy_bits
from ..errors import InvalidValue
from ..evaluation.stats import finite, finite_ci, json_safe as clean, resample_weights  # noqa: F401 (the diagnostics import them from here)

GEOMETRY_SEED = 2**62 + 2**40
"""Episode seed of the diagnostics: below 2^63, so disjoint from every training and in-training
evaluation stream (hashed 64-bit seeds with the top bit set), and far from the small user-facing seeds
(the evaluation's ``EVAL_SEED``, ``windtunnel tasks show --seed``)."""




def not_applicable(reason: str) -> dict[str, Any]:
    """The entry a diagnostic returns when the model or task lacks the part it measures."""
    return {"applicable": False, "reason": reason}


def arch_of(model: torch.nn.Module) -> str:
    cfg = getattr(model, "config", None)
    return str(getattr(cfg, "arch", type(model).__name__.lower()))


def n_layers(model: torch.nn.Module) -> int:
    blocks = getattr(model, "blocks", None)
    return len(blocks) if blocks is not None else 0


def has_hooks(model: torch.nn.Module, suffix: str) -> bool:
    names = model.hook_names() if hasattr(model, "hook_names") else []
    return any(n.endswith(suffix) for n in names)


def has_layer_hooks(model: torch.nn.Module, suffix: str) -> bool:
    """Whether every block of ``model`` exposes ``blocks.{l}.{suffix}`` (the per-layer reading the
    diagnostics do; a hook of that name outside ``blocks`` is one stream, not a layer's)."""
    names = set(model.hook_names()) if hasattr(model, "hook_names") else set()
    L = n_layers(model)
    return L > 0 and all(f"blocks.{l}.{suffix}" in names for l in range(L))


def device_of(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Eval mode and no grad inside the block; every module's flag is restored on exit."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        for m, mode in modes:
            m.training = mode


def episodes_for(task: Task, n: int, seed: int, episodes: Episodes | None) -> Episodes:
    if episodes is not None:
        return episodes
    if not isinstance(n, int) or n < 2:
        raise InvalidValue(f"invalid n: must be an integer >= 2, got {n!r}")
    return task.sample(n, seed)


def evenly_spaced(items: list[Any], most: int | None) -> list[Any]:
    """At most ``most`` of ``items``, evenly spread and keeping the first and the last (all of them for
    ``None``): the checkpoints a diagnostic over training reads."""
    if most is None or len(items) <= most:
        return items
    keep = sorted({round(i * (len(items) - 1) / (most - 1)) for i in range(most)})
    return [items[i] for i in keep]


def finite_checkpoints(paths: Sequence[Path], model: torch.nn.Module, skipped: list[int]) -> Iterator[Path]:
    """Load each checkpoint of ``paths`` into ``model`` in turn and yield its path once loaded; one whose weights
    are not finite (:class:`~windtunnel.run.checkpoint.NonFiniteWeights`) is passed over and its step appended to
    ``skipped``: a diagnostic over training reads every checkpoint whose weights are numbers, and says which it
    could not."""
    for path in paths:
        try:
            ckpt.load(path, model)
        except ckpt.NonFiniteWeights:
            skipped.append(ckpt.step_of(path))
            continue
        yield path


def inputs_on(part: Episodes, device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in part.inputs.items()}


# --- activations at scored positions ---------------------------------------------------------------
@dataclass
class Scored:
    """Rows at the scored positions of a batch of episodes, in (sequence, position) order."""

    seq: torch.Tensor  # [N] long, sequence index
    pos: torch.Tensor  # [N] long, token position
    posterior: torch.Tensor  # [N,C] float64
    entropy: torch.Tensor  # [N] float64, Bayes entropy in bits
    acts: dict[str, torch.Tensor]  # name -> [N, d] float64
    logits: torch.Tensor  # [N,C] float64 (the model's own output)

    @property
    def n_seq(self) -> int:
        return int(self.seq.max()) + 1 if len(self.seq) else 0


def collect_scored(model: torch.nn.Module, episodes: Episodes, names: Sequence[str], chunk: int = 128) -> Scored:
    """Run ``model`` over ``episodes`` and keep the named activations (flattened to ``[N, d]``) at
    the scored positions."""
    dev = device_of(model)
    acts: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    logits = []
    with eval_mode(model):
        for part in episodes.chunks(chunk):
            out, cache = model.run_with_cache(**inputs_on(part, dev), names=list(names))
            m = part.mask.to(out.device)
            logits.append(out[m].double().cpu())
            for n in names:
                acts[n].append(cache[n][m].flatten(1).double().cpu())
    mask = episodes.mask
    seq, pos = mask.nonzero(as_tuple=True)
    post = episodes.posterior[mask].double()
    return Scored(seq=seq, pos=pos, posterior=post, entropy=entropy_bits(post),
                  acts={n: torch.cat(v) for n, v in acts.items()}, logits=torch.cat(logits))


# --- bootstrap -------------------------------------------------------------------------------------
def ci(samples: torch.Tensor, level: float = 0.95) -> list[float | None]:
    """Percentile interval over the finite resamples (``stats.finite_ci``)."""
    return finite_ci(samples, level)


