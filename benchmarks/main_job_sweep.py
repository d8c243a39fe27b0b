"""Which recipe brings the main job (`windtunnel run`) closest to Bayes within its time budget?

    python benchmarks/main_job_sweep.py [--jobs 2] [--threads 1] [--only NAME ...] [--seeds 0 1 ...]

The main job is a 200k-parameter transformer on bijection (V = 10, L = 9) trained on sampled
labels.  Its error ends on a plateau set by the mass left on eliminated values (entropy error ≈
δ·log2(1/δ) for infeasible mass δ), and a plateau that moves with the batch size would be the
signature of gradient noise from sampled labels.  Every candidate here sees the same number of
training episodes (9000 steps × 128), unless it names its own ``steps``, and differs in batch size (hence steps), learning rate (peak or floor), block or
shape, so the sweep asks which change to the same data ends lower.  Each candidate is an
ordinary run (``windtunnel.train``), evaluated as the main job is (``windtunnel.evaluate``, 2000
fresh sequences, the evaluation seed ``EVAL_SEED``); each prints one line — recipe, wall time, metrics — and appends it
as JSON to ``--log``.  Run folders land under ``--out`` and resume if killed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from common import run_logged, train_and_evaluate

EPISODES = 9000 * 128  # the episodes every candidate sees: steps × batch
CANDIDATES: dict[str, dict[str, Any]] = {
    "b128-lr2e-3": {"batch_size": 128, "lr": 2e-3},  # the baseline: the quick recipe's learning rate
    "b256-lr2e-3": {"batch_size": 256, "lr": 2e-3},
    "b256-lr3e-3": {"batch_size": 256, "lr": 3e-3},
    "b512-lr3e-3": {"batch_size": 512, "lr": 3e-3},
    "b512-lr4e-3": {"batch_size": 512, "lr": 4e-3},
    # the same data and schedule, another block or shape (the gated MLP won the sawtooth's block sweep)
    "b128-swiglu": {"batch_size": 128, "lr": 2e-3, "model": {"n_layers": 4, "n_heads": 4, "mlp": "swiglu"}},
    "b128-lr3e-3": {"batch_size": 128, "lr": 3e-3},
    "b128-lr4e-3": {"batch_size": 128, "lr": 4e-3},  # the main job's learning rate
    "b128-lr3e-3-minlr2e-4": {"batch_size": 128, "lr": 3e-3, "min_lr": 2e-4},
    "b128-2x4": {"batch_size": 128, "lr": 2e-3, "model": {"n_layers": 2, "n_heads": 4}},
    # the eliminated values' logits fall at a rate set by the late learning rate: a higher floor
    "b128-minlr2e-4": {"batch_size": 128, "lr": 2e-3, "min_lr": 2e-4},
    "b128-lr3e-3-swiglu": {"batch_size": 128, "lr": 3e-3, "model": {"n_layers": 4, "n_heads": 4, "mlp": "swiglu"}},
    # fewer episodes (the time goal): a shorter cosine at the same or a higher peak learning rate
    "b128-lr4e-3-s6000": {"batch_size": 128, "lr": 4e-3, "steps": 6000},
    "b128-lr6e-3-s6000": {"batch_size": 128, "lr": 6e-3, "steps": 6000},
    "b128-lr6e-3-s4500": {"batch_size": 128, "lr": 6e-3, "steps": 4500},
    "b128-lr8e-3-s4500": {"batch_size": 128, "lr": 8e-3, "steps": 4500},
    # the readout (final norm + head) at 5× or 10× the learning rate: the eliminated values' logit gap
    # (≈ 8 nats at the end of the 9000-step run) is bounded by the head's norm, which grows with the LR
    "b128-lr4e-3-s4500-ro5": {"batch_size": 128, "lr": 4e-3, "steps": 4500, "readout_lr_mult": 5},
    "b128-lr4e-3-s3000-ro5": {"batch_size": 128, "lr": 4e-3, "steps": 3000, "readout_lr_mult": 5},
    "b128-lr4e-3-s3000-ro10": {"batch_size": 128, "lr": 4e-3, "steps": 3000, "readout_lr_mult": 10},
    "b128-lr4e-3-s3500-ro10": {"batch_size": 128, "lr": 4e-3, "steps": 3500, "readout_lr_mult": 10},
    "b128-lr4e-3-s3000-ro20": {"batch_size": 128, "lr": 4e-3, "steps": 3000, "readout_lr_mult": 20},
    # half the FLOPs per step: 2 layers of the same width (d_model 64, 100k parameters)
    "b128-lr4e-3-2x64": {"batch_size": 128, "lr": 4e-3, "params": 100_000, "model": {"n_layers": 2, "n_heads": 4}},
    "b128-lr6e-3-2x64-s6000": {"batch_size": 128, "lr": 6e-3, "steps": 6000, "params": 100_000,
                               "model": {"n_layers": 2, "n_heads": 4}},
}


def config(name: str, seed: int = 0) -> dict[str, Any]:
    from windtunnel.run import grid

    cfg = grid.preset("quick", grid.DEFAULT_TASK, "transformer")
    cfg.update(CANDIDATES[name], progress=False, seed=seed)
    cfg["steps"] = CANDIDATES[name].get("steps", EPISODES // cfg["batch_size"])
    cfg["eval_every"] = cfg["ckpt_every"] = max(250, cfg["steps"] // 10)
    return cfg


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    cfg, wall, _, m = train_and_evaluate(job["config"], job["run_dir"], n=2000, threads=job["threads"])
    return {"name": job["name"], "seed": cfg.seed, "batch": cfg.batch_size, "steps": cfg.steps, "lr": cfg.lr, "model": cfg.model,
            "readout_lr_mult": cfg.readout_lr_mult, "threads": job["threads"],
            "wall_s": round(wall, 1), "entropy_mae_curve": m["entropy_mae_curve"], "kl": m["kl"],
            "infeasible_mass": m["infeasible_mass"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=sorted(CANDIDATES), default=list(CANDIDATES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds (runs of seed s > 0 land in NAME-s<s>)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per job")
    ap.add_argument("--out", default="runs/main_sweep")
    ap.add_argument("--log", default="benchmarks/results/main_job_sweep.jsonl")
    args = ap.parse_args()
    jobs = [{"name": n, "config": config(n, seed), "threads": args.threads,
             "run_dir": str(Path(args.out) / (n if seed == 0 else f"{n}-s{seed}"))}
            for n in args.only for seed in args.seeds]
    run_logged(run_one, jobs, args.jobs, args.log)

if __name__ == "__main__":
    main()
