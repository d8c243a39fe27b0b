"""Which quick recipe lets binding form?  A measured sweep over shapes, learning rates and curricula.

    python benchmarks/recipe_sweep.py --task recall --arch transformer --grid shapes [--jobs 2]
    python benchmarks/recipe_sweep.py --task bijection_replacement --arch transformer mamba --grid curriculum
    python benchmarks/recipe_sweep.py --task bijection_replacement --grid block --steps 4000 --seeds 0 1 2
    python benchmarks/recipe_sweep.py --task recall_p16 --grid store --steps 8000 --jobs 1 \
        --log benchmarks/results/recipe_sweep_recall.jsonl
    python benchmarks/recipe_sweep.py --task regression --grid shapes --steps 3000 --jobs 1 \
        --log benchmarks/results/recipe_sweep_regression.jsonl
    python benchmarks/recipe_sweep.py --task regression --grid transformer --steps 3000 --jobs 1 \
        --log benchmarks/results/recipe_sweep_regression.jsonl

Every candidate is an ordinary run (``windtunnel.train``) at 200k parameters (capacity-matched),
one CPU thread per job, evaluated with ``windtunnel.evaluate`` on 1000 fresh episodes; each
prints one line — recipe, wall time, metrics — and appends it as JSON to ``--log`` so the choice
the quick preset makes can be re-checked.  Run folders land under ``--out`` and resume if killed.

Grids (the same knobs for every architecture; ``heads`` only applies to the transformer):

* ``shapes``: layers × heads ∈ {(2,2), (2,4), (4,2), (4,4)} at LR 2e-3 and 1e-3;
* ``curriculum``: the 2-layer shape with no curriculum, and with the first third of training on
  episodes whose keys come from a pool of 3 (``bijection`` ``key_pool``), at LR 2e-3 and 1e-3;
* ``store`` (recall): the experiment's own recipe, and the same behind a store curriculum — over the first
  third of training the episodes hold 4 pairs, then twice as many, and so on up to the task's own
  (``windtunnel.run.grid.store_curriculum``; the same key and value vocabularies);
* ``transformer``: the quick recipe (run as its grid cell) with one of the transformer's own choices changed at a time — learned or no
  position encoding (rotary is the default), LayerNorm (RMSNorm), the gated SwiGLU block (GELU);
* ``dimension`` (regression): the experiment's own recipe, and the same behind a dimension curriculum — over
  the first third of training the inputs use 1, then 2, … of the task's d dimensions
  (``windtunnel.run.grid.dimension_curriculum``);
* ``block``: the quick preset's own recipe (its shape, LR and curriculum) with the transformer's
  MLP as the papers' GELU block and as the gated SwiGLU block of Llama-family models
  (``mlp="swiglu"``), capacity-matched alike — the one change that separates our transformer from
  ``hf:llama`` at the same recipe.  Other architectures have no such knob and run the recipe once.

``--seeds`` repeats every candidate over training seeds (default: seed 0).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from common import run_logged, train_and_evaluate


def candidates(grid: str, task: str, arch: str, steps: int,
               blocks: tuple[str, ...] = ("swiglu", "gelu"), task_params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    from windtunnel.run import grid as experiment_grid  # not `grid`: that name is the sweep's grid

    base = experiment_grid.preset("quick", task, arch)
    base["task_params"] = {**base["task_params"], **(task_params or {})}
    base.update(steps=steps, eval_every=steps, ckpt_every=max(500, steps // 4), progress=False)
    if grid == "store":  # recall: the recipe as it is, and behind a store curriculum
        from windtunnel import tasks

        pairs = tasks.make(base["task"], **base["task_params"]).params()["pairs"]
        return [dict(base), dict(base, curriculum=experiment_grid.store_curriculum(pairs, steps))]
    if grid == "dimension":  # regression: the recipe as it is, and behind a dimension curriculum
        d = base["task_params"].get("d", 8)
        return [dict(base), dict(base, curriculum=experiment_grid.dimension_curriculum(d, steps))]
    if grid == "transformer":  # one of the transformer's own choices changed at a time (the recipe itself: its cell)
        assert arch == "transformer", "the transformer grid varies the transformer's own knobs"
        variants = [{"pos": "learned"}, {"pos": "none"}, {"norm": "layer"}, {"mlp": "swiglu"}]
        return [dict(base, model=dict(base["model"], **v)) for v in variants]
    if grid == "block":
        chosen = list(blocks) if arch == "transformer" else [None]
        return [dict(base, model=dict(base["model"], **({"mlp": b} if b else {}))) for b in chosen]
    out = []
    shapes = [(2, 2), (2, 4), (4, 2), (4, 4)] if grid == "shapes" else [(2, 2)]
    curricula: list[list[dict[str, Any]]] = [[]]
    if grid == "curriculum":
        curricula.append([{"until": steps // 3, "task_params": {"key_pool": 3}}])
    seen = set()
    for layers, heads in shapes:
        for lr in (2e-3, 1e-3):
            for cur in curricula:
                model = dict(base["model"], n_layers=layers)
                if arch == "transformer":
                    model["n_heads"] = heads
                else:
                    model.pop("n_heads", None)
                key = (json.dumps(model, sort_keys=True), lr, json.dumps(cur))
                if key in seen:  # heads do not change non-transformer archs
                    continue
                seen.add(key)
                out.append(dict(base, model=model, lr=lr, curriculum=cur))
    return out


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    cfg, wall, model, m = train_and_evaluate(job["config"], job["run_dir"], n=1000)
    return {
        "task": job["task"], "task_params": job.get("task_params"), "arch": cfg.arch, "model": cfg.model, "lr": cfg.lr, "steps": cfg.steps,
        "batch": cfg.batch_size, "curriculum": cfg.curriculum, "wall_s": round(wall, 1),
        "accuracy": m.get("accuracy"), "kl": m.get("kl"), "entropy_mae_curve": m.get("entropy_mae_curve"),
        "params": model.n_params(), "seed": cfg.seed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--arch", nargs="+", default=["transformer"])
    ap.add_argument("--grid", choices=["shapes", "curriculum", "block", "store", "dimension", "transformer"], default="shapes")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--blocks", nargs="+", choices=["swiglu", "gelu"], default=["swiglu", "gelu"],
                    help="block grid: the transformer MLPs to run")
    ap.add_argument("--set", dest="task_params", nargs="+", default=[], metavar="NAME=INT",
                    help="task parameters changed from the experiment's (e.g. n_keys=64): the task, not the recipe")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="runs/sweep")
    ap.add_argument("--log", default="benchmarks/results/recipe_sweep.jsonl")
    args = ap.parse_args()
    task_params = {k: int(v) for k, v in (p.split("=", 1) for p in args.task_params)}
    changed = "".join(f"-{k}{v}" for k, v in sorted(task_params.items()))
    jobs = []
    for arch in args.arch:
        for i, cfg in enumerate(candidates(args.grid, args.task, arch, args.steps, tuple(args.blocks), task_params)):
            tag = cfg["model"].get("mlp", i) if args.grid == "block" else i
            for seed in args.seeds:
                name = f"{args.task}{changed}-{arch}-{args.grid}-{tag}-{args.steps}" + (f"-s{seed}" if seed else "")
                jobs.append({"task": args.task, "task_params": cfg["task_params"], "config": dict(cfg, seed=seed),
                             "run_dir": str(Path(args.out) / name)})
    run_logged(run_one, jobs, args.jobs, args.log)

if __name__ == "__main__":
    main()
