"""The paper table as stacks: per cell, its seeds trained as one stacked model (step recorded as a CUDA graph, and
eager) against one seed alone, and the whole table's projected time on one device from those step times.

    python benchmarks/paper_stacked.py [--steps 40] [--seeds 3] [--columns …] [--archs …] [--preset paper]
                                       [--modes graph compiled eager alone] [--device cuda] [--out DIR]

Each cell of the table (``windtunnel.run.grid``'s columns × rows at ``--preset``, each on its own recipe) is trained
``--steps`` steps in each of the ``--modes`` ways through the real loops, in scratch folders:

* ``graph`` — ``--seeds`` seeds stacked (``windtunnel.training.stacked``), the step recorded once as a CUDA graph
  where the device allows it and a replay reproduces the eager step (the row says which: ``step_program``);
* ``compiled`` — the same stack with ``compile`` on (the vmapped forward and its backward one inductor program, its
  elementwise work fused into fewer kernels), recorded as a CUDA graph as ``graph`` is; the row's ``forward`` says
  whether it compiled;
* ``eager`` — the same stack, the step run eagerly;
* ``alone`` — one seed through ``windtunnel.training.loop.train``, as each cell trains today.

The step time is read off the training log between its first and last logged steps (each log reads the device, so
the time includes every step queued before it; start-up, the graph's recording and the first steps are left out).
Columns that ``windtunnel table`` stacks together (their episodes have one shape: bijection with and without
replacement at the paper preset) are measured as that one stack, on the first column's row (``stack_columns``; the
other's row, ``in_stack_of``, times its seed alone only); ``--no-share-columns`` makes each cell its own stack.
Per cell: ms per step of each way, each member's throughput against the run alone (``member_speedup`` = seeds ×
alone ms / stacked ms), the model FLOPs per step (``table_budget.cell_flops``) as a share of a bf16 matmul peak
measured in the same run (``mfu_bf16``), and the cell's projected time at ``--seeds`` seeds to its recipe's end by
each way.  Rows are appended to ``OUT/rows.jsonl`` as they come and a cell already there is not measured again, so a
command stopped by its time limit resumes where it stopped; ``OUT/summary.json`` is rewritten after each cell: the
table's projected hours on one device, alone one cell at a time and stacked by the best way measured per cell,
with the architecture whose cells take longest.

A row is written only for a cell measured to its end in every way asked for.  A stop (SIGTERM, SIGUSR2, Ctrl-C, or
``--deadline-min`` running out) during a cell leaves that cell out — the training loop checkpoints and raises
:class:`windtunnel.run.stopping.TrainingStopped`, which ends the command instead of becoming one way's error — so a
rerun measures it.  With ``--deadline-min M`` no cell is started whose estimate (the longest cell measured so far in
``OUT``, the whole cell's wall time ``cell_wall_s``, with a quarter more for safety) no longer fits in what is left of
the ``M`` minutes, and a cell still running at the deadline is stopped and left out.  The default ways (graph and
alone) fit a nine-minute command on one GPU at the default ``--steps``; ``compiled`` compiles every cell's stack
(about a minute a cell) and ``eager`` adds a third run, so ask for them with ``--deadline-min``.  On a CPU it runs
the same code (``--device cpu``; the graph way is then eager, and says so).
"""

from __future__ import annotations

import argparse
import dataclasses
import contextlib
import io
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from common import matmul_peak_flops
from paper_gpu import step_seconds, timing_config
from table_budget import cell_flops
from windtunnel.run import grid
from windtunnel.run import stopping
from windtunnel.run.runs import RunDir
from windtunnel.training.loop import TrainConfig, train
from windtunnel.training.stacked import train_stacked

MODES = ("graph", "compiled", "eager", "alone")
STACKED = ("graph", "compiled", "eager")
"""The ways that train the cell's seeds as one stack."""
DEFAULT_MODES = ("graph", "alone")
"""The ways measured unless ``--modes`` says otherwise: what fits one nine-minute command on one GPU."""
ESTIMATE_MARGIN = 1.25
"""A cell's estimate is the longest cell measured so far times this (cells differ: recall's are the longest)."""


def configs(preset: str, column: str, arch: str, seeds: int, steps: int, device: str) -> list[TrainConfig]:
    """The cell's recipe for each seed, cut to ``steps`` steps logged four times, evaluated and saved only at the end."""
    fields = grid.preset(preset, column, arch)
    return [timing_config(fields, steps, device, seed=s, eval_n=64) for s in range(seeds)]


def timed(mode: str, cfgs: list[TrainConfig], steps: int) -> dict[str, Any]:
    """One way of training the cell for ``steps`` steps: seconds per step (from the log), wall seconds, and what ran
    the stacked step."""
    out = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out):
            if mode == "alone":
                train(cfgs[0], Path(tmp) / "run", until=steps)
                first = Path(tmp) / "run"
            else:
                runs = [Path(tmp) / f"m{i}" for i in range(len(cfgs))]  # a member a folder (one seed may train two columns)
                if mode == "compiled":
                    cfgs = [dataclasses.replace(c, compile=True) for c in cfgs]
                train_stacked(cfgs, runs, until=steps, log_lines=True, graph="off" if mode == "eager" else "auto")
                first = runs[0]
        wall = time.perf_counter() - t0
        sec, n = step_seconds(RunDir(first).metrics())
    def said(what: str) -> list[str]:
        return [line.split(what, 1)[1] for line in out.getvalue().splitlines() if what in line]

    program, forward = said("stacked step: "), said("stacked forward: ")
    return {"ms_per_step": 1000 * sec, "timed_steps": n, "wall_s": wall,
            **({"step_program": program[0] if program else "eager", "forward": forward[0] if forward else None}
               if mode != "alone" else {})}


def stacks(preset: str, columns: list[str], arch: str) -> list[list[str]]:
    """The columns whose cells of ``arch`` ``windtunnel table`` trains as one stack (equal
    ``windtunnel.training.stacked.stack_shape``: at the paper preset, bijection with and without replacement), in
    ``columns``' order, each list led by its first column."""
    from windtunnel.training.stacked import stack_shape

    keyed: dict[str, list[str]] = {}
    for column in columns:
        fields = TrainConfig(**grid.preset(preset, column, arch)).to_dict()
        keyed.setdefault(json.dumps(stack_shape(fields), sort_keys=True, default=str), []).append(column)
    return list(keyed.values())


def measure(preset: str, column: str, arch: str, seeds: int, steps: int, device: str, modes: list[str],
            peak: float, partners: list[str] | None = None) -> dict[str, Any]:
    """One cell's row; with ``partners`` (columns stacked with it), the stacked ways train all their seeds as one
    stack, whose time is the row's (``stack_columns``), and ``alone`` stays this column's seed alone."""
    partners = partners or []
    cfgs = configs(preset, column, arch, seeds, steps, device)
    stack = cfgs + [c for p in partners for c in configs(preset, p, arch, seeds, steps, device)]
    n_params, run_flops = cell_flops(preset, column, arch)
    step_flops = run_flops / cfgs[0].steps
    row: dict[str, Any] = {"column": column, "arch": arch, "params": n_params, "recipe_steps": cfgs[0].steps,
                           "seeds": seeds, **({"stack_columns": [column, *partners]} if partners else {})}
    t0 = time.perf_counter()
    for mode in modes:
        print(f"measuring {column}/{arch}: {mode}", file=sys.stderr, flush=True)
        try:
            got = timed(mode, cfgs if mode == "alone" else stack, steps)
        except stopping.TrainingStopped:
            raise  # a stop is not this way's result: the whole cell is left for a rerun
        except Exception as e:  # one way's failure is a field of the row, not the end of the measurement
            row[mode] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
            continue
        members = 1 if mode == "alone" else len(stack)
        sec = got["ms_per_step"] / 1000
        got["mfu_bf16"] = members * step_flops / sec / peak
        got["cell_h"] = cfgs[0].steps * sec * (seeds if mode == "alone" else 1) / 3600  # all seeds to the end
        row[mode] = got
    alone = row.get("alone", {}).get("ms_per_step")
    for mode in STACKED:
        if alone and "ms_per_step" in row.get(mode, {}):
            row[mode]["member_speedup"] = len(stack) * alone / row[mode]["ms_per_step"]
    row["cell_wall_s"] = time.perf_counter() - t0  # every way with its set-up: what a cell costs a command
    return row


def summary(rows: list[dict[str, Any]], machine: dict[str, Any]) -> dict[str, Any]:
    """The table's projected hours on one device: alone (each seed a run, one at a time) and stacked (each stack —
    a cell's seeds, with those of the columns stacked with it — by its fastest way measured), and the architecture
    whose cells take longest stacked."""
    def hours(row: dict[str, Any], modes: tuple[str, ...]) -> float | None:
        got = [row[m]["cell_h"] for m in modes if "cell_h" in row.get(m, {})]
        return min(got) if got else None

    alone = [hours(r, ("alone",)) for r in rows]
    # a column trained in another's stack (``in_stack_of``) costs nothing of its own: its stack's row holds the time
    stacked = [0.0 if r.get("in_stack_of") else hours(r, STACKED) for r in rows]
    by_arch: dict[str, float] = {}
    for r, h in zip(rows, stacked):
        by_arch[r["arch"]] = by_arch.get(r["arch"], 0.0) + (h or 0.0)
    speedups = [r[m]["member_speedup"] for r in rows for m in STACKED if "member_speedup" in r.get(m, {})]
    return {"machine": machine, "cells": len(rows),
            "table_h_alone": sum(h for h in alone if h is not None) if all(h is not None for h in alone) else None,
            "table_h_stacked": (sum(h for h in stacked if h is not None)
                                if all(h is not None for h in stacked) else None),
            "stacked_h_by_arch": by_arch, "slowest_arch": max(by_arch, key=by_arch.get) if by_arch else None,
            "member_speedup_min": min(speedups) if speedups else None,
            "member_speedup_max": max(speedups) if speedups else None,
            "graphed_cells": sum("CUDA graph" == r.get("graph", {}).get("step_program") for r in rows),
            "compiled_cells": sum(str(r.get("compiled", {}).get("forward")).startswith("vmapped, compiled")
                                  for r in rows)}


def cell_estimate_s(rows: list[dict[str, Any]], modes: list[str]) -> float | None:
    """Seconds the next cell is expected to take: the longest ``cell_wall_s`` among ``rows`` measured in all of
    ``modes`` (by this command or an earlier one into the same folder), times :data:`ESTIMATE_MARGIN`; ``None``
    before any such cell is measured."""
    walls = [r["cell_wall_s"] for r in rows if "cell_wall_s" in r and not r.get("in_stack_of")
             and all(m in r for m in modes)]
    return ESTIMATE_MARGIN * max(walls) if walls else None


class Deadline:
    """``minutes`` from now (``None``: no deadline).  When they run out a stop is requested the way a scheduler asks
    (SIGTERM to this process): the training loop of the cell then running checkpoints and raises
    :class:`~windtunnel.run.stopping.TrainingStopped`, and that cell is not written."""

    def __init__(self, minutes: float | None) -> None:
        self.end = None if minutes is None else time.monotonic() + 60 * minutes
        self.reached = False
        self._timer: threading.Timer | None = None
        if self.end is not None:
            self._timer = threading.Timer(max(0.0, self.end - time.monotonic()), self._stop)
            self._timer.daemon = True
            self._timer.start()

    def _stop(self) -> None:
        self.reached = True
        os.kill(os.getpid(), signal.SIGTERM)

    def left(self) -> float:
        """Seconds left (infinite without a deadline)."""
        return float("inf") if self.end is None else self.end - time.monotonic()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def refuse(message: str) -> None:
    """One line on stderr and exit status 2: the script's answer to bad input."""
    print(f"paper_stacked: {message}", file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--preset", default="paper", choices=list(grid.PRESETS))
    ap.add_argument("--columns", nargs="+", default=list(grid.TABLE_COLUMNS))
    ap.add_argument("--archs", nargs="+", default=list(grid.TABLE_ARCHS))
    ap.add_argument("--modes", nargs="+", default=list(DEFAULT_MODES), choices=MODES,
                    help=f"the ways each cell is trained (default: {' '.join(DEFAULT_MODES)}; also compiled, eager)")
    ap.add_argument("--deadline-min", type=float, default=None, metavar="M",
                    help="end within M minutes: no cell is started whose estimate no longer fits, and a cell still "
                         "running at the deadline is stopped and not written (a rerun measures it)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="benchmarks/results/paper_stacked")
    ap.add_argument("--share-columns", action=argparse.BooleanOptionalAction, default=True,
                    help="stack the columns whose episodes have one shape together, as windtunnel table does "
                         "(default); --no-share-columns: each cell its own stack")
    args = ap.parse_args()
    if args.steps < 2 or args.seeds < 1:
        refuse(f"--steps must be at least 2 and --seeds at least 1, not {args.steps} and {args.seeds}")
    if args.deadline_min is not None and not args.deadline_min > 0:
        refuse(f"--deadline-min must be positive, not {args.deadline_min}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        refuse(f"--out {out} is a file, not a folder")
    deadline = Deadline(args.deadline_min)  # counted from here: the command's whole time, set-up included
    with stopping.catching():  # a stop is noted, then honoured at the end of a training step or between cells
        run(args, out, deadline)
        deadline.cancel()
        asked = stopping.requested()
    if asked is not None and not deadline.reached:  # asked to end from outside: the shell's status for that signal
        raise SystemExit(128 + int(getattr(signal, asked, signal.SIGTERM)))


def run(args: argparse.Namespace, out: Path, deadline: Deadline) -> list[dict[str, Any]]:
    """Measure every cell of ``args`` not yet in ``OUT/rows.jsonl`` until they are done, a stop is requested or the
    deadline leaves too little for the next one; returns the rows (those of earlier commands included)."""
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    rows = [json.loads(x) for x in rows_path.read_text().splitlines()] if rows_path.is_file() else []
    on_gpu = args.device.startswith("cuda")
    # a CPU's bf16 matmul is slow and its peak only a reference for a CPU's own rows: a smaller product will do
    peak = matmul_peak_flops(n=8192 if on_gpu else 256, dtype=torch.bfloat16, device=args.device)
    machine = {"device": torch.cuda.get_device_name() if on_gpu else f"cpu ({torch.get_num_threads()} threads)",
               "torch": torch.__version__, "matmul_peak_tflops_bf16": peak / 1e12, "steps": args.steps}
    led = {(c, a): group for a in args.archs
           for group in (stacks(args.preset, args.columns, a) if args.share_columns else [[c] for c in args.columns])
           for c in group}
    todo = [(c, a) for c in args.columns for a in args.archs
            if not any(r["column"] == c and r["arch"] == a for r in rows)]  # measured by an earlier, stopped command
    why_stopped = None
    for i, (column, arch) in enumerate(todo):
        group = led[(column, arch)]
        modes = args.modes if column == group[0] else [m for m in args.modes if m == "alone"]
        estimate = cell_estimate_s(rows, args.modes)
        if stopping.requested():
            why_stopped = f"stopped before {column}/{arch}: {stopping.WHY.get(stopping.requested(), '')}"
        elif estimate is not None and estimate > deadline.left():
            why_stopped = (f"{column}/{arch} not started: its estimate, {estimate:.0f} s, exceeds the "
                           f"{max(deadline.left(), 0):.0f} s left before --deadline-min")
        if why_stopped:
            todo = todo[i:]
            break
        try:
            if column != group[0]:  # in its leader's stack: only its seed alone is measured
                row = {"column": column, "arch": arch, "seeds": args.seeds, "in_stack_of": group[0],
                       **{k: v for k, v in measure(args.preset, column, arch, args.seeds, args.steps, args.device,
                                                   modes, peak).items()
                          if k not in ("column", "arch", "seeds")}}
            else:
                row = measure(args.preset, column, arch, args.seeds, args.steps, args.device, modes, peak, group[1:])
        except stopping.TrainingStopped as exc:  # mid-cell: nothing of this cell is written, a rerun measures it
            why_stopped = (f"stopped during {column}/{arch} "
                           f"({'--deadline-min reached' if deadline.reached else stopping.WHY.get(exc.signal, exc.signal)}): "
                           "not written; a rerun measures it")
            todo = todo[i:]
            break
        rows.append(row)
        with open(rows_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
        (out / "summary.json").write_text(json.dumps(summary(rows, machine), indent=1) + "\n")
    else:
        todo = []
    doc = summary(rows, machine)
    if why_stopped:
        print(why_stopped, file=sys.stderr, flush=True)
        doc.update(stopped=why_stopped, not_measured=[f"{c}/{a}" for c, a in todo])
        (out / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))
    return rows


if __name__ == "__main__":
    main()
