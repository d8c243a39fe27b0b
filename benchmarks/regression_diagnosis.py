"""Where the regression transformer fails: the inference, the readout, or bringing each point together?

    python benchmarks/regression_diagnosis.py [--steps 3000] [--log benchmarks/results/regression_diagnosis.jsonl]
    python benchmarks/regression_diagnosis.py --probe RUN [RUN ...]

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

``--probe RUN…`` trains nothing: it reads trained run folders (a cell's ``results/quick/runs/...``, or this
script's own under ``--out``) with ``pair_probe`` — per layer, the held-out R² of a linear read at each y-position
of that point's input ``x_j`` and of the product ``y_j·x_j`` — and appends one line per run to
``benchmarks/results/regression_pair_probe.jsonl`` (or ``--log``).

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

from windtunnel.run import grid
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


def ridge_r2(features: torch.Tensor, target: torch.Tensor, ridge: float = 1e-3) -> float:
    """Held-out R² of a ridge map ``features [N, D] → target [N, K]`` fitted on the first half of the rows and
    scored on the second: ``1 − Σ(residual²) / Σ((target − train mean)²)`` over every output, float64.  The
    penalty is ``ridge`` times the features' mean variance, so the fit does not depend on their scale."""
    X, Y = features.double(), target.double()
    half = X.shape[0] // 2
    mu_x, mu_y = X[:half].mean(0), Y[:half].mean(0)
    A, B = X[:half] - mu_x, Y[:half] - mu_y
    gram = A.T @ A
    W = torch.linalg.solve(gram + ridge * gram.diagonal().mean() * torch.eye(A.shape[1], dtype=A.dtype), A.T @ B)
    pred = (X[half:] - mu_x) @ W + mu_y
    return float(1 - ((Y[half:] - pred) ** 2).sum() / ((Y[half:] - mu_y) ** 2).sum())


@torch.no_grad()
def pair_probe(model, task: Regression, n: int = 1024, seed: int = 321) -> dict[str, list[float]]:
    """How far each layer has assembled the points at the y-positions ``2j+1``: the held-out R² (:func:`ridge_r2`)
    of a linear read of the residual stream there (the embedding, then each block's output) onto ``x_j`` (the
    input, which the interleaved layout must bring over from the position before) and onto ``y_j·x_j`` (the
    point's term of ``Xᵀy``, the statistic the posterior mean is built from, which no layer is given: a product
    an MLP must form once ``x_j`` and ``y_j`` share a position)."""
    ep = task.sample(n, seed=seed)
    L = model.config.n_layers
    names = ["blocks.0.hook_resid_pre", *(f"blocks.{l}.hook_resid_post" for l in range(L))]
    _, cache = model.run_with_cache(ep.tokens, ep.features, names=names)
    ys = torch.arange(1, ep.tokens.shape[1], 2)
    x = ep.features[:, ys - 1, : task.d]  # each point's input, from its x-position
    y = ep.features[:, ys, task.d : task.d + 1]
    rows = lambda t: t.reshape(-1, t.shape[-1])  # noqa: E731 - (episode, point) rows
    out: dict[str, list[float]] = {"x": [], "yx": []}
    for name in names:
        h = rows(cache[name][:, ys])
        out["x"].append(round(ridge_r2(h, rows(x)), 4))
        out["yx"].append(round(ridge_r2(h, rows(y * x)), 4))
    return out


def probe_runs(runs: list[str], log: str) -> None:
    """:func:`pair_probe` on trained run folders (a cell's ``results/quick/runs/...``): one JSON line each."""
    import json

    from windtunnel.run.runs import RunDir

    for path in runs:
        run = RunDir(path)
        task, model = run.load()
        cfg = run.read_config()
        # the run's evaluation (a cell's eval.json), else the training loop's last held-out one (512 episodes)
        kl = (run.read_eval()["metrics"]["kl"]["value"] if run.eval_path.is_file()
              else [json.loads(line) for line in run.metrics_path.read_text().splitlines() if '"eval"' in line][-1]["eval"]["kl"])
        row = {"probe": str(path), "task_params": cfg["task"]["params"], "model": cfg["train"]["model"],
               "steps": run.latest_step(), "kl": kl, "pair_probe": pair_probe(model, task)}
        print(json.dumps(row), flush=True)
        with open(log, "a") as f:
            f.write(json.dumps(row) + "\n")


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
    ap.add_argument("--probe", nargs="+", metavar="RUN",
                    help="train nothing: read trained run folders with pair_probe (log: regression_pair_probe.jsonl)")
    args = ap.parse_args()
    if args.probe:
        return probe_runs(args.probe, args.log if args.log != ap.get_default("log")
                          else "benchmarks/results/regression_pair_probe.jsonl")
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
