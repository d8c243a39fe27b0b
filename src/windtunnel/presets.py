"""Named training recipes: ``quick`` (a laptop CPU, minutes) and ``paper`` (the papers' sizes, GPUs).

``preset(name, task, arch)`` returns the ``TrainConfig`` fields for one cell.  The ``quick``
sizes were measured on 2 CPU cores (see the closing notes and ``benchmarks/``); ``paper`` follows
the papers' sizes: the 6×6×192 transformer (≈2.67M parameters) for bijection and recall, 9 layers for
HMM, and every other architecture capacity-matched to the transformer.
"""

from __future__ import annotations

from typing import Any
from .errors import InvalidValue

PRESETS = ("quick", "paper")

# The main job's default (`windtunnel run` with no task): a transformer on a small bijection,
# trained longer than the table's quick cell.  Measured on 2 CPU cores: 5000 steps took 3.5 min
# and ended at entropy_mae_curve 0.00996 bits — too close to the 0.01 goal — so the default
# main job trains 9000 steps of batch 128 (≈6.5 min); batch 128 matters: batch 64 for 8000 steps
# plateaued at 0.011 bits (entropy is dominated by the tiny mass left on eliminated values,
# δ·log2(1/δ), which only large, low-noise late batches remove).
DEFAULT_TASK = "bijection"
MAIN_JOB_STEPS = 9000
MAIN_JOB_BATCH = 128

_QUICK_TASKS: dict[str, dict[str, Any]] = {
    "bijection": {"V": 10, "L": 9},
    "bijection_replacement": {"V": 10, "L": 12, "replacement": True},
    "hmm": {"K": 20},
    "recall": {},
    "regression": {"d": 4, "points": 16, "C": 32},
    "coin": {},
    "sticky": {},
}

_PAPER_TASKS: dict[str, dict[str, Any]] = {
    "bijection": {"V": 20, "L": 19},
    "bijection_replacement": {"V": 20, "L": 19, "replacement": True},
    "hmm": {"K": 20},
    "recall": {"pairs": 64, "n_keys": 256, "n_values": 256, "queries": 3, "filler": 32},
    "regression": {},
    "coin": {},
    "sticky": {},
}

# The capacity every architecture is matched to, per preset (parameters).
_QUICK_PARAMS = 200_000
_PAPER_PARAMS = {"hmm": 2_680_000}


def task_spec(name: str, preset: str) -> tuple[str, dict[str, Any]]:
    """(registered task name, parameters) of a table column / run task under a preset."""
    table = _QUICK_TASKS if preset == "quick" else _PAPER_TASKS
    params = dict(table.get(name, {}))
    base = "bijection" if name.startswith("bijection") else name
    return base, params


# quick: the recipe of each table column, the same for every architecture (``n_layers`` for all;
# ``n_heads`` for the transformer).  Chosen by measurement (benchmarks/recipe_sweep.py, its output
# in benchmarks/results/): on recall a 2-layer, 2-head transformer binds (4×4 with d_head 16 stays
# at chance); on the sawtooth nothing left the uniform plateau without the key-pool curriculum
# (the first 1000 steps draw each episode's keys from 3 of the V keys), with it the 2×2
# transformer reached entropy_mae_curve 0.022 bits in 3000 steps.  Step times at 200k parameters
# ranged from 19 ms (lstm, bijection) to ≈650 ms (mamba, HMM), one thread each.
_QUICK_RECIPES: dict[str, dict[str, Any]] = {
    "bijection": {"steps": 2000, "batch_size": 64, "layers": 4, "heads": 4},
    "bijection_replacement": {
        "steps": 4000, "batch_size": 64, "layers": 2, "heads": 2,
        "curriculum": [{"until": 1000, "task_params": {"key_pool": 3}}],
    },
    "hmm": {"steps": 2000, "batch_size": 64, "layers": 4, "heads": 4},
    "recall": {"steps": 2000, "batch_size": 64, "layers": 2, "heads": 2},
}


def _transformer_overrides(task: str, layers: int, heads: int) -> dict[str, Any]:
    """Learned absolute positions for HMM: its header is read by absolute slot (which T/E entry),
    and measured on 2 CPU cores (benchmarks/position_encoding.py, 1500 steps, 200k parameters)
    learned reached KL 0.123 bits at K=20 (0.197 at K=30, 0.254 at K=50) where rotary (0.397) and
    none (0.407) had not left the uniform level (0.41).  Elsewhere rotary (no length limit)."""
    pos = {"pos": "learned"} if task == "hmm" else {}
    return {"n_layers": layers, "n_heads": heads, **pos}


def _model_overrides(task: str, arch: str, layers: int, heads: int) -> dict[str, Any]:
    """The recipe's depth for every registered architecture (and heads for the transformer); a
    user's model (``package.module:factory``) gets only the parameter target and sizes itself."""
    if ":" in arch:
        return {}
    return _transformer_overrides(task, layers, heads) if arch == "transformer" else {"n_layers": layers}


def preset(name: str, task: str, arch: str) -> dict[str, Any]:
    """``TrainConfig`` fields for ``arch`` on ``task`` under preset ``name``."""
    if name not in PRESETS:
        raise InvalidValue(f"unknown preset {name!r}: choose from {', '.join(PRESETS)}")
    base, task_params = task_spec(task, name)
    if name == "quick":
        r = _QUICK_RECIPES.get(task, {"steps": 3000, "batch_size": 64, "layers": 4, "heads": 4})
        layers = r["layers"]
        return {
            "task": base,
            "task_params": task_params,
            "arch": arch,
            "params": _QUICK_PARAMS,
            "model": _model_overrides(base, arch, layers, r["heads"]),
            "steps": r["steps"],
            "batch_size": r["batch_size"],
            "curriculum": [dict(stage) for stage in r.get("curriculum", [])],
            "lr": 2e-3,
            "min_lr": 1e-5,
            "warmup": 200,
            "weight_decay": 0.0,
            "eval_every": 500,
            "ckpt_every": 500,
        }
    cfg = {
        "task": base,
        "task_params": task_params,
        "arch": arch,
        "params": _PAPER_PARAMS.get(base, 2_670_000),
        "model": _model_overrides(base, arch, 6, 6),
        "steps": 100_000,
        "batch_size": 128,
        "lr": 3e-4,
        "min_lr": 3e-6,
        "warmup": 2000,
        "weight_decay": 0.1,
        "eval_every": 5000,
        "ckpt_every": 5000,
    }
    if base == "hmm":
        cfg["model"] = _model_overrides(base, arch, 9, 8)
        cfg["steps"] = 50_000
        cfg["batch_size"] = 64
        cfg["weight_decay"] = 0.01
        cfg["warmup"] = 1000
    return cfg
