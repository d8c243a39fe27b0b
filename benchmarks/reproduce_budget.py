"""What ``windtunnel reproduce TARGET`` costs from nothing, projected from the committed cells' own timings.

    python benchmarks/reproduce_budget.py [--target paper1] [--preset quick] [--workers 2] [--results results]

For every cell the target plans (``windtunnel.orchestration.reproduce.plan``) it reads the cell's committed
``timings.json`` (training, evaluation and analysis seconds, each as that cell's run recorded them) and
sums them into the cell's work; a cell not yet committed (or committed from a GPU) is estimated from the cells that are: its
remaining work in the reproduction's own cost units (``reproduce._cost``: tokens weighted by the
architecture's step cost) times the measured seconds per unit of committed cells of the same
architecture.  It then prints the target's total core-time and its wall time on ``--workers`` workers
handing the cells out as ``reproduce`` does (:func:`windtunnel.orchestration.reproduce.schedule`: longest first for
several workers) and, beside it, cheapest first — the makespan of a greedy list schedule, each cell to
the first worker free.  The timings were recorded on 2 cores often shared with other jobs, so the figures
are what this machine did, not its floor (``table_budget.py`` gives the FLOP floor of the table).
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import NoReturn

from windtunnel.orchestration import reproduce

TARGET_MINUTES = 120.0
"""The wall time the quick reproduction of Paper I should fit in on 2 cores."""


def trained_on_gpu(results: Path, job: reproduce.Job) -> bool:
    """Whether the committed cell was trained on a GPU (its ``config.json`` names a CUDA device): its seconds
    say nothing of what the cell costs a CPU core."""
    path = reproduce.cell_dir(results, job.cell) / "config.json"
    return path.is_file() and str(json.loads(path.read_text())["train"].get("device", "")).startswith("cuda")


def cell_seconds(results: Path, job: reproduce.Job) -> float | None:
    """The committed cell's recorded work: training + evaluation + analysis seconds (``None`` if not committed,
    or trained on a GPU — such a cell is estimated like an uncommitted one)."""
    path = reproduce.cell_dir(results, job.cell) / "timings.json"
    if not path.is_file() or trained_on_gpu(results, job):
        return None
    t = json.loads(path.read_text())
    analysis = max(t.get("analyze_s", 0.0), t.get("reanalyze_s", 0.0)) if job.analyze else 0.0
    return t.get("train_s", 0.0) + t.get("eval_s", 0.0) + analysis


def makespan(seconds: list[float], workers: int) -> float:
    """Wall time of the jobs handed out in the given order, each to the first worker free."""
    free = [0.0] * workers
    for s in seconds:
        heapq.heappush(free, heapq.heappop(free) + s)
    return max(free)


def refuse(message: str) -> NoReturn:
    """One line on stderr and exit status 2: the script's answer to bad input."""
    print(f"reproduce_budget: {message}", file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="paper1", choices=list(reproduce.TARGETS))
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--results", default="results")
    ap.add_argument("--json", default=None, metavar="PATH",
                    help="also write the figures as JSON (benchmarks/results/reproduce_budget.json is the committed one)")
    args = ap.parse_args()
    results = Path(args.results)
    # bad input is refused in one line before any work, so a typo never costs the printed figures
    if args.workers < 1:
        refuse(f"--workers must be at least 1, not {args.workers}")
    if not results.is_dir():
        refuse(f"--results {args.results} is not a folder")
    if args.json and Path(args.json).is_dir():
        refuse(f"--json {args.json} is a folder, not a file")
    if args.json and not Path(args.json).parent.is_dir():
        refuse(f"--json {args.json}: its folder does not exist")
    jobs = reproduce.plan(args.target, args.preset)
    empty = results / ".reproduce_budget_nothing"  # no run folders: every cell's cost from nothing
    cost = {j.cell.folder: reproduce._cost(j, empty) for j in jobs}
    measured = {j.cell.folder: cell_seconds(results, j) for j in jobs}
    on_gpu = {j.cell.folder for j in jobs if trained_on_gpu(results, j)}
    rate: dict[str, list[float]] = defaultdict(list)
    for j in jobs:
        if measured[j.cell.folder] and cost[j.cell.folder]:
            rate[j.cell.arch].append(measured[j.cell.folder] / cost[j.cell.folder])
    seconds, estimated = {}, []
    for j in jobs:
        s = measured[j.cell.folder]
        if s is None:
            per = rate.get(j.cell.arch) or [r for rs in rate.values() for r in rs]
            s = cost[j.cell.folder] * sorted(per)[len(per) // 2]  # the median rate of its architecture
            estimated.append(j.cell.folder)
        seconds[j.cell.folder] = s
    by_arch: dict[str, float] = defaultdict(float)
    for j in jobs:
        by_arch[j.cell.arch] += seconds[j.cell.folder]
    total = sum(seconds.values())
    order = reproduce.schedule(jobs, empty, args.workers)
    cheap = reproduce.schedule(jobs, empty, 1)
    wall = makespan([seconds[j.cell.folder] for j in order], args.workers)
    wall_cheap = makespan([seconds[j.cell.folder] for j in cheap], args.workers)
    longest = max(seconds.items(), key=lambda kv: kv[1])
    print(f"# python benchmarks/reproduce_budget.py --target {args.target} --preset {args.preset} --workers {args.workers}")
    print(f"{args.target} ({args.preset}): {len(jobs)} cells, {len(jobs) - len(estimated)} committed "
          f"(timings as recorded), {len(estimated)} estimated from their architecture's seconds per cost unit")
    for arch, s in sorted(by_arch.items(), key=lambda kv: -kv[1]):
        n = sum(j.cell.arch == arch for j in jobs)
        print(f"  {arch:14s} {n:3d} cells  {s / 60:7.1f} core-min  ({s / total:.0%})")
    print(f"total work: {total / 60:.0f} core-min; longest cell {longest[0]} {longest[1] / 60:.0f} min")
    by_column: dict[str, float] = defaultdict(float)
    for j in jobs:
        by_column[f"{j.cell.column}/{j.cell.arch}"] += seconds[j.cell.folder]
    top = sorted(by_column.items(), key=lambda kv: -kv[1])[:8]
    print("costliest experiments (all seeds): " + ", ".join(f"{k} {v / 60:.0f}" for k, v in top) + " core-min")
    print(f"wall on {args.workers} workers: {wall / 60:.0f} min longest first (as reproduce hands them out), "
          f"{wall_cheap / 60:.0f} min cheapest first; the ideal split {total / args.workers / 60:.0f} min")
    print(f"against the {TARGET_MINUTES:.0f}-minute goal: {wall / 60 / TARGET_MINUTES:.1f}× over")
    if estimated:
        print("estimated: " + ", ".join(f"{f} (trained on a GPU)" if f in on_gpu else f for f in estimated))
    if args.json:
        write_json(args.json, {
            "command": f"python benchmarks/reproduce_budget.py --target {args.target} --preset {args.preset} "
                       f"--workers {args.workers} --results {args.results} --json {args.json}",
            "target": args.target, "preset": args.preset, "workers": args.workers,
            "cells": len(jobs), "committed": len(jobs) - len(estimated), "estimated": estimated,
            "trained_on_gpu": sorted(on_gpu),
            "core_min": {"total": total / 60, **{arch: s / 60 for arch, s in by_arch.items()}},
            "experiment_core_min": {k: v / 60 for k, v in sorted(by_column.items(), key=lambda kv: -kv[1])},
            "wall_min": {"longest_first": wall / 60, "cheapest_first": wall_cheap / 60,
                         "ideal": total / args.workers / 60},
            "wall_hours": wall / 3600,
            "cell_core_min": {folder: s / 60 for folder, s in seconds.items()},
        })


def write_json(path: str, doc: dict) -> None:
    """``doc`` to ``path``; a path the file cannot be written to is refused in one line (the figures are
    already printed)."""
    try:
        Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as exc:
        refuse(f"--json {path}: {exc.strerror or exc}")


if __name__ == "__main__":
    main()
