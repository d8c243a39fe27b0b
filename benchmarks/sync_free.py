"""A training step that never waits on the device, against one that reads its loss back every step.

    python benchmarks/sync_free.py [--preset quick] [--column main] [--arch transformer] [--steps 300] [--reps 3] [--device cpu]
                                   [--seeds 1] [--json benchmarks/results/sync_free_cpu.json]

The training loops watch the loss for non-finite values on the device (``windtunnel.training.optim.FiniteWatch``)
and read it back only at logs, evaluations, checkpoints and stops.  The way they worked before — ``if not
torch.isfinite(loss)`` after every step, which makes the host wait for every kernel queued so far — is put back here
for comparison by making :meth:`FiniteWatch.record` read its verdict at once.  Both ways train the same grid cell
(its recipe at ``--preset``, ``--steps`` steps, ``--seeds`` stacked when above 1, no evaluation or checkpoint on the way) in
the same invocation on the same device, alternating ``--reps`` times; the figure is each way's median wall time and
their ratio (read-back / sync-free: above 1, the sync-free step is faster).  On a CPU every operation is synchronous
already, so the ratio measures only the cost of the check itself (≈ 1); on a GPU it measures the stall.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from common import cell_arguments, cell_configs, report
from windtunnel.training import optim
from windtunnel.training.loop import TrainConfig, train
from windtunnel.training.stacked import train_stacked


def _timed(cfgs: list[TrainConfig], root: Path, read_back: bool) -> float:
    real = optim.FiniteWatch.record

    def reading(self: optim.FiniteWatch, step: int, losses: torch.Tensor) -> None:
        real(self, step, losses)
        bool((self.step >= 0).any())  # the host waits here, as the loop did before the watch

    optim.FiniteWatch.record = reading if read_back else real  # type: ignore[method-assign]
    try:
        t0 = time.perf_counter()
        if len(cfgs) == 1:
            train(cfgs[0], root)
        else:
            train_stacked(cfgs, [root / f"s{c.seed}" for c in cfgs])
        if cfgs[0].device and str(cfgs[0].device).startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - t0
    finally:
        optim.FiniteWatch.record = real  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cell_arguments(ap, steps=300, seeds=1)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    cfgs = cell_configs(args.preset, args.column, args.arch, args.seeds, args.steps, args.device)
    walls: dict[str, list[float]] = {"read_back": [], "sync_free": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps + 1):  # the first pair warms the allocator and kernels up, and is not counted
            for way in ("read_back", "sync_free"):
                wall = _timed(cfgs, Path(tmp) / f"{way}-{rep}", read_back=way == "read_back")
                if rep:
                    walls[way].append(wall)
    median = {k: statistics.median(v) for k, v in walls.items()}
    out = {"preset": args.preset, "column": args.column, "arch": args.arch, "seeds": args.seeds, "steps": args.steps, "reps": args.reps,
           "device": args.device if args.device != "cpu" else f"cpu ({torch.get_num_threads()} threads)",
           "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
           "wall_s": walls, "median_wall_s": median,
           "steps_per_s": {k: args.steps / v for k, v in median.items()},
           "speedup_sync_free_over_read_back": median["read_back"] / median["sync_free"]}
    report(out, args.json)


if __name__ == "__main__":
    main()
