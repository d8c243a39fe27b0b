"""Table 1 pieces: the key-pool curriculum, the context-blind optimum, intervals across seeds."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from windtunnel.run import grid
from windtunnel import models, tasks
from windtunnel.evaluation.evaluate import evaluate, mean_std
from windtunnel.orchestration.table import cell_config
from windtunnel.training.loop import ConfigError, TrainConfig, curriculum_task, train

from test_bijection import brute_force


# --- key_pool ----------------------------------------------------------------------------------
@pytest.mark.parametrize("pool", [1, 2, 4])
def test_key_pool_posterior_equals_enumeration(pool: int) -> None:
    """Keys drawn from a per-episode pool leave the exact posterior unchanged (brute force, V=5)."""
    task = tasks.make("bijection", V=5, L=8, replacement=True, key_pool=pool)
    ep = task.sample(400, seed=pool)
    keys = ep.latent["keys"]
    assert all(len(set(row.tolist())) <= pool for row in keys)
    expect = brute_force(5, keys.numpy(), ep.latent["perm"].gather(1, keys).numpy())
    assert np.abs(ep.posterior[:, 0::2].numpy() - expect).max() < 1e-12
    torch.testing.assert_close(task.posterior(ep.tokens), ep.posterior, atol=0, rtol=0)


def test_key_pool_validation() -> None:
    with pytest.raises(ValueError, match="key_pool"):
        tasks.make("bijection", V=5, L=4, key_pool=3)  # needs replacement
    for bad in (0, 6, True, 2.0):
        with pytest.raises(ValueError, match="key_pool"):
            tasks.make("bijection", V=5, L=4, replacement=True, key_pool=bad)


def seen_share(task, n: int = 4000) -> tuple[torch.Tensor, torch.Tensor]:
    """Posterior mass on the already-shown values at each key position, and how many were shown."""
    ep = task.sample(n, 0)
    V = task.V
    values = ep.tokens[:, 1::2] - V  # [n, L-1]
    L = ep.tokens[:, 0::2].shape[1]
    onehot = torch.nn.functional.one_hot(values, V).double()
    seen = torch.cat([torch.zeros(n, 1, V, dtype=torch.float64), onehot.cumsum(1)], 1)[:, :L] > 0
    post = ep.posterior[:, 0::2]
    return (post * seen).sum(-1), seen.sum(-1)


def test_small_pool_rewards_reading_the_shown_values() -> None:
    """The stepping stone in the module docstring: with the full pool the shown values hold on
    average exactly their uniform share m/V of the posterior; with a pool of 3, more."""
    V = 6
    for pool, more in ((None, False), (3, True)):
        mass, m = seen_share(tasks.make("bijection", V=V, L=8, replacement=True, key_pool=pool))
        for k in range(1, V):
            sel = m == k
            if sel.sum() < 200:
                continue
            gain = float(mass[sel].mean()) - k / V
            assert (gain > 0.1) if more else (abs(gain) < 0.03), (pool, k, gain)


# --- curriculum ----------------------------------------------------------------------------------
def test_curriculum_stages_and_validation() -> None:
    stage = [{"until": 10, "task_params": {"key_pool": 2}}]
    cfg = TrainConfig(task="bijection", task_params={"V": 5, "L": 6, "replacement": True}, steps=20, curriculum=stage)
    task = tasks.make("bijection", V=5, L=6, replacement=True)
    assert curriculum_task(cfg, task, 9).key_pool == 2
    assert curriculum_task(cfg, task, 10) is task
    for bad in ([{"until": 30, "task_params": {}}], [{"until": 5, "task_params": {}}, {"until": 5, "task_params": {}}],
                [{"until": 5}], "easy", [{"until": True, "task_params": {}}]):
        with pytest.raises(ConfigError, match="curriculum"):
            TrainConfig(steps=20, curriculum=bad)


def test_curriculum_trains_on_the_stage_task_and_rejects_bad_stage_params(tmp_path: Path) -> None:
    cfg = TrainConfig(task="bijection", task_params={"V": 5, "L": 6, "replacement": True}, arch="lstm",
                      model={"d_model": 8, "n_layers": 1}, steps=4, eval_every=4, ckpt_every=4, eval_n=8,
                      log_checkpoints=False, progress=False,
                      curriculum=[{"until": 2, "task_params": {"bogus": 1}}])
    with pytest.raises(ConfigError, match="curriculum"):
        train(cfg, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_cell_config_keeps_the_curriculum_share() -> None:
    cfg = cell_config("quick", "bijection_replacement", "transformer", 0, None, steps=400)
    full = cell_config("quick", "bijection_replacement", "transformer", 0, None)
    assert full["curriculum"][0]["until"] / full["steps"] == cfg["curriculum"][0]["until"] / cfg["steps"]
    assert cell_config("quick", "bijection_replacement", "lstm", 0, None)["curriculum"] == full["curriculum"]
    assert cell_config("quick", "bijection_replacement", "lstm", 0, None, steps=1)["curriculum"] == []


# --- the context-blind optimum -----------------------------------------------------------------
def test_context_blind_on_bijection_is_uniform_and_matches_its_closed_form() -> None:
    """Without context the bijection's best answer is uniform over V; its KL to the staircase
    posterior is then mean_t (log2 V - log2(V - t)) over the L key positions, exactly."""
    V, L = 6, 5
    task = tasks.make("bijection", V=V, L=L)
    blind = tasks.context_blind(task, n=6000)
    assert (blind.table[0::2, :V] - 1 / V).abs().max() < 0.03  # key positions: uniform over V
    res = evaluate(blind, task, n=500, n_boot=50)
    expect = sum(math.log2(V) - math.log2(V - t) for t in range(L)) / L
    assert abs(res.metrics["kl"]["value"] - expect) < 0.01


def test_context_blind_is_the_best_pointwise_answer() -> None:
    """Any other distribution per (position, token) cell scores a higher KL than the fitted one."""
    task = tasks.make("bijection", V=5, L=5)
    blind = tasks.context_blind(task, n=4000)
    ep = task.sample(500, 7)
    kl_blind = float(evaluate(blind, task, n=500, seed=7, n_boot=20).metrics["kl"]["value"])
    # perturb the table: any other per-(position, token) distribution scores worse
    other = tasks.context_blind(task, n=4000)
    other.table.mul_(torch.rand_like(other.table) + 0.5)
    other.table.div_(other.table.sum(-1, keepdim=True))
    kl_other = float(evaluate(other, task, n=500, seed=7, n_boot=20).metrics["kl"]["value"])
    assert kl_blind < kl_other
    assert ep.tokens.shape[1] == blind.table.shape[0]


def test_mlp_pointwise_is_capacity_matched_and_blind() -> None:
    task = tasks.make("bijection", V=10, L=9)
    model = models.make("mlp_pointwise", task, params=200_000, n_layers=4)
    assert abs(model.n_params() - 200_000) <= 0.03 * 200_000
    ep = task.sample(8, 0)
    x = ep.tokens.clone()
    x[:, :-1] = torch.randint(0, task.vocab_size, x[:, :-1].shape)  # scramble all context
    with torch.no_grad():
        torch.testing.assert_close(model(x)[:, -1], model(ep.tokens)[:, -1], atol=0, rtol=0)


# --- intervals across seeds ----------------------------------------------------------------------
def test_mean_std_interval_by_hand() -> None:
    m = mean_std([1.0, 2.0, 3.0])
    assert m["mean"] == 2.0 and m["std"] == 1.0 and m["n"] == 3
    half = 4.303 / math.sqrt(3)  # t_{0.975, 2} s / sqrt(k)
    assert m["ci95"] == pytest.approx([2.0 - half, 2.0 + half])
    assert mean_std([5.0])["ci95"] is None
    assert mean_std([1.0, float("nan"), 3.0])["n"] == 2


def test_the_grid_reproduces_every_recorded_recipe() -> None:
    """Every (preset, experiment, arch) config equals the one recorded before the grid existed
    (tests/golden/presets.json), compared as validated TrainConfigs."""
    from windtunnel.run import grid
    from windtunnel.training.loop import TrainConfig

    golden = json.loads((Path(__file__).parent / "golden" / "presets.json").read_text())
    for key, old in golden.items():
        preset, task, arch = key.split("/")
        if ":" in arch:  # a user's factory (not importable here): the fields themselves
            assert grid.preset(preset, task, arch) == {"curriculum": [], **old}, key
            continue
        assert TrainConfig.from_dict(grid.preset(preset, task, arch)) == TrainConfig.from_dict(old), key


def test_committed_cells_were_trained_with_todays_grid() -> None:
    """Every committed cell (results/quick/cells/*/config.json, written by the training loop and
    exported by ``windtunnel reproduce``) was trained with the config its grid cell gives today."""
    from windtunnel.run import grid
    from windtunnel.training.loop import TrainConfig

    configs = sorted((Path(__file__).parents[1] / "results" / "quick" / "cells").glob("*/config.json"))
    assert configs, "no committed cells: results/quick/cells is part of the repository"
    for path in configs:
        recorded = json.loads(path.read_text())["train"]
        archs = dict.fromkeys([*grid.TABLE_ARCHS, recorded["arch"]])
        cell = next(c for c in (grid.Cell("quick", col, arch, recorded["seed"]) for col in grid.EXPERIMENTS
                                for arch in archs) if c.folder == path.parent.name)
        want = TrainConfig.from_dict(cell.config())
        got = TrainConfig.from_dict({**recorded, "device": want.device, "progress": False,
                                     "ckpt_minutes": want.ckpt_minutes})  # how a run is kept, not what it trains
        assert got == want, path.parent.name

def test_evaluation_lengths_come_from_the_grid() -> None:
    """HMM is evaluated at its trained K and every length of the experiment's own (shorter ones included:
    a model trained at K=50 is read at 20 and 30 inside its trained positions); other tasks at their own."""
    assert grid.eval_lengths("hmm", {"K": 20}) == [20, 30, 50]
    assert grid.eval_lengths("hmm", {"K": 10}) == [10, 20, 30, 50]
    assert grid.eval_lengths("hmm_alibi", {"K": 40}) == [20, 30, 40, 50]
    assert grid.eval_lengths("hmm_k50", grid.task_spec("hmm_k50", "quick")[1]) == [20, 30, 50]
    assert grid.eval_lengths(grid.MAIN_JOB, {}) is None and grid.eval_lengths("recall", {}) is None
