"""When a training loop checkpoints, what it checks first, what it keeps, and how it stops: the one policy of both
loops (:func:`windtunnel.training.loop.train`, one model; :func:`windtunnel.training.stacked.train_stacked`, several
seeds as one stacked model).

* **The schedule.**  A checkpoint at every ``ckpt_every`` steps, at the last step ``steps``, and (``log_checkpoints``)
  at step 0 and at log-spaced steps (kept for the training-dynamics analyses); also at the step where ``until`` stops
  a run early, and after ``ckpt_minutes`` of training without one (a killed run loses at most that much).
* **The finite check.**  No checkpoint of non-finite weights is written, so ``latest`` never points at weights that
  diverged: every model is checked before any is written; a timed checkpoint is then skipped (the loss check that
  follows stops the run), a scheduled one stops the run (:class:`TrainingDiverged`).
* **What is kept.**  A checkpoint off the step schedule (timed, or where ``until`` or a stop request stopped) is only
  a place to resume from: once a newer one is whole it goes, and it never takes one of the ``keep_last`` places of
  the scheduled ones, so the checkpoints a finished run keeps (which the training-dynamics diagnostics read) do not
  depend on how fast it trained or where it stopped.
* **A stop request** (``run/stopping.py``): the step reached is checkpointed, then :class:`TrainingStopped` is raised,
  so resuming continues from exactly there.
* **Divergence** (:func:`divergence_recorded`): training that stops on non-finite numbers records it beside each
  run that diverged (``diverged.json``), and a diverged run resumed that diverges again before a new checkpoint
  gained nothing — the resume is then a refusal, and leaves the run folders as they were, byte for byte.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from ..errors import UserError
from ..run import checkpoint as ckpt
from ..run import stopping
from ..run.config import TrainConfig
from ..run.runs import RunDir
from .optim import log_spaced_steps

__all__ = ["CheckpointPolicy", "CheckpointedModel", "TrainingDiverged", "divergence_recorded", "first_checkpoint_step"]


class TrainingDiverged(UserError, RuntimeError):
    """The loss or the weights became NaN or infinite (no checkpoint of that state is written)."""


def first_checkpoint_step(cfg: TrainConfig) -> int:
    """The first step a run of ``cfg`` checkpoints: a training log past it without a checkpoint is a damaged run,
    not one killed before its first checkpoint (:meth:`windtunnel.run.runs.RunDir.restore`)."""
    return 0 if cfg.log_checkpoints else min(cfg.ckpt_every, cfg.steps)


def first_nonfinite(model: torch.nn.Module) -> str | None:
    """The name of the first parameter of ``model`` holding a NaN or an infinity (``None``: all are finite)."""
    return next((n for n, p in model.named_parameters() if not bool(torch.isfinite(p).all())), None)


@dataclass
class CheckpointedModel:
    """A model the checkpoints hold: its weights and optimizer, the run's ``checkpoints/`` folder ``root``, and what
    each checkpoint records beside them and the training seconds (``meta``: the config, the data shards)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    root: Path
    meta: dict[str, Any]


class CheckpointPolicy:
    """The checkpoints of one training run (or one stack of runs) from step ``start`` to ``stop``, and its clock.

    ``held``: the models each checkpoint writes, each to its own run folder.  ``writer``: whether this process
    writes checkpoints — a data-parallel process other than rank 0 does not, but checks its weights at the scheduled
    steps with the others, and takes no timed checkpoint (that is rank 0's alone).  ``check_loss``: the loop's look
    at its training losses, which raises :class:`TrainingDiverged` if one went non-finite (called before a timed
    checkpoint or a stop writes anything).  ``weights_diverged(member, parameter, step)``: the loop's error for
    non-finite weights of ``held[member]``.  ``before_save(step)``: what makes ``held`` current before a checkpoint
    of ``step`` (the stacked loop copies each member's slice back into its model).  ``elapsed``: the training seconds
    before ``start``; ``clock``: seconds, monotonic.
    """

    def __init__(self, cfg: TrainConfig, stop: int, held: Sequence[CheckpointedModel], *,
                 check_loss: Callable[[], None], weights_diverged: Callable[[int, str, int], TrainingDiverged],
                 writer: bool = True, before_save: Callable[[int], None] | None = None, elapsed: float = 0.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.steps, self.stop, self.every, self.keep_last = cfg.steps, stop, cfg.ckpt_every, cfg.keep_last
        self.timed_seconds = 60 * cfg.ckpt_minutes if writer else 0.0
        self.keep_steps = (log_spaced_steps(cfg.steps) | {0}) if cfg.log_checkpoints else set()
        self.held, self.writer = list(held), writer
        self.check_loss, self.weights_diverged, self.before_save = check_loss, weights_diverged, before_save
        self.clock = clock
        self.elapsed = elapsed
        self.t0 = self.last_save = clock()

    def seconds(self) -> float:
        """Training seconds so far: those before this policy began and those since (across resumes)."""
        return self.elapsed + self.clock() - self.t0

    def on_schedule(self, step: int) -> bool:
        """Whether ``step`` is one of the checkpoints a run keeps: every ``ckpt_every``, the last, the log-spaced."""
        return step % self.every == 0 or step == self.steps or step in self.keep_steps

    def scheduled(self, done: int) -> bool:
        """Whether the step ``done`` is checkpointed in any case: on the schedule, or where this run stops
        (``until``).  Every process of a data-parallel group saves there together."""
        return self.on_schedule(done) or done == self.stop

    def save_origin(self, start: int) -> None:
        """The untrained model at step 0, the origin of every training-dynamics curve (``log_checkpoints``), unless
        a run starting at step 0 already holds a checkpoint."""
        if start == 0 and 0 in self.keep_steps and self.writer and all(
                ckpt.find_latest(h.root) is None for h in self.held):
            self.save(0, seconds=0.0)

    def after_step(self, done: int, seconds: float | None = None) -> None:
        """Checkpoint step ``done`` if it is scheduled or ``ckpt_minutes`` passed since the last checkpoint; on a stop
        request checkpoint it (if that did not) and raise :class:`TrainingStopped`.  ``seconds``: the training
        seconds the checkpoint records (the clock's reading where the loop took it; default now)."""
        scheduled = self.scheduled(done)
        timed = self.timed_seconds > 0 and self.clock() - self.last_save >= self.timed_seconds
        if timed and not scheduled:
            self.check_loss()  # the weights' own check in save() covers the losses of the other processes
        if scheduled or timed:
            self.save(done, timed=not scheduled, seconds=seconds)
        if stopping.requested() and done < self.stop:
            self.check_loss()
            if not scheduled:  # where it stands now: nothing trained is lost
                self.save(done, seconds=seconds)
            raise stopping.stopped(done, self.steps, ", ".join(str(h.root) for h in self.held))

    def save(self, step: int, timed: bool = False, seconds: float | None = None) -> None:
        """Write the checkpoint of ``step`` for every held model, its weights checked first (see the module
        docstring), then remove the checkpoints it replaces and prune to ``keep_last``."""
        seconds = self.seconds() if seconds is None else seconds
        self.elapsed, self.t0 = seconds, self.clock()
        try:
            if self.before_save is not None:
                self.before_save(step)
            for i, h in enumerate(self.held):
                bad = first_nonfinite(h.model)
                if bad is not None:  # never let `latest` point at weights that diverged
                    if timed:
                        return  # the loss check stops the run (in every process; a timed save is rank 0's alone)
                    raise self.weights_diverged(i, bad, step)
            if self.writer:
                for h in self.held:
                    self.write(h, step, seconds)
        finally:
            self.last_save = self.clock()

    def write(self, held: CheckpointedModel, step: int, seconds: float) -> None:
        """One model's checkpoint of ``step``, then the older off-schedule checkpoints removed (a newer one is whole)
        and, at a scheduled step, the scheduled ones pruned to the newest ``keep_last`` and the kept steps."""
        ckpt.save(held.root, step, held.model, held.optimizer, {"elapsed": seconds, **held.meta})
        for p in ckpt.list_checkpoints(held.root):
            if ckpt.step_of(p) < step and not self.on_schedule(ckpt.step_of(p)):
                shutil.rmtree(p, ignore_errors=True)
        if self.on_schedule(step):
            ckpt.prune(held.root, self.keep_last, self.keep_steps)


@contextlib.contextmanager
def divergence_recorded(runs: Sequence[RunDir], resume: bool,
                        refusal: Callable[[TrainingDiverged, list[int]], TrainingDiverged]) -> Iterator[None]:
    """Training of ``runs`` inside the block, with stop requests caught (``run/stopping.py``) and divergence recorded.

    A :class:`TrainingDiverged` from the block is written beside the runs it names (its ``members``, else every run)
    as ``diverged.json``, and re-raised.  A resume of runs one of which had diverged, diverging again before any run
    wrote a new checkpoint, gained nothing: the records the resume rewrote (:data:`RunDir.RESUME_RECORDS`) are put
    back byte for byte and ``refusal(error, the steps resumed from)`` is raised instead.  Training that ends without
    one clears the record (trained on past it since).  ``runs`` empty: nothing is read or written (a data-parallel
    process other than rank 0).
    """
    resuming_diverged = resume and any(r.divergence() is not None for r in runs)
    records_before = [r.record_bytes(RunDir.RESUME_RECORDS) for r in runs] if resuming_diverged else []
    from_steps = [r.latest_step() for r in runs] if resuming_diverged else []
    try:
        with stopping.catching():  # SIGTERM, SIGUSR2, Ctrl-C: checkpoint the step reached, then stop
            yield
    except TrainingDiverged as exc:
        if resuming_diverged and all(r.latest_step() <= s for r, s in zip(runs, from_steps)):
            for r, records in zip(runs, records_before):
                r.put_back(records)
            raise refusal(exc, from_steps) from None
        for i in getattr(exc, "members", range(len(runs))):
            runs[i].record_divergence(str(exc))
        raise
    for r in runs:
        r.clear_divergence()
