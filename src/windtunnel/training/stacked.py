"""Several runs of one shape trained as one model: the seeds of a cell stacked along a leading member dimension.

``train_stacked(configs, run_dirs)`` trains ``M`` runs whose configs differ only in their data stream (the seed, or
a task whose episodes have the same shapes) and learning rates (``lr``, ``min_lr``, ``readout_lr_mult``) as one model
whose every
parameter carries a leading dimension of size ``M`` (``torch.func.stack_module_state``), the forward pass vmapped over
the members (``torch.func.functional_call`` under ``torch.func.vmap``; a model whose forward does not vmap — an
``nn.LSTM`` on a CPU, the fused CPU scan — is run member by member inside the same step; on a GPU the LSTM's layers
fold the members into one block-diagonal LSTM and Mamba's Triton scan folds them into its sequences).  Each member keeps what it would have
alone:

* its own data stream (``streams.step_batch`` with its own seed) and its own held-out batch;
* its own loss, summed over members for one backward pass (the members share no parameter, so the gradient of the
  sum is each member's own gradient in its own slice);
* its own gradient clipping: ``g_m ← g_m · min(1, c / (‖g_m‖ + 10⁻⁶))`` with ``‖g_m‖`` over the member's parameters
  only, as ``clip_grad_norm_`` computes it for a run alone;
* AdamW, which is elementwise, on the stacked parameters with a learning rate per member and parameter group
  (:class:`windtunnel.training.step.MemberAdamW`): the same update as each member's own optimizer, with the same
  parameter groups (weight decay on matrices, the readout's learning-rate multiplier) and its own schedule;
* its own run folder, written exactly as a run trained alone writes it — ``config.json``, checkpoints (the member's
  slice of the weights and of the optimizer's moments, in the single-run format), ``metrics.jsonl`` — so it can be
  resumed, evaluated or analysed alone, and a stacked run resumes from its members' checkpoints.

The step itself is :class:`windtunnel.training.step.StackedStep`: device operations only, recorded once as a CUDA graph
and replayed on a GPU.  A member's trajectory equals the same run trained alone up to floating-point summation order
(the tests hold the two together over hundreds of steps).  Stacking pays where one model is too small to keep the hardware busy: its
steps are bound by per-operation overhead, which the members now share (``benchmarks/stacked_cpu.py`` measures it).
"""

from __future__ import annotations

import functools
import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import UserError
from ..evaluation.evaluate import held_out_metrics
from ..evaluation.metrics import bayes_gap
from . import execution
from .checkpointing import CheckpointedModel, CheckpointPolicy, TrainingDiverged, divergence_recorded, first_checkpoint_step
from .optim import lr_at, param_groups
from ..run.config import pick_device
from ..run.runs import RunDir
from .streams import eval_seed, resolve_shards, step_batch
from .loop import LOG2E, backward_compiled_with_forward, build, compile_fresh, first_line
from .step import MemberAdamW, StackedStep
from ..run.config import ConfigError, TrainConfig, recipe

__all__ = ["STACKABLE_DIFFERENCES", "stack_shape", "stackable", "train_stacked"]


STACKABLE_DIFFERENCES = ("seed", "lr", "min_lr", "readout_lr_mult", "task", "task_params")
"""What stacked runs may differ in: the data stream — the seed, or the task itself where its episodes have the same
shapes (:func:`episode_shapes`: bijection with and without replacement, say) — and the learning rates (each member
has its own schedule)."""


def stack_shape(fields: dict[str, Any]) -> dict[str, Any]:
    """What runs stacked together share, from ``TrainConfig`` fields: their recipe (what they train, how they are
    watched aside: :func:`windtunnel.run.config.recipe`) but for :data:`STACKABLE_DIFFERENCES`, and the shapes of
    their task's episodes (:func:`episode_shapes`), which size the model and the step's buffers."""
    shape = {k: v for k, v in recipe(fields).items() if k not in STACKABLE_DIFFERENCES}
    return {**shape, "episode_shapes": episode_shapes(fields["task"], fields.get("task_params") or {})}


def episode_shapes(task: str, params: dict[str, Any]) -> dict[str, Any]:
    """What a task's episodes look like to a model and to the step: vocabulary, classes, features, whether it trains
    against the posterior, and the per-episode shapes of its inputs and targets (from two sampled episodes)."""
    return json.loads(_episode_shapes(task, json.dumps(params, sort_keys=True, default=str)))


@functools.lru_cache(maxsize=64)
def _episode_shapes(task: str, params: str) -> str:
    from .. import tasks

    t = tasks.make(task, **json.loads(params))
    ep = t.sample(2, seed=0)
    return json.dumps({"vocab_size": t.vocab_size, "n_classes": t.n_classes, "n_features": t.n_features,
                       "soft_targets": bool(t.soft_targets), "targets": list(ep.targets.shape[1:]),
                       "inputs": {k: list(v.shape[1:]) for k, v in sorted(ep.inputs.items())}})


def stackable(configs: Sequence[TrainConfig]) -> None:
    """Raise :class:`ConfigError` unless ``configs`` are distinct runs of one :func:`stack_shape` on one device that
    the stacked loop trains (one process, no experiment trackers)."""
    if not configs:
        raise ConfigError("no runs to stack")
    dicts = [c.to_dict() for c in configs]
    if len({json.dumps(d, sort_keys=True, default=str) for d in dicts}) != len(dicts):
        raise ConfigError("stacked runs must be distinct runs: two of these configs are the same "
                          f"(seeds {[c.seed for c in configs]})")
    base = {**stack_shape(dicts[0]), "device": dicts[0]["device"]}
    for d in dicts[1:]:
        other = {**stack_shape(d), "device": d["device"]}
        diff = sorted(k for k in base.keys() | other.keys() if base.get(k) != other.get(k))
        if diff:
            said = ["the shapes of their tasks' episodes" if k == "episode_shapes" else k for k in diff]
            raise ConfigError(f"stacked runs must differ only in their {', '.join(STACKABLE_DIFFERENCES)} (a task "
                              f"whose episodes have the same shapes); these differ: {', '.join(said)}")
    if configs[0].trackers:
        raise ConfigError("stacked runs log to metrics.jsonl only: drop trackers")


def train_stacked(configs: Sequence[TrainConfig], run_dirs: Sequence[str | Path | RunDir], resume: bool = False,
                  until: int | None = None, log_lines: bool = False, graph: str = "auto") -> list[Path]:
    """Train (or resume) the runs ``configs`` into ``run_dirs`` as one stacked model (see the module docstring);
    returns the run folders.  ``until`` and ``log_lines`` as :func:`windtunnel.training.loop.train`; ``graph``:
    ``"auto"`` records the step as a CUDA graph on a GPU, ``"off"`` runs it eagerly everywhere."""
    if graph not in ("auto", "off"):
        raise ConfigError(f"invalid graph: must be auto or off, got {graph!r}")
    stackable(configs)
    if len(run_dirs) != len(configs):
        raise ConfigError(f"{len(configs)} configs but {len(run_dirs)} run folders")
    runs = [d if isinstance(d, RunDir) else RunDir(d) for d in run_dirs]
    if len({r.path.resolve() for r in runs}) != len(runs):
        raise ConfigError("stacked runs need a run folder each")
    built = [build(c) for c in configs]  # every user error is raised here, before anything is written
    # the stack runs member 0's module on every member's weights: the models must be one model but for the weights
    shapes = [(json.dumps(m.config_dict(), sort_keys=True, default=str),
               {n: tuple(p.shape) for n, p in m.named_parameters()}) for _, m in built]
    if any(s != shapes[0] for s in shapes[1:]):
        raise ConfigError("stacked runs must build one model but for its weights; these do not (their tasks size "
                          "or configure them differently)")
    shards = [resolve_shards(c, r, resume, 1) for c, r in zip(configs, runs)]
    for r in runs:
        r.prepare()
    with ExitStack() as stack:
        for r in runs:
            stack.enter_context(r.lock())
        # as a run alone (training.loop.train): a stack resumed with a diverged member that diverges again before
        # any member's new checkpoint gained nothing, and leaves every member's folder as it was
        def diverged_again(exc: TrainingDiverged, from_steps: list[int]) -> TrainingDiverged:
            return _diverged(f"{str(exc).split(';')[0]}, again from the last good checkpoints (step "
                             f"{', '.join(map(str, sorted(set(from_steps))))}); nothing was changed: evaluate or "
                             "analyse those checkpoints as they stand, or train anew with a lower learning rate",
                             list(getattr(exc, "members", range(len(runs)))))

        with divergence_recorded(runs, resume, diverged_again):  # recorded in the runs that diverged
            return _train(list(configs), runs, [t for t, _ in built], [m for _, m in built], shards, resume, until,
                          log_lines, graph)


def _diverged(message: str, members: list[int]) -> TrainingDiverged:
    """The error that stops a stack, naming (``members``) the runs whose numbers went non-finite."""
    exc = TrainingDiverged(message)
    exc.members = members  # type: ignore[attr-defined]
    return exc


def _groups(members: list[torch.nn.Module], cfgs: list[TrainConfig]) -> list[tuple[list[str], float, list[float]]]:
    """The stacked AdamW's parameter groups: each member's :func:`param_groups` (decay on matrices; the readout apart
    where any member scales its rate), with each member's multiplier of its scheduled rate."""
    model, cfg = members[0], cfgs[0]
    split = any(c.readout_lr_mult != 1 for c in cfgs)
    readout = {id(p) for p in model.readout_parameters()} if split else set()
    groups = []
    for is_readout in (False, True):
        mults = [float(c.readout_lr_mult) if is_readout else 1.0 for c in cfgs]
        for decays in (True, False):
            names = [n for n, p in model.named_parameters() if (id(p) in readout) == is_readout
                     and (p.dim() >= 2 and not getattr(p, "_no_weight_decay", False)) == decays]
            if names:
                groups.append((names, cfg.weight_decay if decays else 0.0, mults))
    return groups


def _train(cfgs: list[TrainConfig], runs: list[RunDir], task_list: list[Any], members: list[torch.nn.Module],
           shards: list[int], resume: bool, until: int | None, log_lines: bool, graph: str) -> list[Path]:
    from torch.func import functional_call, stack_module_state, vmap

    cfg, M = cfgs[0], len(cfgs)
    device = pick_device(cfg.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # the recorded step's streams and graph are the current device's
    soft = cfg.loss == "posterior" or (cfg.loss == "auto" and task_list[0].soft_targets)
    for m in members:
        m.to(device)
    optimizers = [torch.optim.AdamW(param_groups(m, c), lr=c.lr, betas=(0.9, c.beta2)) for m, c in zip(members, cfgs)]
    starts = []
    for m, o, r in zip(members, optimizers, runs):
        step, elapsed = r.restore(m, o, first_checkpoint=first_checkpoint_step(cfg)) if resume else (0, 0.0)
        starts.append((step, elapsed))
        if resume:
            r.truncate_metrics(step)
    if len({s for s, _ in starts}) != 1:
        raise UserError("stacked runs resume together: their newest checkpoints are at steps "
                        f"{[s for s, _ in starts]}; resume each alone (windtunnel train --resume) to one step first")
    start, elapsed = starts[0][0], max(e for _, e in starts)
    for m, r, task, c in zip(members, runs, task_list, cfgs):
        r.write_config({"train": c.to_dict(), "task": {"name": task.name, "params": task.params()},
                        "model": m.config_dict(), "n_params": m.n_params()})

    # the stacked parameters, and AdamW over them with each member's parameter groups and rates
    params, buffers = stack_module_state(members)
    params = {n: p.detach().requires_grad_(True) for n, p in params.items()}
    optimizer = MemberAdamW(params, _groups(members, cfgs), betas=(0.9, cfg.beta2))
    for i, (m, o) in enumerate(zip(members, optimizers)):  # after a resume: each member's moments in its slice
        names = {id(p): n for n, p in m.named_parameters()}
        if o.state:
            optimizer.load_member(i, {names[id(p)]: s for p, s in o.state.items()})
    base = members[0]

    def forward_one(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return functional_call(base, (p, b), (), inputs)

    vmapped = vmap(forward_one, in_dims=(0, 0, 0), randomness="different")
    # compiled: the vmapped forward (and so its backward) as one inductor program, its elementwise chains fused
    compiled = compile_fresh(vmapped, dynamic=False, fullgraph=True) if cfg.compile else None
    forward_said = ["vmapped, compiled" if cfg.compile else "vmapped"]  # said once the first step has run
    compile_refused: list[str] = []  # why the compiler refused the forward, where it did

    def forward(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        nonlocal vmapped, compiled
        if compiled is not None:
            try:
                with backward_compiled_with_forward():
                    return compiled(params, buffers, inputs)
            except Exception as exc:  # noqa: BLE001 - whatever the compiler refuses, the eager forward computes
                if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                    raise
                compiled = None
                compile_refused.append(f"{type(exc).__name__}: {first_line(exc)}")
                forward_said[0] = f"vmapped (not compiled: {compile_refused[0]})"
        if vmapped is not None:
            try:
                return vmapped(params, buffers, inputs)
            except (RuntimeError, NotImplementedError, ValueError) as exc:
                if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                    raise  # a failure of the recording, not of vmap: the eager step keeps its vmapped forward
                vmapped = None  # a forward without a vmap rule: member by member, the same step otherwise
                forward_said[0] = f"member by member ({type(exc).__name__}: {first_line(exc)})"
        return torch.stack([forward_one({n: p[i] for n, p in params.items()}, {n: b[i] for n, b in buffers.items()},
                                        {k: v[i] for k, v in inputs.items()}) for i in range(M)])

    use_bf16 = cfg.bf16 == "on" or (cfg.bf16 == "auto" and device.type == "cuda")
    program = StackedStep(forward, params, optimizer, cfgs, soft, use_bf16, device, start, graph)
    eval_batches = [t.sample(c.eval_n, eval_seed(c.seed)).to(device) for t, c in zip(task_list, cfgs)]

    def unstack(step: int) -> None:
        """Each member model and optimizer holds its slice of the stacked state (and the rates it would have saved)."""
        with torch.no_grad():
            for i, m in enumerate(members):
                for n, p in m.named_parameters():
                    p.copy_(params[n][i])
        for i, (o, m, c) in enumerate(zip(optimizers, members, cfgs)):
            state = optimizer.member_state(i)
            for n, p in m.named_parameters():
                o.state[p] = state[n]
            for g in o.param_groups:
                g["lr"] = lr_at(step, c) * g.get("lr_mult", 1.0)

    def diverged() -> None:
        """Stop if a member's loss went non-finite since the last look (the one read of the program's watch)."""
        bad = program.watch.first_bad()
        if bad:
            at = bad[0][1]
            raise _diverged(f"loss became non-finite at step {at} for seed(s) "
                            f"{[cfgs[i].seed for i, s, _ in bad if s == at]}; stopped, last good checkpoints kept",
                            [i for i, _, _ in bad])

    def weights_diverged(member: int, parameter: str, step: int) -> TrainingDiverged:
        return _diverged(f"weights of seed {cfgs[member].seed} became non-finite ({parameter}) by step {step}; "
                         f"stopped, last good checkpoints kept in {', '.join(str(r.checkpoints) for r in runs)}", [member])

    stop = cfg.steps if until is None else min(cfg.steps, until)
    checkpoints = CheckpointPolicy(
        cfg, stop, [CheckpointedModel(m, o, r.checkpoints, {"config": c.to_dict(), "data_shards": n})
                    for m, o, r, c, n in zip(members, optimizers, runs, cfgs, shards)],
        check_loss=diverged, weights_diverged=weights_diverged, elapsed=elapsed,
        before_save=lambda step: unstack(max(step - 1, 0)))  # with the rate of the step that led to the checkpoint
    checkpoints.save_origin(start)

    for m in members:
        m.train()
    tasks_said = "+".join(dict.fromkeys(t.name for t in task_list))  # a stack across columns names each task once
    lines = log_lines or not sys.stderr.isatty()
    said_forward = ""
    execution.start()
    for step in range(start, stop):
        batches = [step_batch(c, t, step, s) for c, t, s in zip(cfgs, task_list, shards)]
        program.load(batches)  # queued behind the step still running on a GPU
        program.run()
        done = step + 1
        if lines and step == start:
            if program.want_graph:
                print(f"{cfg.arch}/{tasks_said} stacked step: {program.graph_note}", flush=True)
        if lines and forward_said[0] != said_forward:  # at the first step, and again if it falls back later
            said_forward = forward_said[0]
            print(f"{cfg.arch}/{tasks_said} stacked forward: {said_forward}", flush=True)
        if step == start:  # what ran the stack's steps (the step program, the compiler, the scan), in each member
            compile_state = ("off" if not cfg.compile else f"not compiled ({compile_refused[0]})" if compile_refused
                             else "compiled")
            ran = execution.describe(device, "eager" if program.graph_note.startswith("eager (a CUDA graph needs")
                                     else program.graph_note, compile_state, members=M, bf16=use_bf16)
            for r in runs:
                r.record_execution(ran)
            if lines:
                print(execution.line(f"{cfg.arch}/{tasks_said}", ran), flush=True)
        if done % cfg.log_every == 0 or done % cfg.eval_every == 0 or checkpoints.scheduled(done):  # before anything is written
            diverged()  # (a read from the device: the time below then includes every step queued so far)
        now = checkpoints.seconds()
        if done % cfg.log_every == 0 or done == cfg.steps:
            losses, norms = program.losses.tolist(), program.norms.tolist()
            for i, (r, b, c) in enumerate(zip(runs, batches, cfgs)):
                r.append_metrics({"step": done, "loss": losses[i] * LOG2E,
                                  "bayes_gap": bayes_gap(program.logits[i], b), "lr": lr_at(step, c),
                                  "grad_norm": norms[i], "time": now})
        if done % cfg.eval_every == 0 or done == cfg.steps:
            unstack(step)
            for m, r, e in zip(members, runs, eval_batches):
                r.append_metrics({"step": done, "eval": held_out_metrics(m, e)})
                m.train()
            if lines:
                print(f"{cfg.arch}/{tasks_said} seeds {[c.seed for c in cfgs]} step {done}/{cfg.steps}: loss "
                      f"{', '.join(f'{x * LOG2E:.4f}' for x in program.losses.tolist())} bits, {now:.0f} s", flush=True)
        # the checkpoint records the seconds read above: a checkpoint step's logging and evaluation are not counted
        checkpoints.after_step(done, seconds=now)  # scheduled or timed; on a stop request: checkpoint, then stop
    return [r.path for r in runs]

