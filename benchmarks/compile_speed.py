"""Does ``torch.compile`` make the quick cells' training steps faster on this CPU?

    python benchmarks/compile_speed.py [--archs transformer lstm] [--rounds 9] [--threads 1]

For every table column and architecture it builds the cell's task and model as the table does
(``windtunnel.run.grid``) and times one training step on fresh episodes (sampled before the clock starts) —
forward, the cell's loss, backward, AdamW; no clipping or schedule, which cost the same either way — eager and through
``torch.compile`` (inductor's CPU code generation), the two timed in turn in each round so that drift in
the machine's speed hits both alike.  It prints the median step of each, the median of the per-round
ratios (eager / compiled: above 1 means compiling is faster) and the seconds the first compiled steps
took (what every cell would pay once per process).  The figure for deciding whether the quick preset
should compile: the saving over a cell's steps against that one-time cost.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from windtunnel.run import grid
from windtunnel.training.loop import TrainConfig, build, loss_fn


def step_fn(column: str, arch: str, compiled: bool):
    cfg = TrainConfig.from_dict(grid.Cell("quick", column, arch, 0).config())
    task, model = build(cfg)[:2]
    net = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    count = [0]

    def step() -> float:
        ep = task.sample(cfg.batch_size, seed=count[0])
        count[0] += 1
        t0 = time.perf_counter()
        loss = loss_fn(net(**ep.inputs), ep, task.soft_targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", nargs="+", default=["transformer", "lstm"])
    ap.add_argument("--columns", nargs="+", default=list(grid.TABLE_COLUMNS))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# python benchmarks/compile_speed.py --archs {' '.join(args.archs)} --rounds {args.rounds} "
          f"--threads {args.threads} (torch {torch.__version__}, {args.threads} thread(s))")
    print(f"{'column':22s} {'arch':12s} {'eager ms':>9s} {'compiled ms':>12s} {'ratio':>6s} {'compile s':>10s}")
    for column in args.columns:
        for arch in args.archs:
            eager, compiled = step_fn(column, arch, False), step_fn(column, arch, True)
            t0 = time.perf_counter()
            for _ in range(3):  # the first compiled steps compile (forward, backward, optimizer)
                compiled()
            compile_s = time.perf_counter() - t0
            for _ in range(2):
                eager()
            e, c = [], []
            for _ in range(args.rounds):
                e.append(eager())
                c.append(compiled())
            ratio = statistics.median(a / b for a, b in zip(e, c))
            print(f"{column:22s} {arch:12s} {1e3 * statistics.median(e):9.1f} {1e3 * statistics.median(c):12.1f} "
                  f"{ratio:6.2f} {compile_s:10.1f}", flush=True)


if __name__ == "__main__":
    main()
