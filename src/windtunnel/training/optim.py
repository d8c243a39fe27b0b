r"""The optimisation pieces of the loop: the learning-rate schedule, AdamW's parameter groups, the
loss, its finiteness watched on the device (:class:`FiniteWatch`), and which checkpoints are kept for the
training-dynamics analyses."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ..tasks.base import Episodes
from ..run.config import TrainConfig


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup for ``warmup`` steps, then cosine from ``lr`` to ``min_lr`` at ``steps``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


def param_groups(model: torch.nn.Module, cfg: TrainConfig) -> list[dict[str, Any]]:
    """AdamW's parameter groups: weight decay on matrices only (vectors, gains and parameters
    flagged ``_no_weight_decay``, Mamba's ``A_log`` and ``D``, are exempt); with
    ``readout_lr_mult != 1`` the readout (``model.readout_parameters()``) forms groups of its own
    whose ``lr_mult`` scales the scheduled learning rate.  With the multiplier at 1 the groups are
    the two of every earlier run, so their checkpoints resume unchanged."""
    def decays(p: torch.nn.Parameter) -> bool:
        return p.dim() >= 2 and not getattr(p, "_no_weight_decay", False)

    readout = {id(p) for p in model.readout_parameters()} if cfg.readout_lr_mult != 1 else set()
    groups = []
    for mult, members in ((1.0, [p for p in model.parameters() if id(p) not in readout]),
                          (float(cfg.readout_lr_mult), [p for p in model.parameters() if id(p) in readout])):
        if members:
            groups += [{"params": [p for p in members if decays(p)], "weight_decay": cfg.weight_decay, "lr_mult": mult},
                       {"params": [p for p in members if not decays(p)], "weight_decay": 0.0, "lr_mult": mult}]
    return groups


def loss_fn(logits: torch.Tensor, ep: Episodes, soft: bool, n_scored: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy (nats) over scored positions, against targets or the soft posterior, in float32 (float64
    for float64 logits).

    ``n_scored``: divide the summed cross-entropy by this count instead of the batch's own (a data-
    parallel shard divides by the global count, so the mean over processes is the global mean).
    """
    logits = logits if logits.dtype == torch.float64 else logits.float()  # float32 at least, float64 kept
    if soft:
        logq = F.log_softmax(logits, dim=-1)
        ce = -(ep.posterior.to(logq.dtype) * logq).sum(-1)
        return (ce * ep.mask).sum() / (ep.mask.sum() if n_scored is None else n_scored)
    flat_logits, flat_targets = logits.reshape(-1, logits.shape[-1]), ep.targets.reshape(-1)
    if n_scored is None:
        return F.cross_entropy(flat_logits, flat_targets, ignore_index=-100)
    return F.cross_entropy(flat_logits, flat_targets, ignore_index=-100, reduction="sum") / n_scored


def log_spaced_steps(total: int) -> set[int]:
    """Steps 1, 2, 5, 10, 20, 50, … ≤ total: the checkpoints kept for dynamics analyses."""
    out, base = set(), 1
    while base <= total:
        for m in (1, 2, 5):
            if m * base <= total:
                out.add(m * base)
        base *= 10
    return out


class FiniteWatch:
    """Whether each member's training loss stayed finite, watched on the device.

    Reading a number back from a GPU (``if not torch.isfinite(loss)``) makes the host wait until every kernel queued
    so far has run, which stalls a launch-bound step.  :meth:`record` keeps, on the device, the first step at which
    each member's loss was not finite and that loss, and reads nothing; :meth:`first_bad` reads them once — the
    training loops ask at each log, evaluation, checkpoint and stop, before anything is written, so a run whose loss
    went non-finite mid-interval still stops naming that step, with its last good checkpoint kept.
    """

    def __init__(self, members: int, device: torch.device) -> None:
        self.step = torch.full((members,), -1, dtype=torch.long, device=device)
        self.loss = torch.zeros(members, dtype=torch.float32, device=device)

    def record(self, step: "int | torch.Tensor", losses: torch.Tensor) -> None:
        """Note the members whose loss at ``step`` (a number, or a 0-d tensor on the device) is the first not finite.
        Device operations only, and in place: a step recorded once as a CUDA graph and replayed updates the same
        watch at every replay, with the step its counter holds then."""
        losses = losses.detach().float().reshape(-1)
        new = (self.step < 0) & ~torch.isfinite(losses)
        self.step.copy_(torch.where(new, step, self.step))
        self.loss.copy_(torch.where(new, losses, self.loss))

    def first_bad(self, across_processes: bool = False) -> list[tuple[int, int, float]]:
        """``(member, step, loss)`` for each member whose loss has gone non-finite, earliest step first (the one
        read back).  ``across_processes``: every process of a data-parallel group calls this together and a member
        counts as bad if it is bad in any (its step is then this process's, or ``-1`` when only another saw it)."""
        bad = (self.step >= 0).to(torch.int32)
        if across_processes:
            bad = bad.clone()
            torch.distributed.all_reduce(bad, op=torch.distributed.ReduceOp.MAX)
        steps, losses, flags = self.step.tolist(), self.loss.tolist(), bad.tolist()
        return sorted(((i, steps[i], losses[i]) for i in range(len(flags)) if flags[i]),
                      key=lambda x: (x[1] < 0, x[1]))
