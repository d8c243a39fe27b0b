"""``windtunnel train``: one model into a run folder (or ``--resume`` one), or several seeds stacked into one
model (``--seeds``); the training flags ``run`` shares, and the line said before the first step."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .args import UsageError, parse_params, positive_int, seed_int, seed_list
from .names import TRAIN_DEFAULTS, architectures
from .outputs import check_out, divergence_note


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``train``."""
    tr = sub.add_parser("train", help="train one model (extra --NAME VALUE pairs are task parameters)")
    tr.add_argument("--task", help="wind tunnel to train on (windtunnel tasks lists them; default bijection)")
    tr.add_argument("--config", help="TOML or JSON file of TrainConfig fields (default: none; flags override it)")
    tr.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint "
                    "(default: start a new run in --out)")
    tr.add_argument("--batch-size", dest="batch_size", type=positive_int,
                    help=f"episodes per step, global over processes (default {TRAIN_DEFAULTS['batch_size']})")
    tr.add_argument("--lr", type=float, help=f"peak learning rate of the cosine schedule (default {TRAIN_DEFAULTS['lr']:g})")
    tr.add_argument("--seeds", type=seed_list, help="several seeds, comma-separated (0,1,2), trained at once (see "
                    "--stack); each seed's run is its own folder OUT-sSEED, resumable and analysable alone")
    tr.add_argument("--stack", choices=("auto", "on", "off"), default="auto",
                    help="with --seeds: one stacked model (on), or separate processes started together that share the "
                    "cores (off); auto, the default: stacked on a GPU, separate on CPU cores, where a stack made "
                    "0.75x the steps of separate processes")
    tr.add_argument("--cuda-graph", dest="cuda_graph", choices=("auto", "off"), default="auto",
                    help="with --seeds stacked on a GPU: record the step once as a CUDA graph and replay it (auto, the "
                    "default; kept only where its replays reproduce the eager steps) or run it eagerly (off)")
    train_args(tr, "each architecture's own default dimensions, not matched across architectures — the "
               "transformer's are the papers' model; `windtunnel run` trains the 200k quick recipe instead — or the "
               "config file's",
               f"{TRAIN_DEFAULTS['steps']}, or the config file's")
    tr.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    from ..run.runs import RunDir
    from ..orchestration.stages import train_run
    from ..training.loop import TrainConfig, build, process_group

    if getattr(args, "seeds", None):
        return _train_seeds(args, extra)
    if args.cuda_graph != "auto":
        raise UsageError("--cuda-graph applies to --seeds (the stacked step); a run alone is not recorded")
    if args.stack != "auto":
        raise UsageError("--stack applies to --seeds (how several seeds train at once)")
    rank, _ = process_group()  # under torchrun only rank 0 touches the folder
    if args.resume is not None:
        given = [f"--{k.replace('_', '-')}" for k in ("task", "arch", "params", "seed", "batch_size", "lr", "config", "out")
                 if getattr(args, k, None) is not None] + (["--force"] if args.force else []) + list(extra[:1])
        if given:
            raise UsageError(f"{given[0]} cannot be changed on --resume (the run keeps its configuration; only --steps may extend it)")
        run = RunDir(args.resume)
        record = run.read_config()
        fields = dict(record["train"])
        if args.steps is not None:
            done = run.latest_step()
            if args.steps < done:
                raise UsageError(f"invalid steps: {run.path} is already at step {done}; --steps must be ≥ {done}")
            fields["steps"] = args.steps
        fields["progress"] = not args.no_progress and fields.get("progress", True)
        if args.log:  # trackers change no result: a resumed run may add or change them
            fields["trackers"] = list(dict.fromkeys(args.log))
        cfg = TrainConfig.from_dict(fields)
        if rank == 0:
            diverged = divergence_note(run, "resuming from")  # trained on past it, it may diverge again
            if diverged:  # on standard output: a resume that diverges again is refused in one line on standard error
                print(diverged, flush=True)
            print(f"resuming {run.path} from step {run.latest_step()} of {cfg.steps} ({cfg.arch} on {cfg.task})", flush=True)
        train_run(cfg, run, resume=True, log_lines=True)
        if rank == 0:
            print(f"resumed and finished {run.path}")
            for line in run.stale_results():  # results of the earlier checkpoint are not silently kept as current
                print(f"note: {line}; re-run `windtunnel eval` / `windtunnel analyze`", file=sys.stderr)
        return 0
    if args.out is None:
        raise UsageError("train needs --out DIR (or --resume DIR)")
    cfg = _train_config(args, extra)
    run = RunDir(args.out)
    _, model = build(cfg)  # validate task and model before anything on disk is touched
    if rank == 0:
        check_out(run, False, args.force)
        print(first_line(cfg, model, run, 0), flush=True)
    train_run(cfg, run, log_lines=True)
    if rank == 0:
        print(f"trained {cfg.arch} on {cfg.task}: {run.path}")
    return 0


def _train_seeds(args: argparse.Namespace, extra: list[str]) -> int:
    """``train --out DIR --seeds 0,1,2``: each seed's run in ``DIR-sSEED``, trained as one stacked model
    (:func:`windtunnel.training.stacked.train_stacked`) or as separate processes started together (``--stack``)."""
    from dataclasses import replace

    from ..orchestration import stacking
    from ..run.config import pick_device
    from ..run.runs import RunDir
    from ..training.stacked import train_stacked
    from ..training.loop import build, process_group

    if args.resume is not None or args.seed is not None:
        raise UsageError("--seeds trains new runs: it takes neither --resume (resume each run alone) nor --seed")
    if process_group()[1] > 1:
        raise UsageError("--seeds trains in one process: run it without torchrun")
    if args.out is None:
        raise UsageError("train --seeds needs --out DIR (each seed's run is DIR-sSEED)")
    base = _train_config(args, extra)
    cfgs = [replace(base, seed=seed) for seed in args.seeds]
    runs = [RunDir(f"{str(args.out).rstrip('/')}-s{seed}") for seed in args.seeds]
    build(base)  # validate task and model before anything on disk is touched
    stacked = stacking.wanted(args.stack, 1 if pick_device(base.device).type == "cuda" else 0)
    if not stacked and args.cuda_graph != "auto":
        raise UsageError("--cuda-graph applies to a stack (--stack on, or --stack auto on a GPU); these seeds train "
                         "as separate processes")
    seeds = ", ".join(map(str, args.seeds))
    if not stacked:
        return _train_separately(cfgs, runs, args.force)
    # the same command again, after a stop, continues the stack: every folder a run of exactly this configuration
    resume = not args.force and all(r.holds(c.to_dict()) for r, c in zip(runs, cfgs))
    for run in runs:
        check_out(run, resume, args.force)
    start = runs[0].latest_step() if resume else 0
    print(f"training {base.arch} on {base.task} for {base.steps} steps, seeds {seeds} "
          f"stacked into one model{f', resuming from step {start}' if resume else ''}: "
          f"{', '.join(str(r.path) for r in runs)}", flush=True)
    train_stacked(cfgs, runs, resume=resume, log_lines=True, graph=args.cuda_graph)
    print(f"trained {base.arch} on {base.task}: {', '.join(str(r.path) for r in runs)}")
    return 0


def _train_separately(cfgs: list[Any], runs: list[Any], force: bool) -> int:
    """The seeds as separate processes started together, the cores shared out among them (each
    ``max(1, cores // seeds)`` threads): the faster way on CPU cores (``benchmarks/stacked_cpu.py``).  Each run
    resumes where a stop left it when the same command is given again; each line a process prints names its seed."""
    import os

    from ..orchestration import executors
    from ..run import stopping

    resume = [not force and r.holds(c.to_dict()) for r, c in zip(runs, cfgs)]
    for run, again in zip(runs, resume):
        check_out(run, again, force)
    threads = max(1, (os.cpu_count() or 1) // len(cfgs))
    base = cfgs[0]
    print(f"training {base.arch} on {base.task} for {base.steps} steps, seeds "
          f"{', '.join(str(c.seed) for c in cfgs)} as {len(cfgs)} separate processes of {threads} thread(s) each: "
          f"{', '.join(str(r.path) for r in runs)}", flush=True)
    payloads = [{"config": c.to_dict(), "run_dir": str(r.path), "resume": again,
                 "threads": threads, "seed": c.seed} for c, r, again in zip(cfgs, runs, resume)]
    stopped: list[BaseException] = []
    failed: list[BaseException] = []
    for payload, _, error in executors.run_local(train_seed, payloads, len(payloads)):
        if isinstance(error, (stopping.TrainingStopped, stopping.NotStarted)):
            stopped.append(error)
        elif error is not None:
            failed.append(error)
        else:
            print(f"trained seed {payload['seed']}: {payload['run_dir']}", flush=True)
    if failed:
        raise failed[0]
    if stopped:
        raise stopped[0]
    print(f"trained {base.arch} on {base.task}: {', '.join(str(r.path) for r in runs)}")
    return 0


class _Prefixed:
    """Standard output with every line begun by ``prefix`` (which seed's process said it)."""

    def __init__(self, stream: Any, prefix: str) -> None:
        self.stream, self.prefix, self.at_start = stream, prefix, True

    def write(self, text: str) -> int:
        out = []
        for piece in text.splitlines(keepends=True):
            out.append((self.prefix if self.at_start else "") + piece)
            self.at_start = piece.endswith("\n")
        self.stream.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def train_seed(payload: dict[str, Any]) -> dict[str, Any]:
    """One seed of ``train --seeds`` in a process of its own: ``threads`` torch threads, its lines prefixed by its
    seed (a worker of :func:`windtunnel.orchestration.executors.run_local`)."""
    import contextlib

    import torch

    from ..orchestration.stages import train_run
    from ..run.runs import RunDir
    from ..training.loop import TrainConfig

    torch.set_num_threads(payload["threads"])
    with contextlib.redirect_stdout(_Prefixed(sys.stdout, f"[seed {payload['seed']}] ")):
        train_run(TrainConfig.from_dict(payload["config"]), RunDir(payload["run_dir"]), resume=payload["resume"],
                  log_lines=True)
    return {"run_dir": payload["run_dir"]}


def _train_config(args: argparse.Namespace, extra: list[str]) -> "Any":
    from ..training.loop import TrainConfig, load_config_file

    d: dict[str, Any] = {}
    if args.config is not None:
        if not args.config.strip():
            raise UsageError("--config needs a file name (got an empty one)")
        d.update(load_config_file(args.config))
    for key in ("task", "arch", "params", "steps", "seed", "batch_size", "lr"):
        val = getattr(args, key, None)
        if val is not None:  # flags given override the file; flags not given leave it alone
            d[key] = val
    if extra:
        d["task_params"] = {**d.get("task_params", {}), **parse_params(extra)}
    if getattr(args, "no_progress", False):
        d["progress"] = False
    if getattr(args, "log", None):
        d["trackers"] = list(dict.fromkeys(args.log))
    return TrainConfig.from_dict(d)


def train_args(q: argparse.ArgumentParser, params_default: str, steps_default: str) -> None:
    """The flags `train` and `run` share: architecture, size, steps, seed, run folder, progress, trackers."""
    q.add_argument("--arch", help="architecture (default transformer): " + ", ".join(architectures()))
    q.add_argument("--params", type=positive_int,
                   help=f"size the model to this many parameters, ±3%% (default: {params_default})")
    q.add_argument("--steps", type=positive_int, help=f"optimiser steps (default: {steps_default})")
    q.add_argument("--seed", type=seed_int, help="training seed: initialisation and data stream (default 0)")
    q.add_argument("--out", help="run folder (train: required; run: runs/main for the main job, otherwise runs/TASK "
                                 "with the architecture, preset, seed, steps, size and task parameters added "
                                 "where they are not the defaults)")
    q.add_argument("--force", action="store_true", help="replace an existing run folder")
    q.add_argument("--no-progress", action="store_true",
                   help="no progress bar: one line per evaluation interval instead (as when standard error is not a terminal)")
    q.add_argument("--log", action="append", choices=["tensorboard", "wandb", "mlflow"], metavar="TRACKER",
                   help="also log the metrics to this experiment tracker: tensorboard, wandb or mlflow "
                        "(repeatable; default none; its package must be installed)")


def first_line(cfg: "Any", model: "Any", run: "Any", done: int) -> str:
    """What is about to be trained, said before the first step: the run folder, task, architecture, size, steps."""
    params = ", ".join(f"{k}={v}" for k, v in cfg.task_params.items())
    where = f"resuming from step {done}" if done else "from step 0"
    return (f"training {cfg.arch} ({model.n_params():,} parameters) on {cfg.task}" + (f" ({params})" if params else "")
            + f" for {cfg.steps} steps of batch {cfg.batch_size}, {where}, into {run.path}")
