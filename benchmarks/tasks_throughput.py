"""Episodes per second for every task at its defaults (exact float64 posteriors included).

    python benchmarks/tasks_throughput.py [--n 20000] [--reps 5] [--threads 2] [--json out.json]

The HMM figure is compared with the authors' generator measured on the same 2-core CPU
(the authors' generator, measured on this CPU: 2,000 sequences with exact posteriors in 3.24 s ≈ 620 episodes/s;
their code is not vendored here, so that baseline is quoted, not re-run).  Target: ≥ 100×.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from windtunnel import tasks

AUTHORS_HMM_EPISODES_PER_S = 2000 / 3.24  # the authors' generator on this CPU, construction + __getitem__


def measure(name: str, n: int, reps: int) -> dict[str, float]:
    task = tasks.make(name)
    task.sample(min(n, 256), seed=0).posterior  # warm-up
    times = []
    for r in range(reps):
        t0 = time.perf_counter()
        task.sample(n, seed=r + 1).posterior  # read: a posterior is computed when first read
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"n": n, "median_s": med, "episodes_per_s": n / med, "tokens_per_episode": task.seq_len}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = {}
    print(f"{'task':12s} {'episodes/s':>12s} {'median s':>9s}  (n={args.n}, {args.reps} reps, {args.threads} threads)")
    for name in [n for n in tasks.names() if n in ("bijection", "hmm", "recall", "regression", "coin", "sticky")]:
        rows[name] = measure(name, args.n, args.reps)
        print(f"{name:12s} {rows[name]['episodes_per_s']:12,.0f} {rows[name]['median_s']:9.3f}")
    ratio = rows["hmm"]["episodes_per_s"] / AUTHORS_HMM_EPISODES_PER_S
    rows["hmm"]["ratio_vs_authors"] = ratio
    print(f"\nHMM K=20: {rows['hmm']['episodes_per_s']:,.0f} episodes/s = {ratio:.0f}x the authors' "
          f"generator ({AUTHORS_HMM_EPISODES_PER_S:.0f}/s on this CPU; target >= 100x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
