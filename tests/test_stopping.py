"""Stopping on a signal loses nothing: SIGTERM (a scheduler or ``kill``), SIGUSR2 (SLURM's time-limit warning) and
Ctrl-C make a training loop checkpoint the step it reached and stop; the run resumes from exactly there, a plan's
cells not yet begun are left for the next run, and the handlers a process had are given back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from windtunnel.orchestration import executors
from windtunnel.run import stopping
from windtunnel.run.runs import RunDir
from windtunnel.training import loop, stacked
from windtunnel.training.loop import TrainConfig, train
from windtunnel.run.runs import load


def tiny(**kw: Any) -> TrainConfig:
    base = dict(task="bijection", task_params={"V": 5, "L": 5}, arch="transformer", params=20_000,
                model={"n_layers": 2, "n_heads": 2}, steps=20, batch_size=16, lr=3e-3, warmup=5,
                eval_every=10, eval_n=64, ckpt_every=10, progress=False)
    base.update(kw)
    return TrainConfig(**base)


def signal_at(monkeypatch: pytest.MonkeyPatch, module: Any, at: int, signum: int) -> None:
    """Send ``signum`` to this process while ``module``'s loop draws the batch of step ``at``."""
    real = module.step_batch

    def drawing(cfg: TrainConfig, task: Any, step: int, *a: Any, **kw: Any) -> Any:
        if step == at:
            os.kill(os.getpid(), signum)
        return real(cfg, task, step, *a, **kw)

    monkeypatch.setattr(module, "step_batch", drawing)


def logged_steps(run: Path) -> list[int]:
    return [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_sigusr2_checkpoints_the_step_reached_and_resumes_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = signal.getsignal(signal.SIGUSR2)
    signal_at(monkeypatch, loop, 6, signal.SIGUSR2)
    with pytest.raises(stopping.TrainingStopped, match=r"stopped at step 7 of 20: the SLURM task's time limit is near") as info:
        train(tiny(), tmp_path / "stopped")
    assert info.value.step == 7 and info.value.exit_status == 128 + signal.SIGUSR2
    assert RunDir(tmp_path / "stopped").latest_step() == 7  # off the every-10 schedule: saved because it stopped
    assert signal.getsignal(signal.SIGUSR2) is before  # the handlers it found are given back
    monkeypatch.undo()
    train(tiny(), tmp_path / "stopped", resume=True)
    train(tiny(), tmp_path / "whole")
    a, b = load(tmp_path / "stopped")[1].state_dict(), load(tmp_path / "whole")[1].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)  # the stop cost nothing
    assert logged_steps(tmp_path / "stopped") == logged_steps(tmp_path / "whole")


def test_a_stacked_run_stops_every_member_at_one_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    signal_at(monkeypatch, stacked, 4, signal.SIGTERM)
    runs = [tmp_path / "s0", tmp_path / "s1"]
    with pytest.raises(stopping.TrainingStopped, match=r"stopped at step 5 of 20: asked to end \(SIGTERM"):
        stacked.train_stacked([tiny(seed=0), tiny(seed=1)], runs)
    assert [RunDir(r).latest_step() for r in runs] == [5, 5]
    assert signal.getsignal(signal.SIGTERM) is not stopping._note


def test_a_second_ctrl_c_interrupts_at_once() -> None:
    with stopping.catching():
        os.kill(os.getpid(), signal.SIGINT)
        assert stopping.requested() == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    with stopping.catching():
        assert stopping.requested() is None  # a new outermost block starts with no request


def _stop_on_first(payload: dict[str, Any]) -> dict[str, Any]:
    if payload["i"] == 0:
        os.kill(os.getpid(), signal.SIGTERM)
    return {"i": payload["i"]}


def test_cells_not_begun_when_the_stop_came_are_left_for_the_next_run() -> None:
    outcomes = list(executors.run_local(_stop_on_first, [{"i": i} for i in range(3)], workers=1))
    assert outcomes[0][1] == {"i": 0}
    assert [type(e).__name__ for _, _, e in outcomes[1:]] == ["NotStarted", "NotStarted"]
    assert "asked to end" in str(outcomes[1][2])


@pytest.mark.slow
def test_kill_stops_training_at_a_checkpoint_with_one_line(tmp_path: Path) -> None:
    """The command line, killed as a scheduler kills it: exit status 128 + SIGTERM, one line naming the step, that
    step checkpointed, and nothing logged past it."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "windtunnel", "train", "--task", "bijection", "--V", "5", "--L", "5",
                             "--arch", "transformer", "--params", "20000", "--steps", "100000", "--no-progress",
                             "--out", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (run / "metrics.jsonl").is_file():
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("windtunnel: stopped at step "), err
    step = int(lines[0].split("stopped at step ")[1].split()[0])
    assert step > 0 and RunDir(run).latest_step() == step
    assert max(logged_steps(run)) <= step


def _until_asked(payload: dict[str, Any]) -> dict[str, Any]:
    """A cell that works until a stop is requested of its process (as a training loop does, step by step)."""
    Path(payload["started"]).touch()
    deadline = time.monotonic() + 60
    while not stopping.requested() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"i": payload["i"], "asked": stopping.requested()}


@pytest.mark.slow
def test_a_stop_sent_to_the_pool_reaches_its_running_cells_and_leaves_the_queued(tmp_path: Path) -> None:
    """``kill`` names one process: the pool passes the request on to the cells it is working and begins no more."""
    payloads = [{"i": i, "started": str(tmp_path / f"started-{i}")} for i in range(4)]
    outcomes: list[Any] = []
    with stopping.catching():  # as the command line's process is while its pool works
        cells = executors.run_local(_until_asked, payloads, workers=2)
        deadline = time.monotonic() + 120
        sent = False
        for outcome in _poll(cells):
            if outcome is not None:
                outcomes.append(outcome)
            if not sent and len(list(tmp_path.glob("started-*"))) == 2:
                os.kill(os.getpid(), signal.SIGTERM)
                sent = True
            assert time.monotonic() < deadline
    worked = sorted(out["i"] for _, out, err in outcomes if err is None)
    assert len(worked) == 2 and all(out["asked"] == "SIGTERM" for _, out, err in outcomes if err is None)
    assert sorted(type(err).__name__ for _, _, err in outcomes if err is not None) == ["NotStarted", "NotStarted"]
    assert len(list(tmp_path.glob("started-*"))) == 2  # the queued cells never began


def _stopped_at(payload: dict[str, Any]) -> dict[str, Any]:
    """A cell whose training stopped on a request, as ``stopping.stopped`` reports it from a training loop."""
    raise stopping.TrainingStopped(f"stopped at step {payload['i']}", "SIGTERM", payload["i"])


def test_a_cell_stopped_in_a_worker_reaches_the_parent_as_its_stop() -> None:
    """A pool hands a worker's exception to the parent pickled: a training stopped there arrives as that stop, with
    its signal and step — not as a broken pool (which lost every other cell's outcome with a traceback)."""
    import pickle

    stop = stopping.TrainingStopped("stopped at step 7", "SIGUSR2", 7)
    again = pickle.loads(pickle.dumps(stop))
    assert (type(again), str(again), again.signal, again.step) == (type(stop), str(stop), "SIGUSR2", 7)
    outcomes = list(executors.run_local(_stopped_at, [{"i": 3}, {"i": 4}], workers=2))
    errs = sorted(((type(e).__name__, e.step, e.signal) for _, _, e in outcomes), key=lambda x: x[1])
    assert errs == [("TrainingStopped", 3, "SIGTERM"), ("TrainingStopped", 4, "SIGTERM")]


def _poll(cells: Any) -> Any:
    """The pool's outcomes, with a tick between them so the test can act while the cells run."""
    import threading
    from queue import Empty, Queue

    q: Queue = Queue()
    threading.Thread(target=lambda: ([q.put(o) for o in cells], q.put(StopIteration)), daemon=True).start()
    while True:
        try:
            item = q.get(timeout=0.2)
        except Empty:
            yield None
            continue
        if item is StopIteration:
            return
        yield item


@pytest.mark.slow
def test_a_stopped_reproduction_says_stopped_and_left_and_the_same_command_finishes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from windtunnel.orchestration import reproduce
    from windtunnel.run import grid

    def plan(target: str, preset: str = "quick") -> list[reproduce.Job]:
        return [reproduce.Job(grid.Cell(preset, "main", "transformer", s, params=20_000, steps=60), analyze=False)
                for s in (0, 1)]

    monkeypatch.setattr(reproduce, "plan", plan)
    monkeypatch.setattr(reproduce, "_eval_n", lambda preset: 32)
    real = loop.step_batch
    signal_at(monkeypatch, loop, 30, signal.SIGTERM)
    with pytest.raises(stopping.TrainingStopped, match="stopped at step 31 of 60"):
        reproduce.reproduce("paper1", results=tmp_path, workers=1, threads=1)
    said = capsys.readouterr().out
    first, second = (j.cell for j in plan("paper1"))
    assert f"  stopped {first.folder}: " in said and f"  left {second.folder}: not started" in said
    assert "(1 stopped, 1 left)" in said
    assert not reproduce.failure_path(reproduce.run_dir(tmp_path, first)).exists()  # stopped is not failed
    assert RunDir(reproduce.run_dir(tmp_path, first)).latest_step() == 31
    drawn: list[int] = []
    monkeypatch.setattr(loop, "step_batch", lambda cfg, task, step, *a, **kw: drawn.append(step) or real(cfg, task, step, *a, **kw))
    again = reproduce.reproduce("paper1", results=tmp_path, workers=1, threads=1)
    assert sorted(again["done"]) == sorted([first.folder, second.folder])
    assert len(drawn) == (60 - 31) + 60 and drawn[0] == 31  # the stopped cell resumed at its step: nothing redone


@pytest.mark.slow
def test_the_same_stacked_train_command_again_continues_a_stopped_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """``windtunnel train --seeds`` stopped by SIGTERM says "rerun the same command": that command continues every
    member from the step it reached and ends where an unbroken stack ends; a folder of another configuration is
    still refused."""
    from windtunnel.cli import main as cli_main

    argv = ["train", "--task", "bijection", "--V", "5", "--L", "5", "--arch", "transformer", "--params", "20000",
            "--steps", "20", "--batch-size", "16", "--seeds", "0,1", "--stack", "on", "--no-progress"]
    signal_at(monkeypatch, stacked, 4, signal.SIGTERM)
    assert cli_main([*argv, "--out", str(tmp_path / "cut")]) == 128 + signal.SIGTERM
    assert "rerun the same command" in capsys.readouterr().err
    monkeypatch.undo()
    assert cli_main([*argv, "--out", str(tmp_path / "cut")]) == 0
    assert "resuming from step 5" in capsys.readouterr().out
    assert cli_main([*argv, "--out", str(tmp_path / "whole")]) == 0
    for s in (0, 1):
        cut, whole = tmp_path / f"cut-s{s}", tmp_path / f"whole-s{s}"
        assert logged_steps(cut) == logged_steps(whole)
        a, b = load(cut)[1].state_dict(), load(whole)[1].state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)
    other = ["30" if a == "20" else a for a in argv]  # another recipe: 30 steps
    assert cli_main([*other, "--out", str(tmp_path / "cut")]) == 2
    assert "already exists" in capsys.readouterr().err
