"""How fast is Mamba's selective scan, and a Mamba training step against the transformer's?

    python benchmarks/mamba_scan.py [--threads 1] [--reps 5] [--json out.json]

Two measurements, everything in one run so the ratios share the machine's state:

1. the scan alone, forward + backward, at the quick HMM shape of the 200k-parameter Mamba
   (batch 64, T = 73, d_inner 158, d_state 16), for the step-by-step reference
   (``selective_scan_ref``), the vectorised pure-PyTorch scan (``loop`` / ``doubling``) and the
   fused C++ kernel (``fused``, when it can be built);
2. one full training step (fresh batch, forward, backward, AdamW) of the quick-preset models at
   200k parameters on bijection and HMM: transformer, Mamba with the fused scan, Mamba with the
   reference scan — the ratio Mamba / transformer is the figure to watch — and Mamba with the
   scan replaced by an elementwise stand-in (``u · SiLU(z)``: same projections, convolution, norms
   and optimiser, no recurrence), the floor that no scan, however fast, can go below.
"""

from __future__ import annotations

import argparse
import json

import torch

from common import median_time
from windtunnel import grid, models, tasks
from windtunnel.models.mamba import cpu_kernel, selective_scan, selective_scan_ref
from windtunnel.training import loss_fn


def scan_times(reps: int) -> dict[str, float]:
    g = torch.Generator().manual_seed(0)
    B, T, Di, N = 64, 73, 158, 16
    xs = [torch.randn(B, T, Di, generator=g), torch.rand(B, T, Di, generator=g) * 0.1, -torch.rand(Di, N, generator=g),
          torch.randn(B, T, N, generator=g), torch.randn(B, T, N, generator=g), torch.randn(Di, generator=g)]
    xs = [x.requires_grad_(True) for x in xs]
    fns = {"ref": selective_scan_ref, "loop": lambda *a: selective_scan(*a, method="loop"),
           "doubling": lambda *a: selective_scan(*a, method="doubling")}
    if cpu_kernel() is not None:
        fns["fused"] = lambda *a: selective_scan(*a, method="fused")
    out = {}
    for name, fn in fns.items():
        def run() -> None:
            fn(*xs).sum().backward()
        out[name] = median_time(run, reps)
    return out


def _no_scan(u, delta_raw, A, B, C, D, z, method="auto"):  # noqa: ANN001 - gated_selective_scan's signature
    """The gated scan's stand-in for the floor measurement: keeps every other cost of the block."""
    return u * torch.nn.functional.silu(z)


def step_time(task_name: str, arch: str, reps: int, no_scan: bool = False, **model_overrides) -> float:
    if no_scan:
        import windtunnel.models.mamba as mamba

        real = mamba.gated_selective_scan
        mamba.gated_selective_scan = _no_scan
        try:
            return step_time(task_name, arch, reps, **model_overrides)
        finally:
            mamba.gated_selective_scan = real
    cfg = grid.preset("quick", task_name, arch)
    task = tasks.make(cfg["task"], **cfg["task_params"])
    torch.manual_seed(0)
    model = models.make(arch, task, params=cfg["params"], **{**cfg["model"], **model_overrides})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    seed = [0]

    def step() -> None:
        ep = task.sample(cfg["batch_size"], seed[0])
        seed[0] += 1
        loss = loss_fn(model(**ep.inputs), ep, soft=task.soft_targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return median_time(step, reps, warmup=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    scans = scan_times(args.reps)
    print(f"scan fwd+bwd, B=64 T=73 d_inner=158 d_state=16, {args.threads} thread(s):")
    for name, t in scans.items():
        print(f"  {name:9s} {1000 * t:8.1f} ms   ({scans['ref'] / t:5.2f}x the reference)")
    steps: dict[str, dict[str, float]] = {}
    for task_name in ("bijection", "hmm"):
        row = {"transformer": step_time(task_name, "transformer", args.reps),
               "mamba": step_time(task_name, "mamba", args.reps),
               "mamba_ref_scan": step_time(task_name, "mamba", args.reps, scan="ref"),
               "mamba_no_scan": step_time(task_name, "mamba", args.reps, no_scan=True)}
        steps[task_name] = row
        print(f"training step, quick preset, {task_name}: transformer {1000 * row['transformer']:.0f} ms, "
              f"mamba {1000 * row['mamba']:.0f} ms ({row['mamba'] / row['transformer']:.2f}x), "
              f"mamba with the reference scan {1000 * row['mamba_ref_scan']:.0f} ms "
              f"({row['mamba_ref_scan'] / row['transformer']:.2f}x), "
              f"mamba without a scan {1000 * row['mamba_no_scan']:.0f} ms ({row['mamba_no_scan'] / row['transformer']:.2f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scan_s": scans, "step_s": steps, "threads": args.threads}, f, indent=1)


if __name__ == "__main__":
    main()
