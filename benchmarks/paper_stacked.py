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
with the architecture whose cells take longest.  Made to fit a nine-minute command on one GPU at the default
``--steps``; on a CPU it runs the same code (``--device cpu``; the graph way is then eager, and says so).
"""

from __future__ import annotations

import argparse
import dataclasses
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from common import matmul_peak_flops
from paper_gpu import step_seconds, timing_config
from table_budget import cell_flops
from windtunnel.run import grid
from windtunnel.run.runs import RunDir
from windtunnel.training.loop import TrainConfig, train
from windtunnel.training.stacked import train_stacked

MODES = ("graph", "compiled", "eager", "alone")
STACKED = ("graph", "compiled", "eager")
"""The ways that train the cell's seeds as one stack."""


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
    for mode in modes:
        try:
            got = timed(mode, cfgs if mode == "alone" else stack, steps)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--preset", default="paper", choices=list(grid.PRESETS))
    ap.add_argument("--columns", nargs="+", default=list(grid.TABLE_COLUMNS))
    ap.add_argument("--archs", nargs="+", default=list(grid.TABLE_ARCHS))
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="benchmarks/results/paper_stacked")
    ap.add_argument("--share-columns", action=argparse.BooleanOptionalAction, default=True,
                    help="stack the columns whose episodes have one shape together, as windtunnel table does "
                         "(default); --no-share-columns: each cell its own stack")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    rows = [json.loads(x) for x in rows_path.read_text().splitlines()] if rows_path.is_file() else []
    on_gpu = args.device.startswith("cuda")
    peak = matmul_peak_flops(n=8192 if on_gpu else 512, dtype=torch.bfloat16, device=args.device)
    machine = {"device": torch.cuda.get_device_name() if on_gpu else f"cpu ({torch.get_num_threads()} threads)",
               "torch": torch.__version__, "matmul_peak_tflops_bf16": peak / 1e12, "steps": args.steps}
    led = {(c, a): group for a in args.archs
           for group in (stacks(args.preset, args.columns, a) if args.share_columns else [[c] for c in args.columns])
           for c in group}
    for column in args.columns:
        for arch in args.archs:
            if any(r["column"] == column and r["arch"] == arch for r in rows):
                continue  # measured by an earlier, stopped command
            group = led[(column, arch)]
            if column != group[0]:  # in its leader's stack: only its seed alone is measured
                row = {"column": column, "arch": arch, "seeds": args.seeds, "in_stack_of": group[0],
                       **{k: v for k, v in measure(args.preset, column, arch, args.seeds, args.steps, args.device,
                                                   [m for m in args.modes if m == "alone"], peak).items()
                          if k not in ("column", "arch", "seeds")}}
            else:
                row = measure(args.preset, column, arch, args.seeds, args.steps, args.device, args.modes, peak,
                              group[1:])
            rows.append(row)
            with open(rows_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
            (out / "summary.json").write_text(json.dumps(summary(rows, machine), indent=1) + "\n")
    print(json.dumps(summary(rows, machine), indent=1))


if __name__ == "__main__":
    main()
