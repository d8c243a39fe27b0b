"""Stacked seeds against separate processes: per-member training throughput of one cell's seeds.

    python benchmarks/stacked_cpu.py [--preset quick] [--column main] [--arch transformer] [--seeds 3] [--steps 150]
                                     [--cores 2] [--device cpu] [--compile]
                                     [--json benchmarks/results/stacked_cpu.json]

The same ``--seeds`` runs of a grid cell (its recipe at ``--preset``, ``--steps`` steps, no evaluation or checkpoint on the
way) trained two ways on the same machine in the same invocation: as one stacked model (``windtunnel.training.stacked``,
one process on all ``--cores``) and as separate processes started together, the cores shared out among them (each
``max(1, cores // seeds)`` torch threads) — what ``windtunnel reproduce --workers`` does today.  The figure is each
way's wall time for the whole set and their ratio (separate / stacked: above 1, stacking is faster per member), with
the steps per second each member made.  ``--compile`` times both ways again with ``compile`` on (the stack's vmapped
forward and its backward one inductor program; each separate run's model compiled), the compilers' time included,
and the compiled stack against the separate processes uncompiled, what CPU cores run by default (``compiled``).
Every run writes its own run folder under a temporary directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

import torch

from common import cell_arguments, cell_configs, report
from windtunnel.training.stacked import train_stacked
from windtunnel.training.loop import TrainConfig, train


def _alone(args: tuple[dict, str, int]) -> float:
    cfg, out, threads = args
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    train(TrainConfig(**cfg), out)
    return time.perf_counter() - t0


def both_ways(cfgs: list[TrainConfig], root: Path, cores: int) -> tuple[float, float, list[float]]:
    """Wall seconds of the runs ``cfgs`` as one stack on ``cores`` threads, then as separate processes sharing the
    cores, and of each separate process."""
    torch.set_num_threads(cores)
    t0 = time.perf_counter()
    train_stacked(cfgs, [root / f"stacked-s{c.seed}" for c in cfgs])
    stacked = time.perf_counter() - t0
    threads = max(1, cores // len(cfgs))
    jobs = [(c.to_dict(), str(root / f"alone-s{c.seed}"), threads) for c in cfgs]
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(len(jobs)) as pool:
        each = pool.map(_alone, jobs)
    return stacked, time.perf_counter() - t0, each


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cell_arguments(ap, steps=150, seeds=3)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--compile", action="store_true",
                    help="also both ways with compile on (torch.compile: the stack's vmapped forward, each separate "
                         "run's model), the compilers' time included")
    args = ap.parse_args()
    cfgs = cell_configs(args.preset, args.column, args.arch, args.seeds, args.steps, args.device)
    with tempfile.TemporaryDirectory() as tmp:
        stacked, separate, each = both_ways(cfgs, Path(tmp) / "eager", args.cores)
        if args.compile:
            compiled = both_ways([dataclasses.replace(c, compile=True) for c in cfgs],
                                 Path(tmp) / "compiled", args.cores)
    out = {"preset": args.preset, "column": args.column, "arch": args.arch, "seeds": args.seeds, "steps": args.steps, "cores": args.cores,
           "device": args.device, "batch_size": cfgs[0].batch_size, "params": cfgs[0].params,
           "stacked_wall_s": stacked, "separate_wall_s": separate, "separate_each_s": each,
           "speedup_stacked_over_separate": separate / stacked,
           "member_steps_per_s": {"stacked": args.steps / stacked, "separate": args.steps / separate}}
    if args.compile:
        c_stacked, c_separate, c_each = compiled
        out["compiled"] = {"stacked_wall_s": c_stacked, "separate_wall_s": c_separate, "separate_each_s": c_each,
                           "speedup_stacked_over_separate": c_separate / c_stacked,
                           "member_steps_per_s": {"stacked": args.steps / c_stacked,
                                                  "separate": args.steps / c_separate},
                           # the compiled stack against what runs on CPU cores by default: separate, not compiled
                           "speedup_over_separate_eager": separate / c_stacked}
    report(out, args.json)


if __name__ == "__main__":
    main()
