"""Where the regression transformer fails: the inference, the readout, or bringing each point together?

    python benchmarks/regression_diagnosis.py [--steps 3000] [--log benchmarks/results/regression_diagnosis.jsonl]

The quick regression cell's transformer (d = 4, 16 points, 32 bins; ``windtunnel reproduce paper1``) ends between
the predictive of the current input alone and that of the last point: it barely reads its context.  The cell's task
and two variants of it, each trained on the cell's own recipe and scored against the same exact posterior, split the
failure:

* ``interleaved`` — the cell's own task (each input ``x_j`` and its response ``y_j`` on consecutive positions);
* ``readout`` — the exact posterior-predictive mean and standard deviation of ``y_i`` are given as inputs at
  each x-position (the two feature slots that are 0 there), so the network has only to turn them into 32 bin
  probabilities: if it then matches the posterior, its readout can express the answer and what fails is the
  inference from the context;
* ``paired`` — each y-position also carries its own ``x_j`` (the task's ``paired`` layout; the x slots are 0
  there otherwise), so no layer has to bring a point's input and response together.  Its cells, 3 seeds at the
  cell's budget and four times it, are ``regression_paired`` and ``regression_paired_long`` of ``windtunnel
  reproduce paper1``.

Beside each KL, ``pairing_attention``: per layer, the largest over heads of the mean attention a y-position pays
to its own input's position just before it (a previous-token head that copies ``x_j`` onto ``y_j``'s position
is the first half of the circuit the interleaved layout needs), and ``pairing_uniform``, the same mean under
uniform causal attention, ``mean_j 1/(2j+2)``.

The posterior is the task's (``Regression.posterior`` reads the inputs of the x-positions and the responses of
the y-positions, which no variant changes).  The readout variant is a task registered in this process only; every
run is an ordinary run folder under ``--out`` and resumes.  One line per variant is printed and appended as JSON to
``--log``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import torch
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
VARIANTS = {"interleaved": (Regression.name, {}), "readout": (RegressionReadout.name, {}),
            "paired": (Regression.name, {"paired": True})}


@torch.no_grad()
def pairing_attention(model, task: Regression, n: int = 256, seed: int = 123) -> tuple[list[float], float]:
    """Per layer, max over heads of the mean attention from each y-position ``2j+1`` to ``2j``; and that mean
    under uniform causal attention."""
    ep = task.sample(n, seed=seed)
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.config.n_layers)]
    _, cache = model.run_with_cache(ep.tokens, ep.features, names=names)
    y = torch.arange(1, ep.tokens.shape[1], 2)
    shares = [float(cache[name][:, :, y, y - 1].mean((0, 2)).max()) for name in names]
    return shares, float((1.0 / (y + 1).double()).mean())


def run_one(job: dict) -> dict:
    from windtunnel import tasks

    cfg, wall, model, m = train_and_evaluate(job["config"], job["run_dir"], n=1000)
    shares, uniform = pairing_attention(model, tasks.make(cfg.task, **cfg.task_params))
    return {"variant": job["variant"], "task": cfg.task, "task_params": cfg.task_params, "steps": cfg.steps,
            "lr": cfg.lr, "wall_s": round(wall, 1), "kl": m["kl"], "entropy_mae_curve": m["entropy_mae_curve"],
            "pairing_attention": [round(v, 4) for v in shares], "pairing_uniform": round(uniform, 4),
            "params": model.n_params(), "seed": cfg.seed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=sorted(VARIANTS))
    ap.add_argument("--steps", type=int, default=3000)
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
