"""What sizing a model to a parameter budget costs: ``models.make(arch, task, params=N)``, each architecture.

    python benchmarks/sizing_speed.py [--reps 3] [--params 20000 200000]

Sizing searches the width by building candidate models on the meta device and counting their parameters
(``models.sizing.fit_width`` with ``count_params``).  The figure is the median wall time of one sizing, in a fresh
process (the first count in a process is what every worker of a reproduction pays), with the initialisers
skipped while counting (what ``count_params`` does) against the same search with them run on the meta device
(the baseline, measured in the same run, alternating): the ratio is the figure, the seconds depend on the load.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

ARCHS = ("transformer", "mamba", "lstm", "mlp_pointwise")

_ONE = """
import sys, torch
from windtunnel import models, tasks
from windtunnel.models import sizing
arch, params, baseline = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
if baseline:  # the count with the initialisers run on the meta device
    def count(config):
        with torch.device("meta"):
            return sizing._arch(config.arch).model(config).n_params()
    sizing.fit_width.__defaults__ = (*sizing.fit_width.__defaults__[:-1], count)
task = tasks.make("bijection", V=10, L=9)
import time
t0 = time.perf_counter()
models.make(arch, task, params=params)
print(time.perf_counter() - t0)
"""


def one(arch: str, params: int, baseline: bool) -> float:
    """Seconds of one sizing in a fresh process (the process's start and imports are not counted)."""
    out = subprocess.run([sys.executable, "-c", _ONE, arch, str(params), "1" if baseline else "0"],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--params", type=int, nargs="+", default=[20_000, 200_000])
    args = ap.parse_args(argv)
    if args.reps < 1 or any(p < 1 for p in args.params):
        print("invalid --reps or --params: must be positive", file=sys.stderr)
        return 2
    print(f"# python benchmarks/sizing_speed.py --reps {args.reps} --params {' '.join(map(str, args.params))}; "
          f"median wall seconds of one sizing in a fresh process")
    print(f"{'arch':<12} {'params':>8} {'skipped s':>10} {'run s':>8} {'speedup':>8}")
    for arch in ARCHS:
        for params in args.params:
            fast, slow = [], []
            for _ in range(args.reps):  # alternating, so a change in load falls on both alike
                fast.append(one(arch, params, False))
                slow.append(one(arch, params, True))
            f, s = statistics.median(fast), statistics.median(slow)
            print(f"{arch:<12} {params:>8} {f:>10.3f} {s:>8.3f} {s / f:>7.1f}×", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
