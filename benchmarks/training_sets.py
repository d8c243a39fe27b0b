"""Host time of a stack's batches where each member trains on a fixed training set: a cache of one set against one
set per member, in the same run.

    python benchmarks/training_sets.py [--preset paper] [--column hmm_fixed] [--members 3 12 24] [--steps 5]
                                       [--json benchmarks/results/training_sets.json]

A stacked step asks for each member's batch in turn (``windtunnel.training.streams.step_batch``).  With a fixed
training set (``train_set``: the ``hmm_fixed*`` cells, 10,000 episodes) the batch is drawn from the member's set, which
the process keeps in ``streams.TRAINING_SETS``.  A cache that held one set (``TrainingSets(budget=1)``: the newest
only) sampled every member's whole set anew at every step, members alternating; the cache as it is keeps one per
member.  For each member count the figure is the host seconds of one step's batches, both ways, after ``--steps``
warm steps, and their ratio (one set / one per member).  Nothing is trained: this is the host work a recorded GPU
step of ≈ 12 ms (the transformer's HMM stack on an H200) waits behind.
"""

from __future__ import annotations

import argparse
import time

import torch

from common import report
from windtunnel import tasks
from windtunnel.run import grid
from windtunnel.training import streams
from windtunnel.training.loop import TrainConfig


def member_configs(preset: str, column: str, members: int) -> list[TrainConfig]:
    """``members`` seeds of the grid cell's transformer recipe (its data stream is what matters here)."""
    out = []
    for seed in range(members):
        c = grid.Cell(preset, column, "transformer", seed).config()
        out.append(TrainConfig(**{k: v for k, v in c.items() if k in TrainConfig.__dataclass_fields__}))
    return out


def step_seconds(cfgs: list[TrainConfig], task: tasks.Task, cache: streams.TrainingSets, steps: int) -> float:
    """Median host seconds of one step's batches for every member, through ``cache``, after one warm step."""
    streams.TRAINING_SETS, saved = cache, streams.TRAINING_SETS
    try:
        times = []
        for step in range(steps + 1):
            t0 = time.perf_counter()
            for c in cfgs:
                streams.step_batch(c, task, step, shards=1)
            times.append(time.perf_counter() - t0)
        return sorted(times[1:])[len(times[1:]) // 2]
    finally:
        streams.TRAINING_SETS = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--column", default="hmm_fixed")
    ap.add_argument("--members", type=int, nargs="+", default=[3, 12, 24])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for m in args.members:
        cfgs = member_configs(args.preset, args.column, m)
        task = tasks.make(cfgs[0].task, **cfgs[0].task_params)
        one = step_seconds(cfgs, task, streams.TrainingSets(budget=1), args.steps)
        each = step_seconds(cfgs, task, streams.TrainingSets(budget=2**40), args.steps)
        rows.append({"members": m, "one_set_s": one, "per_member_s": each, "speedup": one / each})
        print(f"{m} members: one set {one * 1e3:.1f} ms a step, one per member {each * 1e3:.2f} ms ({one / each:.0f}×)",
              flush=True)
    report({"preset": args.preset, "column": args.column, "train_set": cfgs[0].train_set, "threads": args.threads,
            "steps": args.steps, "rows": rows}, args.json)


if __name__ == "__main__":
    main()
