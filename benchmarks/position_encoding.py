"""Which position encoding lets an HMM-filtering transformer generalise past its training length?

    python benchmarks/position_encoding.py [--steps 3000] [--params 200000] [--out runs/pos] [--json out.json]

Trains the same transformer (capacity-matched, same seed and data stream) on HMM filtering at
K=20 with ``pos`` = learned, rotary and none, then evaluates KL(Bayes‖model) in bits at K=20, 30
and 50 — overall and over the positions beyond the training horizon only (the all-position
aggregate hides extrapolation error behind the in-range positions).  Runs are
ordinary run folders, so a killed measurement resumes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from windtunnel.evaluation.evaluate import evaluate
from windtunnel.training.loop import TrainConfig, train
from windtunnel.run.runs import load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--params", type=int, default=200_000)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--out", default="runs/pos")
    ap.add_argument("--pos", nargs="+", default=["learned", "rotary", "none"])
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = {}
    for pos in args.pos:
        cfg = TrainConfig(task="hmm", task_params={"K": 20}, arch="transformer", params=args.params,
                          model={"n_layers": args.layers, "n_heads": 4, "pos": pos, "max_len": 128},
                          steps=args.steps, batch_size=args.batch, lr=2e-3, min_lr=2e-5, warmup=150,
                          eval_every=args.steps, ckpt_every=500, progress=False)
        run = Path(args.out) / pos
        train(cfg, run, resume=(run / "config.json").exists())
        task, model = load(run)
        res = evaluate(model, task, n=args.n, lengths=[20, 30, 50])
        row = {}
        for K in (20, 30, 50):
            d = res.lengths[K]
            row[f"kl@{K}"] = d["metrics"]["kl"]["value"]
            if d["beyond_horizon"]:
                row[f"kl_beyond@{K}"] = d["beyond_horizon"]["kl"]["value"]
        rows[pos] = row
        print(pos, {k: round(v, 5) for k, v in row.items()}, flush=True)
    print("\npos      KL@20     KL@30 (beyond 20)   KL@50 (beyond 20)")
    for pos, r in rows.items():
        print(f"{pos:8s} {r['kl@20']:.4f}   {r['kl@30']:.4f} ({r.get('kl_beyond@30', float('nan')):.4f})"
              f"    {r['kl@50']:.4f} ({r.get('kl_beyond@50', float('nan')):.4f})")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
