"""How fast is Mamba's selective scan, and a Mamba training step against the transformer's?

    python benchmarks/mamba_scan.py [--threads 1] [--reps 5] [--device cpu|cuda] [--json out.json]

Two measurements, everything in one run so the ratios share the machine's state:

1. the scan alone, forward + backward, at the quick HMM shape of the 200k-parameter Mamba
   (batch 64, T = 73, d_inner 158, d_state 16), for the step-by-step reference
   (``selective_scan_ref``), the vectorised pure-PyTorch scan (``loop`` / ``doubling``) and the
   fused C++ kernel (``fused``, when it can be built) — with ``--device cuda``, the scans on the GPU instead, the
   Triton kernels (``triton``) among them where they pass their check against the reference there;
2. one full training step (fresh batch, forward, backward, AdamW) of the quick-preset models at
   200k parameters on bijection and HMM: transformer, Mamba with the fused scan, Mamba with the
   reference scan — the ratio Mamba / transformer is the figure to watch — and Mamba with the
   scan replaced by an elementwise stand-in (``u · SiLU(z)``: same projections, convolution, norms
   and optimiser, no recurrence), the floor that no scan, however fast, can go below.  The four
   steps are timed in turn within each round, and the Mamba / transformer ratio is the median of
   the per-round ratios, so a drift in the machine's speed cancels out of it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable

import torch

from common import median_time
from windtunnel import models, tasks
from windtunnel.models.scans import cpu_kernel, selective_scan, selective_scan_ref
from windtunnel.run import grid
from windtunnel.training.loop import loss_fn


def scan_times(reps: int, device: str = "cpu") -> dict[str, float]:
    g = torch.Generator().manual_seed(0)
    B, T, Di, N = 64, 73, 158, 16
    xs = [torch.randn(B, T, Di, generator=g), torch.rand(B, T, Di, generator=g) * 0.1, -torch.rand(Di, N, generator=g),
          torch.randn(B, T, N, generator=g), torch.randn(B, T, N, generator=g), torch.randn(Di, generator=g)]
    xs = [x.to(device).requires_grad_(True) for x in xs]
    fns = {"ref": selective_scan_ref, "loop": lambda *a: selective_scan(*a, method="loop"),
           "doubling": lambda *a: selective_scan(*a, method="doubling")}
    if device == "cpu" and cpu_kernel() is not None:
        fns["fused"] = lambda *a: selective_scan(*a, method="fused")
    if device.startswith("cuda"):
        from windtunnel.models.scans import triton_available

        if triton_available(device):  # compiled and checked against the reference on this GPU
            fns["triton"] = lambda *a: selective_scan(*a, method="triton")
    out = {}
    for name, fn in fns.items():
        def run() -> None:
            fn(*xs).sum().backward()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        out[name] = median_time(run, reps)
    return out


def _no_scan(u, delta_raw, A, B, C, D, z, method="auto"):  # noqa: ANN001 - gated_selective_scan's signature
    """The gated scan's stand-in for the floor measurement: keeps every other cost of the block."""
    return u * torch.nn.functional.silu(z)


def make_step(task_name: str, arch: str, no_scan: bool = False, **model_overrides) -> Callable[[], None]:
    """One training step (fresh batch, forward, backward, AdamW) of the quick-preset ``arch`` on ``task_name``."""
    import windtunnel.models.mamba as mamba

    cfg = grid.preset("quick", task_name, arch)
    task = tasks.make(cfg["task"], **cfg["task_params"])
    torch.manual_seed(0)
    model = models.make(arch, task, params=cfg["params"], **{**cfg["model"], **model_overrides})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    seed = [0]

    def step() -> None:
        ep = task.sample(cfg["batch_size"], seed[0])
        seed[0] += 1
        real = mamba.gated_selective_scan
        if no_scan:
            mamba.gated_selective_scan = _no_scan
        try:
            loss = loss_fn(model(**ep.inputs), ep, soft=task.soft_targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        finally:
            mamba.gated_selective_scan = real

    return step


def interleaved_times(steps: dict[str, Callable[[], None]], reps: int, warmup: int = 2) -> dict[str, list[float]]:
    """Wall seconds of each step, the variants taken in turn within every round: a ratio of two
    variants in the same round shares the machine's state (its speed drifts over minutes here)."""
    for _ in range(warmup):
        for fn in steps.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(reps):
        for name, fn in steps.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda: the scans alone on the GPU, Triton's among them")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    scans = scan_times(args.reps, args.device)
    print(f"scan fwd+bwd, B=64 T=73 d_inner=158 d_state=16, {args.device}, {args.threads} thread(s):")
    for name, t in scans.items():
        print(f"  {name:9s} {1000 * t:8.1f} ms   ({scans['ref'] / t:5.2f}x the reference)")
    if args.device != "cpu":  # training steps on a GPU: benchmarks/paper_gpu.py
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"scan_s": scans, "device": torch.cuda.get_device_name(), "threads": args.threads}, f,
                          indent=1)
        return
    steps: dict[str, dict[str, float]] = {}
    for task_name in ("bijection", "hmm"):
        times = interleaved_times({
            "transformer": make_step(task_name, "transformer"),
            "mamba": make_step(task_name, "mamba"),
            "mamba_ref_scan": make_step(task_name, "mamba", scan="ref"),
            "mamba_no_scan": make_step(task_name, "mamba", no_scan=True),
        }, args.reps)
        row = {name: statistics.median(t) for name, t in times.items()}
        ratios = sorted(m / t for m, t in zip(times["mamba"], times["transformer"]))
        row["mamba_over_transformer"] = statistics.median(ratios)
        steps[task_name] = row
        print(f"training step, quick preset, {task_name}: transformer {1000 * row['transformer']:.0f} ms, "
              f"mamba {1000 * row['mamba']:.0f} ms ({row['mamba_over_transformer']:.2f}x, per-round ratios "
              f"{ratios[0]:.2f}-{ratios[-1]:.2f}), "
              f"mamba with the reference scan {1000 * row['mamba_ref_scan']:.0f} ms "
              f"({row['mamba_ref_scan'] / row['transformer']:.2f}x), "
              f"mamba without a scan {1000 * row['mamba_no_scan']:.0f} ms ({row['mamba_no_scan'] / row['transformer']:.2f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scan_s": scans, "step_s": steps, "threads": args.threads}, f, indent=1)


if __name__ == "__main__":
    main()
