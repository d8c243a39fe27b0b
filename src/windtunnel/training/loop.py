"""The training loop, readable top to bottom.

``train(config, out_dir)`` trains one model on one wind tunnel:

1. build the task and the model (``models.make``, capacity-matched when ``params`` is set);
2. every step draws a *fresh* batch (``streams.step_batch``: the data of step ``s`` is a pure
   function of ``(seed, s)``, so nothing can be memorised and resuming is exact);
3. loss (``optim.loss_fn``): cross-entropy against ``targets`` or, for soft-target tasks
   (``loss="posterior"``), the soft cross-entropy ``-Σ_c p*(c) log q(c)`` against the exact
   posterior (Paper I's HMM loss);
4. AdamW, linear warmup then cosine decay to ``min_lr`` (``optim.lr_at``), gradient clipping;
5. logs ``loss`` and the **Bayes gap** (``metrics.bayes_gap``) — ``KL(posterior ‖ model)`` in bits on
   the same batch, the excess cross-entropy over the Bayes oracle — to ``metrics.jsonl``, the
   progress bar and any experiment trackers (``run/trackers.py``);
6. evaluates on a fixed held-out batch every ``eval_every`` steps;
7. checkpoints atomically (``run/checkpoint.py``) every ``ckpt_every`` steps, at log-spaced steps (kept for the
   training-dynamics analyses) and after ``ckpt_minutes`` of training without one; a NaN/Inf loss stops the run with a
   clear message and leaves the last good checkpoint in place — watched on the device (``optim.FiniteWatch``) and read
   back only at a log, evaluation, checkpoint or stop, so no step waits on the GPU;
8. a stop request (SIGTERM, SLURM's time-limit warning SIGUSR2, Ctrl-C: ``run/stopping.py``) checkpoints the step
   reached and raises ``TrainingStopped``: resuming continues from exactly there.

When to checkpoint, what is checked before, what is kept, what a stop and a divergence do is
``training/checkpointing.py`` (``CheckpointPolicy``, ``divergence_recorded``), the same for the stacked loop.

What a run is lives in ``run/config.py`` (and the device it trains on); the data and its shards in
``training/streams.py``; the schedule, parameter groups and loss in ``training/optim.py``.

Data parallel: launched under ``torchrun`` with ``W`` processes the same code wraps the model in
DDP.  ``batch_size`` stays the *global* batch, the loss is normalised by the global number of
scored positions, and only rank 0 writes, so a ``W``-process run trains on exactly the data, and
takes exactly the steps, of a one-process run with ``data_shards = S`` (equal up to float summation
order); a run killed under one process count resumes exactly under any count that divides ``S``.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .. import models, tasks
from . import execution
from ..evaluation.evaluate import held_out_metrics
from ..evaluation.metrics import bayes_gap
from .checkpointing import CheckpointedModel, CheckpointPolicy, TrainingDiverged, divergence_recorded, first_checkpoint_step
from .optim import FiniteWatch, loss_fn, lr_at, param_groups
from ..run.config import pick_device
from ..run.runs import RunDir
from .streams import _global_means, curriculum_task, eval_seed, process_group, resolve_shards, step_batch, stream_seed
from ..tasks.base import Task
from ..run.trackers import Trackers
from ..run.config import ConfigError, TrainConfig, load_config_file

__all__ = ["ConfigError", "TrainConfig", "TrainingDiverged", "build", "curriculum_task", "eval_seed",
           "load_config_file", "loss_fn", "lr_at", "param_groups", "process_group", "resolve_shards", "step_batch",
           "stream_seed", "train"]

LOG2E = 1.0 / math.log(2.0)
LINE_SECONDS = 30.0
"""Without a progress bar (no terminal), a progress line at least this often (at the next log step)."""


def compile_fresh(fn: Any, **options: Any) -> Any:
    """``torch.compile(fn, **options)`` from an empty cache of compiled graphs.  The cache, and its limit on
    recompilations, belongs to the code compiled (a model class's ``forward``; for stacks, the one wrapper every
    ``vmap`` returns), not to one model: a process that trains many cells one after another (a pool's worker) would
    otherwise reach the limit and run the later ones uncompiled."""
    import torch._dynamo as dynamo

    dynamo.reset()
    return torch.compile(fn, **options)


def backward_compiled_with_forward() -> Any:
    """A context for calling a compiled model: its backward pass is compiled with its forward, at the first call.
    Compiled lazily (the default) a backward the compiler refuses would fail at ``loss.backward()``, after the
    fallback to the uncompiled model is out of reach; compiled here it fails in the call, which falls back."""
    from torch._functorch import config

    return config.patch(force_non_lazy_backward_lowering=True)


def first_line(exc: BaseException) -> str:
    """An exception's first non-empty line, cut to 120 characters: what a progress line says of a fallback."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), "")[:120]


def forward(net: torch.nn.Module, model: torch.nn.Module, inputs: dict[str, torch.Tensor],
            may_fall_back: bool, refused: list[str] | None = None) -> tuple[torch.Tensor, torch.nn.Module]:
    """The logits of ``net`` (``model`` compiled, or wrapped for DDP, or ``model`` itself) on ``inputs``, and the module
    to call from now on: ``model`` itself where the compiler refused ``net`` (no C++ compiler, no Triton) and
    ``may_fall_back`` — said once on standard error, and the reason appended to ``refused`` — else ``net``."""
    try:
        with backward_compiled_with_forward() if net is not model else contextlib.nullcontext():
            return net(**inputs), net
    except Exception as exc:  # noqa: BLE001 - whatever the compiler refuses, the uncompiled model computes
        if not may_fall_back or net is model:
            raise
        why = f"{type(exc).__name__}: {first_line(exc)}"
        if refused is not None:
            refused.append(why)
        print(f"not compiled ({why}): training uncompiled", file=sys.stderr, flush=True)
        return model(**inputs), model


def build(cfg: TrainConfig) -> tuple[Task, torch.nn.Module]:
    """The task and the (untrained, seeded) model a config describes."""
    try:
        task = tasks.make(cfg.task, **cfg.task_params)
        for stage in cfg.curriculum:
            task.replace(**stage["task_params"])  # validate every stage before training starts
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"curriculum: {exc}" if isinstance(exc, TypeError) else str(exc)) from exc
    from ..tasks.base import check_memory, physical_memory

    # weights, gradients and two AdamW moments: 16 bytes a parameter in float32
    if cfg.params is not None and physical_memory() and 16 * cfg.params > physical_memory() // 2:
        raise ConfigError(f"invalid params: {cfg.params} parameters need ≈{16 * cfg.params / 2**30:.0f} GiB to train, "
                          f"more than half of this machine's {physical_memory() / 2**30:.0f} GiB")
    from ..run.trackers import missing_package

    for name in cfg.trackers:  # checked here, not in the config: a run folder stays readable without the package
        package = missing_package(name)
        if package:
            raise ConfigError(f"invalid config value for 'trackers': {name} needs the {package} package "
                              f"(pip install {package})")
    check_memory(task, cfg.batch_size, "batch_size")
    check_memory(task, cfg.eval_n, "eval_n")
    if cfg.train_set is not None:
        check_memory(task, cfg.train_set, "train_set")
    torch.manual_seed(cfg.seed)
    try:
        model = models.make(cfg.arch, task, params=cfg.params, **cfg.model)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if cfg.readout_lr_mult != 1:
        model.readout_parameters()  # a model without a separate readout says so now, not mid-run
    return task, model


# --- the loop -------------------------------------------------------------------------------


def train(cfg: TrainConfig, out_dir: str | Path | RunDir, resume: bool = False, until: int | None = None,
          log_lines: bool = False, built: tuple[Task, torch.nn.Module] | None = None) -> Path:
    """Train (or resume) a run in ``out_dir``; returns the run folder.

    ``until``: stop (with a checkpoint) after that step although the schedule runs to
    ``cfg.steps`` — an interruption on purpose; resuming continues exactly where it stopped.
    ``log_lines``: where no progress bar is drawn (``progress`` off, or standard error not a terminal)
    print one plain line per evaluation interval on standard output instead (the command line's
    choice: a log file gets lines, not carriage returns; a library caller gets silence).
    ``built``: the ``(task, model)`` that :func:`build` already made of ``cfg`` (a plan that built them to check the
    config and count the parameters hands them over, so the model is built once); the model is trained in place.
    """
    run = out_dir if isinstance(out_dir, RunDir) else RunDir(out_dir)
    rank, world = process_group()
    main_proc = rank == 0
    device = pick_device(cfg.device)
    task, model = built if built is not None else build(cfg)  # every user error is raised here, before anything is written
    shards = resolve_shards(cfg, run, resume, world)
    if main_proc:
        run.prepare()

    def diverged_again(exc: TrainingDiverged, from_steps: list[int]) -> TrainingDiverged:
        return TrainingDiverged(
            f"{run.path} diverged again from its last good checkpoint, step {from_steps[0]} "
            f"({str(exc).split(';')[0]}); nothing was changed: evaluate or analyse that checkpoint as it "
            "stands, or train it anew with a lower learning rate")

    with (run.lock() if main_proc else contextlib.nullcontext()), \
            Trackers(cfg.trackers if main_proc else [], run.path, cfg.to_dict()) as trackers, \
            divergence_recorded([run] if main_proc else [], resume, diverged_again):
        return _train_locked(cfg, run, task, model, device, resume, until, shards, rank, world, log_lines, trackers)


def _train_locked(cfg: TrainConfig, run: RunDir, task: Task, model: torch.nn.Module, device: torch.device,
                  resume: bool, until: int | None, shards: int, rank: int, world: int, log_lines: bool,
                  trackers: Trackers) -> Path:
    ddp, main_proc = world > 1, rank == 0
    own_group = ddp and not torch.distributed.is_initialized()
    if own_group:
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    soft = cfg.loss == "posterior" or (cfg.loss == "auto" and task.soft_targets)
    model.to(device)
    optimizer = torch.optim.AdamW(param_groups(model, cfg), lr=cfg.lr, betas=(0.9, cfg.beta2))

    start, elapsed = 0, 0.0
    if resume:  # the newest whole checkpoint (a damaged newer one is said and trained again)
        start, elapsed = run.restore(model, optimizer, first_checkpoint=first_checkpoint_step(cfg), say=main_proc)
        if main_proc:
            run.truncate_metrics(start)  # also drops lines logged before a kill that preceded any checkpoint
    if main_proc:
        run.write_config({
            "train": cfg.to_dict(),
            "task": {"name": task.name, "params": task.params()},
            "model": model.config_dict(),
            "n_params": model.n_params(),
        })

    net: torch.nn.Module = model
    if cfg.compile:
        net = compile_fresh(model)  # type: ignore[assignment]
    if ddp:
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    use_bf16 = cfg.bf16 == "on" or (cfg.bf16 == "auto" and device.type == "cuda")
    eval_batch = task.sample(cfg.eval_n, eval_seed(cfg.seed)).to(device)

    bar = None
    if cfg.progress and main_proc and (sys.stderr.isatty() or not log_lines):
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.steps, initial=start, desc=f"{cfg.arch}/{task.name}", dynamic_ncols=True)
    lines = log_lines and main_proc and bar is None
    last_loss: dict[str, float] = {}
    last_line = time.perf_counter()  # without a terminal a line at least every LINE_SECONDS, not only per evaluation

    watch = FiniteWatch(1, device)
    done = start  # the steps taken: named where only another process saw the loss go non-finite

    def diverged(across_processes: bool = False) -> None:
        """Stop if the loss went non-finite since the last look (the one read of :class:`FiniteWatch`)."""
        bad = watch.first_bad(across_processes)
        if bad:
            _, at, value = bad[0]
            said = f"loss became {value} at step {at}" if at >= 0 else f"loss became non-finite in another process by step {done}"
            raise TrainingDiverged(f"{said}; stopped, last good checkpoint kept in {run.checkpoints}")

    def weights_diverged(member: int, parameter: str, step: int) -> TrainingDiverged:
        return TrainingDiverged(f"weights became non-finite ({parameter}) by step {step}; stopped, last good "
                                f"checkpoint kept in {run.checkpoints}")

    stop = cfg.steps if until is None else min(cfg.steps, until)
    checkpoints = CheckpointPolicy(
        cfg, stop, [CheckpointedModel(model, optimizer, run.checkpoints, {"config": cfg.to_dict(), "data_shards": shards})],
        check_loss=diverged, weights_diverged=weights_diverged, writer=main_proc, elapsed=elapsed)
    checkpoints.save_origin(start)

    model.train()
    refused: list[str] = []  # why the compiler refused the model, where it did
    execution.start()
    try:
        for step in range(start, stop):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, cfg) * group.get("lr_mult", 1.0)
            batch = step_batch(cfg, task, step, shards, rank, world).to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
                logits, net = forward(net, model, batch.inputs, may_fall_back=cfg.compile and not ddp, refused=refused)
            n_scored = None
            if ddp:  # DDP averages gradients over processes: dividing by N/W makes the average Σ/N
                n_scored = batch.mask.sum().to(torch.float32)
                torch.distributed.all_reduce(n_scored)
                n_scored = n_scored / world
            loss = loss_fn(logits, batch, soft, n_scored)
            watch.record(step, loss)  # read back only where the host needs it (below): no synchronisation here
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            done = step + 1
            if step == start and main_proc:  # what ran this run's steps (the scan, the compiler): said once
                compile_state = "off" if not cfg.compile else f"not compiled ({refused[0]})" if refused else "compiled"
                ran = execution.describe(device, "eager", compile_state, bf16=use_bf16)
                run.record_execution(ran)
                if lines:
                    print(execution.line(f"{cfg.arch}/{task.name}", ran), flush=True)
            if done % cfg.log_every == 0 or done % cfg.eval_every == 0 or checkpoints.scheduled(done):
                diverged(across_processes=ddp)  # before anything is written

            if done % cfg.log_every == 0 or done == cfg.steps:
                loss_now, gap = float(loss.detach()), bayes_gap(logits.detach(), batch)
                if ddp:  # every process joins; rank 0 logs the global batch's means
                    count = float(batch.mask.sum())
                    loss_now, gap = _global_means([loss_now * float(n_scored) / count, gap], count, device)
            if main_proc and (done % cfg.log_every == 0 or done == cfg.steps):
                record = {
                    "step": done,
                    "loss": loss_now * LOG2E,  # bits
                    "bayes_gap": gap,
                    "lr": lr_at(step, cfg),
                    "grad_norm": float(grad_norm),
                    "time": checkpoints.seconds(),
                }
                run.append_metrics(record)
                trackers.log(record)
                last_loss.update(loss=record["loss"], gap=gap)
                if bar is not None:
                    bar.set_postfix(loss=f"{record['loss']:.4f}", gap=f"{gap:.2e}")
                if lines and time.perf_counter() - last_line >= LINE_SECONDS and done % cfg.eval_every:
                    print(f"{cfg.arch}/{task.name} step {done}/{cfg.steps}: loss {record['loss']:.4f} bits, Bayes gap "
                          f"{gap:.3g} bits, {record['time']:.0f} s", flush=True)
                    last_line = time.perf_counter()
            if main_proc and (done % cfg.eval_every == 0 or done == cfg.steps):
                held_out = held_out_metrics(model, eval_batch)
                run.append_metrics({"step": done, "eval": held_out})
                trackers.log({"step": done, "eval": held_out})
                model.train()
                if lines:
                    print(f"{cfg.arch}/{task.name} step {done}/{cfg.steps}: loss "
                          f"{last_loss.get('loss', float('nan')):.4f} bits, held-out KL "
                          f"{held_out.get('kl', float('nan')):.3g} bits, {checkpoints.seconds():.0f} s", flush=True)
                    last_line = time.perf_counter()
            if bar is not None:
                bar.update(1)
            checkpoints.after_step(done)  # scheduled or timed; on a stop request: checkpoint, then TrainingStopped
    finally:
        if bar is not None:
            bar.close()
    if ddp:
        # drop the DDP wrapper (its reducer holds gradient-bucket work on the group) before the group
        # is torn down, then let every process arrive: a process group destroyed under pending work
        # or a peer still in a collective is how gloo teardown hangs
        net = logits = loss = None  # type: ignore[assignment]
        torch.distributed.barrier()
    if own_group:
        torch.distributed.destroy_process_group()
    return run.path
