"""The checkpoint-and-stop policy both training loops follow (``training/checkpointing.py``), on its own: which steps
it checkpoints, that it writes no non-finite weights, what it keeps, what a stop request does, and what a divergence
leaves behind — on a small linear model and a clock the test moves, without training anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from windtunnel.run import checkpoint as ckpt
from windtunnel.run import stopping
from windtunnel.run.config import TrainConfig
from windtunnel.run.runs import RunDir
from windtunnel.training.checkpointing import (CheckpointedModel, CheckpointPolicy, TrainingDiverged,
                                               divergence_recorded, first_checkpoint_step)
from windtunnel.training.optim import log_spaced_steps


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def policy(root: Path, stop: int | None = None, clock: Clock | None = None, writer: bool = True,
           looks: list[int] | None = None, **fields: Any) -> CheckpointPolicy:
    """The policy of a run of ``fields`` (20 steps, a checkpoint every 4, no log-spaced ones, none timed by
    default) that holds one linear model in ``root``; each look at the losses is counted in ``looks``."""
    cfg = TrainConfig(**{"task": "bijection", "steps": 20, "ckpt_every": 4, "keep_last": 100,
                         "log_checkpoints": False, "ckpt_minutes": 0.0, **fields})
    model = torch.nn.Linear(3, 2)
    held = CheckpointedModel(model, torch.optim.AdamW(model.parameters()), root, {"config": cfg.to_dict()})
    return CheckpointPolicy(
        cfg, cfg.steps if stop is None else stop, [held], writer=writer, clock=clock or Clock(),
        check_loss=lambda: looks.append(1) if looks is not None else None,
        weights_diverged=lambda member, name, step: TrainingDiverged(f"member {member}: {name} at step {step}"))


def saved_steps(root: Path) -> list[int]:
    return [ckpt.step_of(p) for p in ckpt.list_checkpoints(root)] if root.is_dir() else []


def run_steps(checkpoints: CheckpointPolicy, start: int = 0) -> None:
    for done in range(start + 1, checkpoints.stop + 1):
        checkpoints.after_step(done)


def test_it_checkpoints_every_ckpt_every_steps_and_the_last(tmp_path: Path) -> None:
    checkpoints = policy(tmp_path / "checkpoints", steps=18)
    run_steps(checkpoints)
    assert saved_steps(tmp_path / "checkpoints") == [4, 8, 12, 16, 18]
    assert checkpoints.on_schedule(18) and not checkpoints.on_schedule(17)  # the last step is kept as the scheduled


def test_log_checkpoints_add_the_origin_and_the_log_spaced_steps(tmp_path: Path) -> None:
    checkpoints = policy(tmp_path / "checkpoints", steps=40, ckpt_every=20, log_checkpoints=True)
    checkpoints.save_origin(0)
    run_steps(checkpoints)
    assert saved_steps(tmp_path / "checkpoints") == sorted(log_spaced_steps(40) | {0, 20, 40})
    assert first_checkpoint_step(TrainConfig(task="bijection", steps=40, ckpt_every=20, log_checkpoints=True)) == 0
    assert first_checkpoint_step(TrainConfig(task="bijection", steps=40, ckpt_every=20, log_checkpoints=False)) == 20


def test_until_checkpoints_where_it_stops_and_the_next_run_removes_it(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    run_steps(policy(root, stop=6))
    assert saved_steps(root) == [4, 6]
    run_steps(policy(root), start=6)
    assert saved_steps(root) == [4, 8, 12, 16, 20]  # off the schedule: only a place to resume from


def test_it_prunes_the_scheduled_checkpoints_to_keep_last(tmp_path: Path) -> None:
    run_steps(policy(tmp_path / "checkpoints", keep_last=2))
    assert saved_steps(tmp_path / "checkpoints") == [16, 20]


def test_it_writes_no_nonfinite_weights(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    checkpoints = policy(root)
    with torch.no_grad():
        checkpoints.held[0].model.bias[1] = float("nan")
    checkpoints.save(4, timed=True)  # a timed checkpoint is skipped: the loss check stops the run
    assert saved_steps(root) == []
    with pytest.raises(TrainingDiverged, match="member 0: bias at step 4"):
        checkpoints.after_step(4)
    assert saved_steps(root) == []


def test_a_timed_checkpoint_after_ckpt_minutes_is_replaced_by_the_next_scheduled_one(tmp_path: Path) -> None:
    root, clock, looks = tmp_path / "checkpoints", Clock(), []
    checkpoints = policy(root, clock=clock, looks=looks, ckpt_minutes=1.0)
    checkpoints.after_step(1)
    clock.now = 59.0
    checkpoints.after_step(2)
    assert saved_steps(root) == [] and looks == []
    clock.now = 60.0
    checkpoints.after_step(3)
    assert saved_steps(root) == [3] and looks == [1]  # the losses looked at before writing
    assert checkpoints.seconds() == 60.0
    checkpoints.after_step(4)
    assert saved_steps(root) == [4]
    looks.clear()
    not_writing = policy(tmp_path / "other", clock=clock, writer=False, looks=looks, ckpt_minutes=1.0)
    clock.now += 120.0
    not_writing.after_step(1)
    assert looks == []  # a process that does not write (DDP, not rank 0) takes no timed checkpoint: rank 0's alone


def test_a_stop_request_checkpoints_the_step_reached_then_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, looks = tmp_path / "checkpoints", []
    checkpoints = policy(root, looks=looks)
    checkpoints.after_step(1)
    monkeypatch.setattr(stopping, "_requested", "SIGUSR2")
    with pytest.raises(stopping.TrainingStopped) as stopped:
        checkpoints.after_step(2)
    assert stopped.value.step == 2 and stopped.value.signal == "SIGUSR2" and str(root) in str(stopped.value)
    assert saved_steps(root) == [2] and looks == [1]
    checkpoints.after_step(20)  # the last step: the run ends there in any case, and does not raise


def test_a_resume_that_diverges_again_puts_the_run_folder_back(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.record_divergence("loss became nan at step 5; stopped")
    (run.path / "metrics.jsonl").write_text('{"step": 4}\n')
    before = run.record_bytes(RunDir.RESUME_RECORDS)

    def refusal(exc: TrainingDiverged, from_steps: list[int]) -> TrainingDiverged:
        return TrainingDiverged(f"again from {from_steps}")

    with pytest.raises(TrainingDiverged, match=r"again from \[0\]"):
        with divergence_recorded([run], True, refusal):
            (run.path / "metrics.jsonl").write_text("")
            (run.path / "config.json").write_text("{}")
            raise TrainingDiverged("loss became nan at step 2; stopped")
    assert run.record_bytes(RunDir.RESUME_RECORDS) == before
    with pytest.raises(TrainingDiverged, match="at step 3"):
        with divergence_recorded([run], False, refusal):  # a new run: recorded, not refused
            raise TrainingDiverged("loss became nan at step 3; stopped")
    assert run.divergence()["message"] == "loss became nan at step 3; stopped"
    with divergence_recorded([run], True, refusal):
        pass
    assert run.divergence() is None  # trained on past it
