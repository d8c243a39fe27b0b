"""The regression sampler: episodes/s of ``sample`` with its exact posterior, today's path against
the reference path (a Cholesky solve per position, four normal CDFs per bin) measured in the same run.

    python benchmarks/regression_sampler.py [--n 4000] [--reps 5] [--threads 2]

Also prints where the time goes (predictive mean/std, bin masses, everything else).
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Iterator

import torch

from common import median_time
from windtunnel import tasks
from windtunnel.tasks import regression


@contextlib.contextmanager
def reference_path(task: regression.Regression) -> Iterator[None]:
    """Swap in the oracle implementations for the duration."""
    fast_mass, fast_pred = regression.normal_bin_mass, regression.Regression.predictive
    regression.normal_bin_mass = regression.normal_bin_mass_reference
    regression.Regression.predictive = regression.Regression.predictive_reference
    try:
        yield
    finally:
        regression.normal_bin_mass, regression.Regression.predictive = fast_mass, fast_pred


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    task = tasks.make("regression")
    features = task.sample(args.n, seed=0).features
    edges = task.bin_edges()
    rows = {}
    for label, ctx in (("reference", lambda: reference_path(task)), ("today", contextlib.nullcontext)):
        with ctx():
            total = median_time(lambda: task.sample(args.n, seed=1).posterior, args.reps)  # read: computed when first read
            pred = median_time(lambda: task.predictive(features), args.reps)
            mean, std = task.predictive(features)
            mass = median_time(lambda: regression.normal_bin_mass(mean, std, edges), args.reps)
        rows[label] = total
        print(f"{label:10s} {args.n / total:10,.0f} episodes/s   predictive {1e3 * pred:7.1f} ms   "
              f"bin masses {1e3 * mass:7.1f} ms   rest {1e3 * (total - pred - mass):7.1f} ms   (n={args.n})")
    print(f"speed-up {rows['reference'] / rows['today']:.1f}x  (regression defaults d={task.d}, points={task.points}, "
          f"C={task.C}; {args.threads} threads, median of {args.reps})")


if __name__ == "__main__":
    main()
