"""``reproduce`` through a real SLURM cluster: a one-node cluster that CI starts on its own machine (``.ci/slurm``:
munged, slurmctld and slurmd from Debian's packages), and submitit submitting to it — no debug executor, no mock.

Checked against the local pool: the same cells write the same committed artifacts; a task requeued while it trains
(``scontrol requeue``) resumes its cell from the last checkpoint and ends exactly where an uninterrupted run does;
two tasks given one cell train it once; a task past its time limit leaves its cell resumable.  Skipped where no
SLURM controller answers (``WINDTUNNEL_SLURM=1``, which CI sets once it has started the cluster, makes that a
failure instead)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from windtunnel.orchestration import executors, reproduce
from windtunnel.run import grid, locks

pytestmark = pytest.mark.slurm

if not executors.scheduler_available():
    if os.environ.get("WINDTUNNEL_SLURM") == "1":
        raise RuntimeError("WINDTUNNEL_SLURM=1 but no SLURM controller answers (sinfo lists no partition)")
    pytest.skip("no SLURM cluster here (CI starts one with .ci/slurm)", allow_module_level=True)
pytest.importorskip("submitit")

COMPARED = ("config.json", "eval.json", "references.json", "cell.json")


def _same(a: Path, b: Path) -> bool:
    """Two committed JSON artifacts equal in everything but how long they took (``timings``, ``*_s`` fields) and where
    their run folder was (``run_dir``: each test writes its own results folder)."""
    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("timings", "run_dir") and not k.endswith("_s")}
        return [strip(v) for v in x] if isinstance(x, list) else x

    return strip(json.loads(a.read_text())) == strip(json.loads(b.read_text()))


def _plan(monkeypatch: pytest.MonkeyPatch, steps: int, seeds: tuple[int, ...] = (0, 1)) -> None:
    """A reproduction of tiny cells (the submitting process resolves each cell's recipe into its payload, so the
    nodes train exactly these)."""
    def plan(target: str, preset: str = "quick") -> list[reproduce.Job]:
        return [reproduce.Job(grid.Cell(preset, "main", "transformer", s, params=20_000, steps=steps), analyze=False)
                for s in seeds]

    monkeypatch.setattr(reproduce, "plan", plan)
    monkeypatch.setattr(reproduce, "_eval_n", lambda preset: 32)


def _options(tmp_path: Path, **kw: Any) -> executors.SlurmOptions:
    return executors.SlurmOptions(**{"tasks": 2, "cpus": 1, "workers": 1, "time": 10,
                                     "folder": str(tmp_path / "slurm-logs"), **kw})


def _own_jobs(logs: Path) -> list[str]:
    """The SLURM jobs this test submitted: submitit names a folder of its log folder after each (``41``, ``41_0``),
    so a test never touches another run's jobs on a shared cluster."""
    return sorted({p.name.split("_")[0] for p in logs.iterdir() if p.is_dir()}) if logs.is_dir() else []


def _within(seconds: float, fn: Callable[[], Any], logs: Path) -> Any:
    """``fn()`` in a thread, given ``seconds``; past them the test's own jobs are cancelled and the test fails."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["out"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        subprocess.run(["scancel", *_own_jobs(logs)], check=False)
        pytest.fail(f"the SLURM run did not end within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["out"]




def test_slurm_writes_the_artifacts_the_local_pool_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    _plan(monkeypatch, steps=40)
    local = reproduce.reproduce("paper1", results=tmp_path / "local", workers=1, threads=1)
    cluster = _within(600, lambda: reproduce.reproduce("paper1", results=tmp_path / "cluster",
                                                       slurm=_options(tmp_path)), tmp_path / "slurm-logs")
    assert sorted(cluster["done"]) == sorted(local["done"]) == ["main-transformer-s0", "main-transformer-s1"]
    assert "submitted job array" in capsys.readouterr().out
    for folder in local["done"]:
        a, b = (tmp_path / r / "quick" / "cells" / folder for r in ("local", "cluster"))
        for name in COMPARED:
            assert _same(a / name, b / name), (folder, name)
    assert not list((tmp_path / "cluster").rglob(f"*{locks.SUFFIX}"))  # every claim given back
    again = reproduce.reproduce("paper1", results=tmp_path / "cluster", slurm=_options(tmp_path))
    assert again["missing"] == 0 and again["done"] == []  # nothing left: nothing submitted


def test_a_requeued_task_resumes_its_cell_and_ends_where_an_uninterrupted_run_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _plan(monkeypatch, steps=1500, seeds=(0,))
    results = tmp_path / "cluster"
    run = reproduce.run_dir(results, reproduce.plan("paper1")[0].cell)
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.update(out=reproduce.reproduce(
        "paper1", results=results, slurm=_options(tmp_path, tasks=1))), daemon=True)
    worker.start()
    deadline = time.time() + 300
    from windtunnel.run.runs import RunDir

    while time.time() < deadline and RunDir(run).latest_step() < 500:  # its first checkpoint written
        time.sleep(1)
    assert RunDir(run).latest_step() >= 500, "the task never wrote a checkpoint"
    (job,) = _own_jobs(tmp_path / "slurm-logs")
    subprocess.run(["scontrol", "requeue", job], check=True)
    for _ in range(60):  # SLURM holds a requeued job back a while: release it once it is pending again
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()
        if state == "RUNNING" and RunDir(run).latest_step() >= 500:
            break
        if state == "PENDING":
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=False)
        time.sleep(1)
    worker.join(600)
    assert not worker.is_alive(), "the requeued task did not end"
    assert box["out"]["done"] == ["main-transformer-s0"]
    logs = "".join(p.read_text() for p in (tmp_path / "slurm-logs").rglob("*_log.out"))
    assert logs.count("Starting with JobEnvironment") >= 2  # it ran twice: before and after the requeue
    errors = "".join(p.read_text() for p in (tmp_path / "slurm-logs").rglob("*_log.err"))
    assert "no result written" in errors  # SLURM's SIGTERM: the cell checkpointed its step, the task left no result
    local = reproduce.reproduce("paper1", results=tmp_path / "local", workers=1, threads=1)
    assert local["done"] == ["main-transformer-s0"]
    for name in COMPARED:
        assert _same(tmp_path / "local" / "quick" / "cells" / "main-transformer-s0" / name,
                     results / "quick" / "cells" / "main-transformer-s0" / name), name


def test_two_tasks_given_one_cell_train_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _plan(monkeypatch, steps=600, seeds=(0,))
    results = tmp_path / "cluster"
    (job,) = reproduce.plan("paper1")
    payload = {
        "column": "main", "arch": "transformer", "seed": 0, "preset": "quick", "config": job.cell.config(),
        "run_dir": str(reproduce.run_dir(results, job.cell)), "cell_dir": str(reproduce.cell_dir(results, job.cell)),
        "eval_n": 32, "lengths": None, "threads": 1, "device": None, "analyze": False, "analyze_n": 24,
        "job": job, "results": str(results)}
    outcomes = _within(600, lambda: list(executors.run_slurm(
        reproduce._work, [payload, dict(payload)], _options(tmp_path), lambda p: 1.0, tmp_path / "slurm-logs")),
        tmp_path / "slurm-logs")
    results_ = [out for _, out, error in outcomes if error is None]
    assert len(results_) == 2
    trained = [r for r in results_ if "held_by" not in r and "skipped" not in r]
    assert len(trained) == 1  # the other task found it claimed (or already finished) and left it
    other = next(r for r in results_ if r is not trained[0])
    assert "SLURM job" in other.get("held_by", "SLURM job") or other.get("skipped")
    steps = [json.loads(line)["step"] for line in (Path(payload["run_dir"]) / "metrics.jsonl").read_text().splitlines()
             if '"step"' in line and '"loss"' in line]
    assert len(steps) == len(set(steps))  # no step logged twice: one worker trained it
    assert reproduce.missing(job, results) == []


def test_a_task_past_its_time_limit_leaves_its_cell_resumable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _plan(monkeypatch, steps=20_000, seeds=(0,))
    results = tmp_path / "cluster"
    (job,) = reproduce.plan("paper1")
    # warned 30 s before its 2-minute limit (SLURM may warn up to a minute early: never before training began)
    with pytest.raises(executors.CellFailed, match=r"stopped at step \d+ of 20000: the SLURM task's time limit is "
                                                   r"near.*log: .*slurm-logs"):
        _within(400, lambda: reproduce.reproduce("paper1", results=results,
                                                 slurm=_options(tmp_path, tasks=1, time=2, warn_s=30)),
                tmp_path / "slurm-logs")
    from windtunnel.run.runs import RunDir

    run = RunDir(reproduce.run_dir(results, job.cell))
    done = run.latest_step()
    assert done > 0  # the warning stopped it at a step, which it checkpointed
    logged = [json.loads(line)["step"] for line in (run.path / "metrics.jsonl").read_text().splitlines()
              if '"loss"' in line]
    assert max(logged) <= done  # nothing trained past the checkpoint: the stop lost nothing
    assert not reproduce.failure_path(run.path).exists()  # stopped, not failed
    assert reproduce.reproduce("paper1", results=results, dry_run=True)["progress"] == {
        "main-transformer-s0": f"trained to step {done} of 20000"}
    # its claim was given back as the task stopped (SLURM warns before the limit), or, where the task was killed
    # outright, names a job SLURM no longer runs: either way the next worker takes it and resumes the cell
    ok, holder = locks.try_claim(reproduce.run_dir(results, job.cell))
    assert ok and holder is None
    locks.release(reproduce.run_dir(results, job.cell))
