"""Beyond one machine: the executor options ``reproduce`` and ``table`` share (the local pool, or a SLURM job array
through submitit: :mod:`windtunnel.orchestration.executors`), and ``windtunnel status``, which says of every cell of a target
whether it is done, running (and where), failed or waiting."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .args import UsageError, positive_int
from .names import REPRODUCE_TARGETS
from .outputs import out_path

SLURM_FLAGS = {"slurm_tasks": "tasks", "slurm_partition": "partition", "slurm_time": "time", "slurm_gpus": "gpus",
               "slurm_cpus": "cpus", "slurm_mem_gb": "mem_gb", "slurm_parallel": "parallel",
               "slurm_account": "account", "slurm_qos": "qos", "slurm_folder": "folder", "slurm_warn_s": "warn_s"}
"""Each ``--slurm-*`` flag's :class:`~windtunnel.orchestration.executors.SlurmOptions` field."""


def add_executor_options(p: argparse.ArgumentParser) -> None:
    """``--executor`` and the ``--slurm-*`` options of a command that plans several cells."""
    g = p.add_argument_group("where the cells run")
    g.add_argument("--stack", choices=["auto", "on", "off"], default="auto",
                   help="train the seeds of a cell (and cells of other columns whose episodes have the same "
                        "shapes) as one stacked model, each seed still its own run folder: auto "
                        "(default) where the cells run on GPUs, on, or off (on CPU cores a stack is slower than "
                        "separate processes)")
    g.add_argument("--compile", action="store_true",
                   help="compile each cell's model with torch.compile (a stack: its vmapped forward and backward as "
                        "one program; a model the compiler refuses runs as it would, and says so): the same recipe, "
                        "its sums in another order")
    g.add_argument("--executor", choices=["local", "slurm"], default="local",
                   help="local: a process pool on this machine (default); slurm: one SLURM job array submitted "
                        "from this (login) node through submitit, each task a shard of cells worked by the local "
                        "pool on its node (pip install 'windtunnel[slurm]')")
    g.add_argument("--slurm-config", metavar="FILE",
                   help="a TOML file whose [slurm] table sets any of: tasks, partition, time, gpus, cpus, mem_gb, "
                        "parallel, account, qos, workers, folder, warn_s (flags override it)")
    g.add_argument("--slurm-tasks", type=positive_int, metavar="N", help="array tasks, each a shard of cells (default 1)")
    g.add_argument("--slurm-partition", metavar="NAME", help="the partition to submit to (default: the cluster's)")
    g.add_argument("--slurm-time", type=positive_int, metavar="MIN", help="each task's time limit in minutes (default 240)")
    g.add_argument("--slurm-gpus", type=int, metavar="N", help="GPUs per task (default 0); three cells at once on each")
    g.add_argument("--slurm-cpus", type=positive_int, metavar="N", help="CPUs per task (default 2)")
    g.add_argument("--slurm-mem-gb", type=positive_int, metavar="GB", help="memory per task")
    g.add_argument("--slurm-parallel", type=positive_int, metavar="N", help="tasks running at once (default: all)")
    g.add_argument("--slurm-account", metavar="NAME", help="the account to charge")
    g.add_argument("--slurm-qos", metavar="NAME", help="the quality of service")
    g.add_argument("--slurm-warn-s", type=int, metavar="S",
                   help="seconds before the time limit SLURM warns each task (default 120): its running cells "
                        "checkpoint the step they reached and stop; rerun the command to resume them")
    g.add_argument("--slurm-folder", metavar="DIR",
                   help="where submitit keeps each task's logs (default RESULTS/.slurm/TIME, on the shared filesystem)")


def slurm_from(args: argparse.Namespace) -> Any:
    """The :class:`~windtunnel.orchestration.executors.SlurmOptions` the flags ask for, ``None`` for the local executor (which
    refuses ``--slurm-*`` flags: they would be silently ignored)."""
    from ..orchestration import executors

    given = {field: getattr(args, flag) for flag, field in SLURM_FLAGS.items() if getattr(args, flag) is not None}
    if args.executor != "slurm":
        if given or args.slurm_config:
            flag = next(f for f in ("slurm_config", *SLURM_FLAGS) if getattr(args, f) is not None)
            raise UsageError(f"--{flag.replace('_', '-')} needs --executor slurm")
        return None
    if "workers" not in given and getattr(args, "workers", None) is not None:
        given["workers"] = args.workers
    return executors.slurm_options(out_path(args.slurm_config), **given)


def array_lines(plan: dict[str, Any], opts: Any) -> list[str]:
    """The dry-run's array plan, a line a task and the totals beside one node's projection."""
    lines = [f"as a SLURM job array of {len(plan['tasks'])} task(s), {opts.at_once(stacked=False)} cell(s) at once in each "
             "(hours estimated from committed timings, on the devices they were measured on):"]
    for i, t in enumerate(plan["tasks"]):
        lines.append(f"  task {i}: {len(t['cells'])} cells, ≈{t['hours']:.2f} h ({t['serial_h']:.2f} h one at a time)")
    lines.append(f"  the array ends in ≈{plan['makespan_h']:.2f} h; one such node alone would take "
                 f"≈{plan['serial_h'] / opts.at_once(stacked=False):.2f} h, one cell at a time ≈{plan['serial_h']:.2f} h")
    return lines


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``status``."""
    from ..run import grid

    st = sub.add_parser("status", help="which cells of a reproduction are done, running (and where), failed or "
                                       "waiting, from the run folders and the scheduler")
    st.add_argument("--results", default="results", help="the results folder (default results), as reproduce names it")
    st.add_argument("--target", default="all", choices=list(REPRODUCE_TARGETS), help="whose cells (default all)")
    st.add_argument("--preset", default="quick", choices=list(grid.PRESETS), help="quick (default) or paper")
    st.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace, extra: list[str]) -> int:
    """Exit 0 when every cell is done, 1 while any is running, waiting or failed."""
    from ..orchestration.reproduce import status

    if extra:
        raise UsageError(f"unexpected argument {extra[0]!r}")
    results = Path(out_path(args.results) or "results")
    if not results.is_dir():
        raise UsageError(f"invalid results: {results} is not a folder")
    rows = status(args.target, args.preset, results)
    counts: dict[str, int] = {}
    for folder, state, detail in rows:
        counts[state] = counts.get(state, 0) + 1
        if state != "done":
            print(f"  {folder}: {state}" + (f" ({detail})" if detail else ""))
    print(f"{args.target} ({args.preset}): {len(rows)} cells — "
          + ", ".join(f"{k} {counts.get(k, 0)}" for k in ("done", "running", "failed", "waiting")))
    return 0 if counts.get("done", 0) == len(rows) else 1
