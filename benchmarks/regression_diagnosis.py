"""Where the regression transformer fails: the inference, or the readout?

    python benchmarks/regression_diagnosis.py [--steps 1000] [--log benchmarks/results/regression_diagnosis.jsonl]

The quick regression cell's transformer (d = 4, 16 points, 32 bins; ``windtunnel reproduce paper1``) ends between
the predictive of the current input alone and that of the last point: it barely reads its context.  Two variants of
the task, each trained on the cell's own recipe and scored against the same exact posterior, split the failure:

* ``readout`` — the exact posterior-predictive mean and standard deviation of ``y_i`` are given as inputs at
  each x-position (the two feature slots that are 0 there), so the network has only to turn them into 32 bin
  probabilities: if it then matches the posterior, its readout can express the answer and what fails is the
  inference from the context;
* ``paired`` — each y-position also carries its own ``x_j`` (the task's ``paired`` layout; the x slots are 0
  there otherwise), so no layer has to bring a point's input and response together.  Its cells at the full
  budget, 3 seeds, are ``regression_paired`` and ``regression_paired_long`` of ``windtunnel reproduce paper1``;
  here it is run at the same short budget as the readout control.

The posterior is the task's (``Regression.posterior`` reads the inputs of the x-positions and the responses of
the y-positions, which neither variant changes).  The readout variant is a task registered in this process only; every
run is an ordinary run folder under ``--out`` and resumes.  One line per variant is printed and appended as JSON to
``--log``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from common import run_logged, train_and_evaluate

from windtunnel import grid
from windtunnel.tasks.base import Episodes, register
from windtunnel.tasks.regression import Regression


@register
@dataclass(frozen=True)
class RegressionReadout(Regression):
    """Regression with the exact predictive mean and standard deviation as inputs at every x-position."""

    name = "regression_readout"
    summary = "regression, the exact predictive given as input (a readout control)"

    def sample(self, n: int, seed: int) -> Episodes:
        ep = super().sample(n, seed)
        mean, std = self.predictive(ep.features)
        ep.features[:, 0::2, self.d] = mean.float()
        ep.features[:, 0::2, self.d + 1] = std.float()
        return ep


#: variant: (task, task parameters added to the cell's)
VARIANTS = {"readout": (RegressionReadout.name, {}), "paired": (Regression.name, {"paired": True})}


def run_one(job: dict) -> dict:
    cfg, wall, model, m = train_and_evaluate(job["config"], job["run_dir"], n=1000)
    return {"variant": job["variant"], "task": cfg.task, "task_params": cfg.task_params, "steps": cfg.steps,
            "lr": cfg.lr, "wall_s": round(wall, 1), "kl": m["kl"], "entropy_mae_curve": m["entropy_mae_curve"],
            "params": model.n_params(), "seed": cfg.seed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=sorted(VARIANTS))
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default="runs/regression_diagnosis")
    ap.add_argument("--log", default="benchmarks/results/regression_diagnosis.jsonl")
    args = ap.parse_args()
    base = grid.preset("quick", "regression", "transformer")
    jobs = []
    for variant in args.variants:
        task, params = VARIANTS[variant]
        config = dict(base, task=task, task_params={**base["task_params"], **params}, steps=args.steps,
                      eval_every=args.steps, ckpt_every=max(500, args.steps // 4), progress=False)
        jobs.append({"variant": variant, "config": config,
                     "run_dir": str(Path(args.out) / f"{variant}-{args.steps}")})
    run_logged(run_one, jobs, args.jobs, args.log)


if __name__ == "__main__":
    main()
