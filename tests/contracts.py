"""The contracts every registered task, architecture and diagnostic must keep (shared by the test files)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from windtunnel import models, tasks
from windtunnel.models import catalog
from windtunnel.tasks import IGNORE

if TYPE_CHECKING:
    from windtunnel.training.loop import TrainConfig


def check_task_contract(task: tasks.Task, seed: int, n: int) -> None:
    """The task contract (windtunnel.tasks.base) on ``n`` episodes of ``seed``."""
    ep = task.sample(n, seed)
    T, C = task.seq_len, task.n_classes
    assert ep.tokens.shape == (n, T) and ep.tokens.dtype == torch.long
    assert 0 <= int(ep.tokens.min()) and int(ep.tokens.max()) < task.vocab_size
    assert ep.targets.shape == (n, T) and ep.targets.dtype == torch.long
    assert ep.posterior.shape == (n, T, C) and ep.posterior.dtype == torch.float64
    assert ep.mask.shape == (n, T) and ep.mask.dtype == torch.bool and bool(ep.mask.any())
    if task.n_features:
        assert ep.features is not None and ep.features.shape == (n, T, task.n_features)
    else:
        assert ep.features is None
    assert torch.allclose(ep.posterior.sum(-1), torch.ones(n, T, dtype=torch.float64), atol=1e-12)
    assert (ep.posterior >= 0).all()
    # targets valid exactly at scored positions, and never impossible under the posterior
    assert (ep.targets[~ep.mask] == IGNORE).all()
    scored = ep.targets[ep.mask]
    assert ((scored >= 0) & (scored < C)).all()
    p_target = ep.posterior[ep.mask].gather(1, scored[:, None])
    assert (p_target > 0).all()
    # deterministic in seed; the mask and posterior are functions of the inputs alone
    again = task.sample(n, seed)
    assert torch.equal(again.tokens, ep.tokens) and torch.equal(again.posterior, ep.posterior)
    assert torch.equal(task.scored_mask(ep.tokens, ep.features), ep.mask)
    logits = tasks.oracle(task)(**ep.inputs)
    assert torch.allclose(torch.softmax(logits.double(), -1), ep.posterior, atol=1e-10)


def tiny_task(name: str) -> tasks.Task:
    """Registered task ``name``'s small instance — ``Task.tiny``, declared in the task's own module — the one small
    instance every test over the task registry builds (so a new task needs no test edit)."""
    cls = tasks.get(name)
    assert hasattr(cls, "tiny"), f"task {name!r} declares no `tiny` (its small instance: docs/extending.md)"
    return tasks.make(name, **cls.tiny)


def tiny_model(arch: str, task: tasks.Task, seed: int = 0, **overrides) -> models.WindTunnelModel:
    """Registered architecture ``arch``'s tiny instance for ``task`` — ``Arch.tiny``, declared where the
    architecture is registered, with ``overrides`` on top — seeded with ``seed``, in eval mode: the one
    small model every test over the registry builds (so a new architecture needs no test edit)."""
    torch.manual_seed(seed)
    return models.make(arch, task, **{**catalog.get(arch).tiny, **overrides}).eval()


def check_arch_contract(arch: str, task: tasks.Task) -> None:
    """An architecture's tiny instance maps [B,T] tokens to finite [B,T,C] logits, is causal, rebuilds
    from its config, exposes the skeleton's hooks, and sizes itself to a parameter target (±3%)."""
    model = tiny_model(arch, task)
    ep = task.sample(3, 0)
    with torch.no_grad():
        out = model(**ep.inputs)
        assert out.shape == (3, task.seq_len, task.n_classes) and torch.isfinite(out).all()
        t = task.seq_len // 2
        moved = dict(ep.inputs)
        tok = moved["tokens"].clone()
        tok[:, t:] = (tok[:, t:] + 1) % task.vocab_size
        moved["tokens"] = tok
        assert torch.allclose(model(**moved)[:, :t], out[:, :t], atol=1e-5)  # nothing before t sees t
        again = models.build(model.config_dict())
        again.load_state_dict(model.state_dict())
        assert torch.equal(again.eval()(**ep.inputs), out)
    names = model.hook_names()
    assert "hook_embed" in names and "hook_final" in names and "blocks.0.hook_resid_post" in names
    target = 20 * model.n_params()
    assert abs(models.make(arch, task, params=target).n_params() - target) <= 0.03 * target


def poison_loss_after(monkeypatch: pytest.MonkeyPatch, good_steps: int) -> None:
    """The training loss turns NaN after ``good_steps`` steps, so that training diverges the way a real run
    does (the loop stops, keeps its last good checkpoint and records ``diverged.json``); ``monkeypatch.undo()``
    restores it.  Shared by every test that needs a diverged run."""
    import importlib

    train_mod = importlib.import_module("windtunnel.training.loop")  # the module (windtunnel.train is the function)
    real = train_mod.loss_fn
    calls = {"n": 0}

    def poisoned(logits, ep, soft, n_scored=None):
        calls["n"] += 1
        loss = real(logits, ep, soft, n_scored)
        return loss * float("nan") if calls["n"] > good_steps else loss

    monkeypatch.setattr(train_mod, "loss_fn", poisoned)


def diverged_training(config: TrainConfig, run: Path, good_steps: int = 4) -> Path:
    """A real run of ``config`` in ``run`` whose loss turns NaN after ``good_steps`` steps
    (:func:`poison_loss_after`): training stops, keeps its last good checkpoint (step ``good_steps - 1`` where the
    schedule has one) and records ``diverged.json``.  The fixture of every test of a diverged run folder."""
    from windtunnel.run.runs import RunDir
    from windtunnel.training.loop import TrainingDiverged, train

    with pytest.MonkeyPatch.context() as mp:
        poison_loss_after(mp, good_steps)
        with pytest.raises(TrainingDiverged, match=f"step {good_steps}"):
            train(config, run)
    assert RunDir(run).divergence() is not None and RunDir(run).latest_step() == good_steps - 1
    return run
