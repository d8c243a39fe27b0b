"""Stacked training (``windtunnel.training.stacked``): several seeds of one cell trained as one model must each follow the
trajectory the same seed follows alone — own data, own clipping, own optimizer moments, own run folder — and resume
from their own checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from windtunnel.run import checkpoint as ckpt
from windtunnel.run.runs import RunDir
from windtunnel.training.stacked import train_stacked
from windtunnel.training.loop import ConfigError, TrainConfig, train

SEEDS = (0, 1, 2)


def tiny(arch: str = "transformer", **kw) -> TrainConfig:
    base = dict(task="bijection", task_params={"V": 4, "L": 4}, arch=arch, params=6_000,
                model={"n_layers": 2, "n_heads": 2} if arch == "transformer" else {}, steps=60, batch_size=8,
                lr=3e-3, warmup=5, eval_every=30, eval_n=32, ckpt_every=30, progress=False, log_every=5,
                grad_clip=0.05, readout_lr_mult=4.0 if arch == "transformer" else 1.0)
    base.update(kw)
    return TrainConfig(**base)


def _losses(run: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(RunDir(run).latest_checkpoint() / "model.safetensors"))


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("arch", ["transformer", pytest.param("lstm", marks=pytest.mark.slow)])
def test_each_member_follows_its_seed_trained_alone(tmp_path: Path, arch: str, float64: None) -> None:
    """Float64, a clipping bound every step hits (so a clip shared across members would show), three seeds: each
    member's logged losses, gradient norms, held-out metrics and checkpointed weights equal its seed's run alone;
    no member equals another's (their data streams are their own).  The LSTM has no vmap rule: its members run one
    by one inside the stacked step, with the same result."""
    cfgs = [tiny(arch, seed=s) for s in SEEDS]
    train_stacked(cfgs, [tmp_path / f"stacked{s}" for s in SEEDS])
    for c in cfgs:
        train(c, tmp_path / f"alone{c.seed}")
    for s in SEEDS:
        stacked, alone = tmp_path / f"stacked{s}", tmp_path / f"alone{s}"
        assert _losses(stacked) == pytest.approx(_losses(alone), rel=1e-9, abs=1e-12)
        log = [json.loads(x) for x in (stacked / "metrics.jsonl").read_text().splitlines()]
        ref = [json.loads(x) for x in (alone / "metrics.jsonl").read_text().splitlines()]
        assert [r["grad_norm"] for r in log if "grad_norm" in r] == pytest.approx(
            [r["grad_norm"] for r in ref if "grad_norm" in r], rel=1e-9)
        assert all(r["grad_norm"] > 0.05 for r in log if "grad_norm" in r)  # every logged step was clipped
        assert [r["step"] for r in log if "eval" in r] == [r["step"] for r in ref if "eval" in r] == [30, 60]
        assert [r["eval"]["kl"] for r in log if "eval" in r] == pytest.approx(
            [r["eval"]["kl"] for r in ref if "eval" in r], rel=1e-9)
        a, b = _weights(stacked), _weights(alone)
        assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-9, atol=1e-12) for k in a)
        assert json.loads((stacked / "config.json").read_text()) == json.loads((alone / "config.json").read_text())
    assert _losses(tmp_path / "stacked0") != _losses(tmp_path / "stacked1")


def test_a_stacked_run_resumes_from_its_members_checkpoints(tmp_path: Path, float64: None) -> None:
    """Stopped at step 30 and resumed, the stacked runs end where an unbroken stacked run ends; a member resumes
    alone from its stacked checkpoint (the single-run format) and ends there too."""
    cfgs = [tiny(seed=s) for s in SEEDS]
    whole = [tmp_path / f"whole{s}" for s in SEEDS]
    train_stacked(cfgs, whole)
    parts = [tmp_path / f"part{s}" for s in SEEDS]
    train_stacked(cfgs, parts, until=30)
    assert all(RunDir(p).latest_step() == 30 for p in parts)
    train(cfgs[1], parts[1], resume=True)  # one member alone, from the stacked checkpoint
    train_stacked([cfgs[0], cfgs[2]], [parts[0], parts[2]], resume=True)
    for w, p in zip(whole, parts):
        assert _losses(p) == pytest.approx(_losses(w), rel=1e-9)
        a, b = _weights(p), _weights(w)
        assert all(torch.allclose(a[k], b[k], rtol=1e-9, atol=1e-12) for k in a)


def test_runs_that_differ_in_more_than_the_seed_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="differ only in their seed; these differ: lr"):
        train_stacked([tiny(seed=0), tiny(seed=1, lr=1e-3)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ConfigError, match="distinct seeds"):
        train_stacked([tiny(seed=0), tiny(seed=0)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ConfigError, match="a run folder each"):
        train_stacked([tiny(seed=0), tiny(seed=1)], [tmp_path / "a", tmp_path / "a"])
    assert not (tmp_path / "a").exists()  # refused before anything is written
