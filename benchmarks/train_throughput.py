"""Training throughput of the paper-size transformer: tokens/s and model-FLOPs utilisation.

    python benchmarks/train_throughput.py [--batch 128] [--steps 20] [--threads 2] [--device cpu]
                                         [--profile] [--compile] [--bf16] [--json out.json]

Setting (the papers' bijection model): bijection V=20, L=19 (37 tokens), the 6-layer,
6-head, d=192 transformer (≈2.7M parameters), batch 128, AdamW with gradient clipping, fp32 on
CPU.  One step = fresh episodes + forward + backward + clip + AdamW, exactly as ``windtunnel.training.loop`` does.
MFU = achieved model FLOP/s ÷ a dense fp32 matmul peak measured in the same run.  The model FLOPs
per token are 6·N (weights, forward+backward) + 12·n_layers·T·d (attention scores and mixing),
the nanoGPT/PaLM convention.  The authors' TinyGPT step on this CPU ran ≈7,100 tokens/s
(≈114 GFLOP/s, measured on this CPU) — quoted, since their code is not vendored.
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from common import matmul_peak_flops, median_time
from windtunnel import models, tasks
from windtunnel.training.loop import TrainConfig, loss_fn

AUTHORS_TOKENS_PER_S = 7100.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--profile", action="store_true", help="print where the step time goes")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    task = tasks.make("bijection", V=20, L=19)
    model = models.make("transformer", task, n_layers=6, n_heads=6, d_model=192).to(args.device)
    net = torch.compile(model) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    T = task.seq_len
    n_params = model.n_params()
    cfg = model.config
    flops_per_token = 6 * n_params + 12 * cfg.n_layers * T * cfg.d_model
    step_no = [0]

    def step() -> None:
        ep = task.sample(args.batch, seed=step_no[0]).to(args.device)
        step_no[0] += 1
        with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.bf16):
            logits = net(**ep.inputs)
        loss = loss_fn(logits, ep, soft=False)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    def block() -> None:
        for _ in range(args.steps):
            step()

    sec = median_time(block, reps=3, warmup=1) / args.steps
    data_sec = median_time(lambda: task.sample(args.batch, seed=1), reps=10)
    tokens_per_s = args.batch * T / sec
    achieved = tokens_per_s * flops_per_token
    peak = matmul_peak_flops(device=args.device, dtype=torch.bfloat16 if args.bf16 else torch.float32,
                             n=4096 if args.device.startswith("cuda") else 1024)
    out = {
        "device": args.device, "threads": args.threads, "batch": args.batch, "seq_len": T, "params": n_params,
        "ms_per_step": 1000 * sec, "steps_per_s": 1 / sec, "tokens_per_s": tokens_per_s,
        "data_ms_per_batch": 1000 * data_sec, "model_gflops": achieved / 1e9, "matmul_peak_gflops": peak / 1e9,
        "mfu": achieved / peak, "ratio_vs_authors": tokens_per_s / AUTHORS_TOKENS_PER_S,
    }
    print(f"transformer 6x6x192 ({n_params:,} params), bijection V=20 L=19 (T={T}), batch {args.batch}, {args.device}")
    print(f"  {1000 * sec:.1f} ms/step = {1 / sec:.2f} steps/s = {tokens_per_s:,.0f} tokens/s "
          f"({tokens_per_s / AUTHORS_TOKENS_PER_S:.2f}x the authors' {AUTHORS_TOKENS_PER_S:,.0f} tokens/s on this CPU)")
    print(f"  model {achieved / 1e9:.1f} GFLOP/s vs measured matmul peak {peak / 1e9:.1f} GFLOP/s: MFU {100 * achieved / peak:.1f}%")
    print(f"  data generation {1000 * data_sec:.2f} ms/batch ({100 * data_sec / sec:.1f}% of a step)")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
