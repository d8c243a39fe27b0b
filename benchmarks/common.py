"""Shared helpers for the benchmark scripts (timing and a same-run matmul peak)."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def median_time(fn: Callable[[], object], reps: int, warmup: int = 1) -> float:
    """Median wall seconds of ``fn()`` over ``reps`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_peak_flops(n: int = 1024, reps: int = 5, dtype: torch.dtype = torch.float32, device: str = "cpu") -> float:
    """Achievable dense-matmul FLOP/s on this machine, measured now (2·n³ per n×n matmul)."""
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)

    def run() -> None:
        for _ in range(4):
            a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return 4 * 2 * n**3 / median_time(run, reps)


def run_logged(fn: Callable[[dict], dict], jobs: list[dict], workers: int, log: str) -> None:
    """Run ``fn`` over ``jobs`` in ``workers`` processes; print each result row as JSON as it comes
    and append it to the JSON-lines file ``log`` (so a sweep's choice can be re-checked later)."""
    import json
    from concurrent.futures import ProcessPoolExecutor
    from pathlib import Path

    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for row in pool.map(fn, jobs):
            print(json.dumps(row), flush=True)
            with open(log, "a") as f:
                f.write(json.dumps(row) + "\n")


def train_and_evaluate(config: dict, run_dir: str, n: int, threads: int = 1) -> tuple:
    """Train one run (``windtunnel.train``; resumes a killed one) on ``threads`` torch threads,
    then evaluate it on ``n`` fresh sequences (``windtunnel.evaluate``, its default seed).
    Returns ``(TrainConfig, training wall seconds, model, {metric: value})``."""
    from pathlib import Path

    from windtunnel.evaluation.evaluate import evaluate
    from windtunnel.training.loop import TrainConfig, train
    from windtunnel.run.runs import load

    torch.set_num_threads(threads)
    cfg = TrainConfig.from_dict(config)
    run = Path(run_dir)
    t0 = time.perf_counter()
    train(cfg, run, resume=(run / "config.json").is_file())
    wall = time.perf_counter() - t0
    task, model = load(run)
    res = evaluate(model, task, n=n, n_boot=200)
    return cfg, wall, model, {k: v["value"] for k, v in res.metrics.items()}


def cell_configs(preset: str, column: str, arch: str, seeds: int, steps: int, device: str) -> list:
    """The ``TrainConfig`` of each of ``seeds`` seeds of a grid cell's recipe at ``preset``, cut to ``steps`` steps with
    no evaluation, checkpoint or log line on the way (a timing measures the training steps alone)."""
    from windtunnel.run import grid
    from windtunnel.training.loop import TrainConfig

    cfgs = []
    for s in range(seeds):
        c = grid.Cell(preset, column, arch, s).config()
        c.update(steps=steps, eval_every=10**9, ckpt_every=10**9, ckpt_minutes=0, log_checkpoints=False,
                 log_every=steps, progress=False, device=device)
        cfgs.append(TrainConfig(**{k: v for k, v in c.items() if k in TrainConfig.__dataclass_fields__}))
    return cfgs


def cell_arguments(ap, steps: int, seeds: int) -> None:  # noqa: ANN001 - an argparse.ArgumentParser
    """The options of a benchmark that trains one grid cell's seeds: which cell, how many seeds and steps, where."""
    ap.add_argument("--preset", default="quick", help="the recipe and size the cell is trained at")
    ap.add_argument("--column", default="main")
    ap.add_argument("--arch", default="transformer")
    ap.add_argument("--seeds", type=int, default=seeds)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json")


def report(out: dict, path: str | None) -> None:
    """Print a benchmark's record and, where ``path`` is given, write it there as JSON."""
    import json
    from pathlib import Path

    print(json.dumps(out, indent=1))
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(out, indent=1) + "\n")
