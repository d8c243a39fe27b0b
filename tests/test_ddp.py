"""Data-parallel training: the shard semantics, and ``torchrun`` runs that equal one process.

The promise (``windtunnel.training.loop``): ``batch_size`` is the global batch, split into
``data_shards`` shards each drawn from its own stream; ``W`` processes each train on ``S/W`` of
them with the loss normalised by the global count of scored positions.  So a two-process run is
the one-process run with the same shards, and a two-process run killed mid-way resumes exactly.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from windtunnel import tasks
from windtunnel.run.runs import RunDir
from windtunnel.tasks.base import Episodes
from windtunnel.training.loop import ConfigError, TrainConfig, resolve_shards, step_batch, stream_seed, train
from windtunnel.run.runs import load

CONFIG = dict(task="bijection", task_params={"V": 5, "L": 5}, arch="transformer", params=20_000,
              model={"n_layers": 2, "n_heads": 2}, batch_size=16, lr=1e-3, warmup=5, log_every=5,
              eval_n=64, keep_last=50, log_checkpoints=False, progress=False, data_shards=2)


ROUNDING = 5e-6
"""Weights of runs that differ only in how the batch is split over processes agree to this (float32
rounding, grown by Adam over 120 steps); runs on other data differ by ≈ 2.5e-2."""


def _same_episodes(a: Episodes, b: Episodes) -> bool:
    return all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("tokens", "targets", "mask", "posterior"))


def test_one_shard_one_process_is_the_single_stream() -> None:
    """With one shard the step's data is ``task.sample(batch_size, stream_seed(seed, step))``: the
    stream every run before data-parallel training trained on, so their numbers stand."""
    cfg = TrainConfig(**{**CONFIG, "data_shards": 0})
    task = tasks.make("bijection", V=5, L=5)
    for step in (0, 7):
        assert _same_episodes(step_batch(cfg, task, step, shards=1), task.sample(16, stream_seed(0, step)))


def test_processes_partition_the_global_batch() -> None:
    """The ranks' batches, concatenated in rank order, are the one-process batch with the same shards."""
    cfg = TrainConfig(**{**CONFIG, "data_shards": 4})
    task = tasks.make("bijection", V=5, L=5)
    whole = step_batch(cfg, task, 3, shards=4)
    assert whole.tokens.shape[0] == 16
    for world in (2, 4):
        parts = [step_batch(cfg, task, 3, shards=4, rank=r, world=world) for r in range(world)]
        assert all(p.tokens.shape[0] == 16 // world for p in parts)
        assert _same_episodes(Episodes.cat(parts), whole)
    # shards are distinct draws, not copies of one another
    assert not torch.equal(whole.tokens[:4], whole.tokens[4:8])


def test_shard_counts_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="data_shards"):
        TrainConfig(**{**CONFIG, "data_shards": 3})  # 3 does not divide the batch of 16
    with pytest.raises(ConfigError, match="data_shards"):
        TrainConfig(**{**CONFIG, "data_shards": -1})
    cfg = TrainConfig(**{**CONFIG, "data_shards": 2})
    run = RunDir(tmp_path / "r")
    assert resolve_shards(cfg, run, False, 1) == 2 and resolve_shards(cfg, run, False, 2) == 2
    with pytest.raises(ConfigError, match="4 processes"):
        resolve_shards(cfg, run, False, 4)
    assert resolve_shards(TrainConfig(**{**CONFIG, "data_shards": 0}), run, False, 4) == 4  # one per process


def test_a_resumed_run_keeps_its_shards(tmp_path: Path) -> None:
    """The shard count a run started with is kept in its checkpoints and wins on resume."""
    cfg = TrainConfig(**{**CONFIG, "data_shards": 0, "steps": 10, "ckpt_every": 5})
    train(cfg, tmp_path / "r", until=5)  # one process, data_shards 0: one shard
    assert resolve_shards(cfg, RunDir(tmp_path / "r"), True, 1) == 1
    with pytest.raises(ConfigError, match="has 1 shards"):
        resolve_shards(cfg, RunDir(tmp_path / "r"), True, 2)  # two processes cannot split one shard


def test_a_torchrun_process_leaves_with_its_status_and_all_its_output() -> None:
    """``windtunnel`` in a process torchrun started (``WORLD_SIZE`` > 1) skips the interpreter's teardown
    (``windtunnel.__main__.entry``, where gloo can abort) but still delivers everything it printed into a pipe, and its status:
    0 for a listing, 2 for bad input."""
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # output into a pipe waits in a buffer
    env = {**buffered, "WORLD_SIZE": "2", "RANK": "1"}
    listing = subprocess.run([sys.executable, "-m", "windtunnel", "tasks"], env=env, capture_output=True, text=True)
    alone = subprocess.run([sys.executable, "-m", "windtunnel", "tasks"], env=buffered, capture_output=True, text=True)
    assert listing.returncode == 0 and alone.returncode == 0
    assert listing.stdout == alone.stdout and "bijection" in listing.stdout
    refused = subprocess.run([sys.executable, "-m", "windtunnel", "train", "--task", "no_such_task"], env=env,
                             capture_output=True, text=True)
    assert refused.returncode == 2
    assert refused.stderr.startswith("windtunnel: error:") and len(refused.stderr.strip().splitlines()) == 1


def _torchrun(args: list[str], cwd: Path, **popen: object) -> "subprocess.Popen[str]":
    # PYTHONFAULTHANDLER: a worker sent SIGABRT prints every thread's Python stack (see `_finish`)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "windtunnel", "train", "--no-progress", *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **popen)


def _descendants(pid: int) -> list[int]:
    """``pid``'s child processes, recursively (from /proc: torchrun's workers are not in its group)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _finish(proc: "subprocess.Popen[str]", timeout: float = 300) -> str:
    """``proc``'s output once it exits with status 0.  A run that outlives ``timeout`` (a process
    hung in a collective or in teardown) fails the test with each worker's Python stacks, taken by
    SIGABRT through the fault handler, instead of a bare timeout."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        workers = _descendants(proc.pid)
        for pid in workers:  # one at a time, so the stacks do not interleave
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGABRT)
            time.sleep(1)
        for pid in [proc.pid, *workers]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"torchrun still running after {timeout:.0f} s; the workers' stacks:\n{out}")
    assert proc.returncode == 0, out
    return out


def _weights(run: Path) -> dict[str, torch.Tensor]:
    _, model = load(run)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _losses(run: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finding torchrun's workers needs /proc")
@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="this torch build has no gloo backend")
@pytest.mark.slow
def test_torchrun_two_processes_equal_one_and_resume_after_a_kill(tmp_path: Path) -> None:
    """``torchrun --nproc_per_node=2`` (gloo, CPU) trains the weights a one-process run with the same
    global batch trains (to ``ROUNDING``), logs the same global loss, and a two-process run killed by SIGKILL
    mid-way resumes (``--resume``, again two processes) to the same weights.

    The processes sum gradients in another order than one process does, so the runs agree to float
    rounding, not bitwise; Adam's first steps scale that rounding up where a gradient entry is near
    its ``eps`` (measured: max |Δw| ≈ 1.2e-6 after one step at LR 3e-3, 3.9e-7 after 40 at LR 1e-3
    with the flash attention kernel; 1.3e-6 after 120 with the math kernel, whose matmuls round
    differently for batch 8 and 16), hence LR 1e-3 here.  Other data (one shard instead of two) differs by 2.5e-2 after 40 steps."""
    steps = 120
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CONFIG, "steps": steps, "ckpt_every": 10, "eval_every": steps}))
    train(TrainConfig.from_dict(json.loads(config.read_text())), tmp_path / "one")
    one = _weights(tmp_path / "one")

    _finish(_torchrun(["--config", str(config), "--out", str(tmp_path / "two")], tmp_path))
    two = _weights(tmp_path / "two")
    assert max(float(v.abs().max()) for v in one.values()) > 0.1  # trained weights, not zeros
    print(f"two processes vs one: max |Δw| = {_max_diff(one, two):.2e}")
    assert _max_diff(one, two) < ROUNDING, _max_diff(one, two)
    loss_one, loss_two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert loss_one.keys() == loss_two.keys() and len(loss_one) == steps // 5
    assert max(abs(loss_one[s] - loss_two[s]) for s in loss_one) < 1e-5

    # killed: SIGKILL to torchrun and its workers once a mid-way checkpoint is on disk
    killed = tmp_path / "killed"
    proc = _torchrun(["--config", str(config), "--out", str(killed)], tmp_path)
    deadline = time.monotonic() + 600
    while not list((killed / "checkpoints").glob("step_000000[2-9]0")) and proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    for pid in [proc.pid, *_descendants(proc.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.communicate()
    done = sorted(p.name for p in (killed / "checkpoints").glob("step_*"))
    assert done and done[-1] < f"step_{steps:08d}", f"the run finished before the kill: {done}"
    _finish(_torchrun(["--resume", str(killed)], tmp_path))
    assert _max_diff(one, _weights(killed)) < ROUNDING
    assert _losses(killed).keys() == loss_one.keys()
