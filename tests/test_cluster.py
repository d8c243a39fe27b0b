"""Working cells beyond one process: cell claims that two workers cannot both take and that are broken only when
their holder is gone, shards of near-equal cost, an array task that never loses its other cells to one that fails,
the SLURM options, and the array's dry-run plan.  The real-cluster tests are in ``test_slurm.py``."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from windtunnel.orchestration import executors, reproduce
from windtunnel.run import grid, locks
from windtunnel.errors import InvalidValue

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _hold(run_dir: str, ready: "mp.synchronize.Event", done: "mp.synchronize.Event") -> None:
    with locks.claimed(run_dir) as holder:
        assert holder is None
        ready.set()
        done.wait(60)


@contextlib.contextmanager
def _held_by_another_process(run_dir: Path) -> Iterator[mp.process.BaseProcess]:
    """Another live process holding the claim of ``run_dir`` for the duration."""
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold, args=(str(run_dir), ready, done))
    child.start()
    try:
        assert ready.wait(60)
        yield child
    finally:
        done.set()
        child.join(60)


def _tiny_plan(monkeypatch: pytest.MonkeyPatch, seeds: tuple[int, ...]) -> Callable[..., list[reproduce.Job]]:
    """A reproduction of tiny main-job cells, one per seed (the real code paths, a few steps each)."""
    def plan(target: str, preset: str = "quick") -> list[reproduce.Job]:
        return [reproduce.Job(grid.Cell(preset, "main", "transformer", s, params=20_000, steps=6), analyze=False)
                for s in seeds]

    monkeypatch.setattr(reproduce, "plan", plan)
    monkeypatch.setattr(reproduce, "_eval_n", lambda preset: 32)
    return plan


def test_a_claim_held_by_a_live_process_is_left_to_it_and_free_once_it_ends(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "main-transformer-s0"
    with _held_by_another_process(run) as child:
        ok, holder = locks.try_claim(run)
        assert not ok and holder.pid == child.pid and holder.host == socket.gethostname()
        assert f"process {child.pid}" in holder.describe()
        with locks.claimed(run) as other:
            assert other is not None and other.pid == child.pid
    assert not locks.claim_path(run).exists()  # released by its holder
    with locks.claimed(run) as holder:
        assert holder is None and locks.read_holder(locks.claim_path(run)).pid == os.getpid()
        with locks.claimed(run) as again:  # re-entrant: a stage inside a stage holds it once
            assert again is None
        assert locks.claim_path(run).exists()
    assert not locks.claim_path(run).exists()


def _write_claim(run: Path, **fields) -> Path:
    holder = {"host": socket.gethostname(), "pid": os.getpid(), "job": "", "since": time.time(), "token": "abc",
              "start": "0", **fields}
    path = locks.claim_path(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(holder))
    return path


def _dead_pid() -> int:
    proc = mp.get_context("spawn").Process(target=time.sleep, args=(0,))
    proc.start()
    proc.join()
    return proc.pid


def test_a_claim_is_broken_only_when_its_holder_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "runs" / "cell"
    _write_claim(run, pid=_dead_pid())  # a process of this host that has ended
    ok, _ = locks.try_claim(run)
    assert ok and locks.read_holder(locks.claim_path(run)).pid == os.getpid()
    _write_claim(run, host="another-node", pid=1)  # another host: cannot be checked, so alive
    ok, holder = locks.try_claim(run)
    assert not ok and holder.host == "another-node"
    # a SLURM job's holder: gone when squeue no longer lists the job, alive when it does or cannot be asked
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    squeue = bin_dir / "squeue"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _write_claim(run, host="another-node", job="77_3")
    squeue.write_text("#!/bin/sh\necho 77_3\n")
    squeue.chmod(squeue.stat().st_mode | stat.S_IEXEC)
    assert locks.try_claim(run) == (False, locks.read_holder(locks.claim_path(run)))
    squeue.write_text("#!/bin/sh\nexit 1\n")  # the scheduler cannot be asked: never broken on a guess
    assert not locks.try_claim(run)[0]
    squeue.write_text("#!/bin/sh\nexit 0\n")  # no longer listed: finished, failed, cancelled or timed out
    assert locks.try_claim(run)[0]


def test_a_requeued_job_takes_its_own_claim_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "runs" / "cell"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "41")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue at all: only "mine" can free it
    _write_claim(run, host="node-a", pid=1, job="41_2", start="0")  # this task's first start, before the requeue
    assert locks.try_claim(run)[0]
    _write_claim(run, host="node-b", pid=1, job="41_2", start="1")  # a sibling worker of this very start
    assert not locks.try_claim(run)[0]
    _write_claim(run, host="node-a", pid=1, job="41_3", start="0")  # another task of the array
    assert not locks.try_claim(run)[0]


def test_breaking_a_stale_claim_never_removes_a_fresh_one(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "cell"
    path = _write_claim(run, pid=_dead_pid(), token="stale")
    stale = locks.read_holder(path)
    path.write_text(json.dumps({**json.loads(path.read_text()), "pid": os.getpid(), "token": "fresh"}))
    locks._break(path, stale)  # another worker broke the stale one and claimed it meanwhile: it stands
    assert locks.read_holder(path).token == "fresh"
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_shards_are_balanced_longest_first_and_hold_every_cell_once() -> None:
    costs = [7, 5, 4, 4, 3, 3, 2, 1]
    payloads = [{"i": i, "cost": c} for i, c in enumerate(costs)]
    parts = executors.shards(payloads, 3, lambda p: p["cost"])
    assert sorted(p["i"] for part in parts for p in part) == list(range(len(costs)))
    loads = sorted(sum(p["cost"] for p in part) for part in parts)
    assert loads == [9, 10, 10]  # 29 over 3: the longest-first rule's split
    assert executors.shards(payloads[:2], 5, lambda p: p["cost"]) == [[payloads[0]], [payloads[1]]]
    with pytest.raises(InvalidValue):
        executors.shards(payloads, 0, lambda p: p["cost"])


def _maybe_fail(p: dict) -> dict:
    if p["fail"]:
        raise ValueError(f"cell {p['i']} broke\nsecond line")
    return {"i": p["i"]}


def test_an_array_task_keeps_its_other_cells_when_one_fails() -> None:
    rows = executors.run_shard(_maybe_fail, [{"i": 0, "fail": False}, {"i": 1, "fail": True}, {"i": 2, "fail": False}], 1)
    assert [r.get("ok") for r in rows] == [{"i": 0}, None, {"i": 2}]
    assert rows[1]["error"] == "ValueError: cell 1 broke" and "Traceback" in rows[1]["traceback"]


def test_slurm_options_from_a_file_and_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "cluster.toml"
    cfg.write_text('[slurm]\npartition = "gpu"\ntime = 90\ngpus = 1\ntasks = 8\naccount = "lab"\n')
    opts = executors.slurm_options(cfg, time=30, qos=None)
    assert (opts.partition, opts.time, opts.gpus, opts.tasks, opts.account, opts.qos) == ("gpu", 30, 1, 8, "lab", None)
    assert opts.at_once(stacked=True) == 1  # one graphed stack to a GPU
    assert opts.at_once(stacked=False) == 3  # three cells to a GPU
    assert executors.slurm_options(cfg, time=30, qos=None, workers=2).at_once(stacked=True) == 2
    params = opts.parameters()
    assert params["slurm_partition"] == "gpu" and params["gpus_per_node"] == 1 and params["timeout_min"] == 30
    assert params["slurm_additional_parameters"] == {"account": "lab"}
    cfg.write_text('[slurm]\npartitoin = "gpu"\n')
    with pytest.raises(InvalidValue, match="unknown key.*partitoin"):
        executors.slurm_options(cfg)
    with pytest.raises(InvalidValue, match="does not exist"):
        executors.slurm_options(tmp_path / "none.toml")
    with pytest.raises(InvalidValue, match="invalid slurm tasks"):
        executors.slurm_options(tasks=0)
    cfg.write_text("not = [toml")
    with pytest.raises(InvalidValue, match="is not TOML"):
        executors.slurm_options(cfg)


def test_the_array_plan_is_read_from_committed_timings() -> None:
    """The dry run of the paper table's cells as an array of 8 one-GPU tasks: each cell's hours come from committed
    timings (its seeds' ``timings.json``, else the benchmarked step time of its column and architecture, else its
    cost at the committed cells' rate); the array's makespan is at least its longest task and at most the serial
    time."""
    todo = [j for j in reproduce.plan("scale", "paper")]
    plan = reproduce.array_plan(todo, RESULTS, executors.SlurmOptions(tasks=8, gpus=1))
    assert sorted(c for t in plan["tasks"] for c in t["cells"]) == sorted(j.cell.folder for j in todo)
    assert len(plan["tasks"]) == min(8, len(todo))
    assert max(t["hours"] for t in plan["tasks"]) == plan["makespan_h"] <= plan["serial_h"]
    # a committed cell's own seeds give its time: main_paper_size's three timings.json
    job = next(j for j in todo if j.cell.column == "main_paper_size")
    seconds = [sum(json.loads((RESULTS / "paper" / "cells" / f"main_paper_size-transformer-s{s}" / "timings.json")
                              .read_text()).get(k, 0) for k in ("train_s", "eval_s", "analyze_s")) for s in grid.SEEDS]
    # its run folder is not here (checkpoints are never committed): the whole cell is to do
    assert reproduce.estimate_seconds(job, RESULTS) == pytest.approx(sum(seconds) / 3)


@pytest.mark.slow
def test_a_local_reproduce_leaves_a_cell_another_process_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _tiny_plan(monkeypatch, (0, 1))
    results = tmp_path / "results"
    with _held_by_another_process(reproduce.run_dir(results, plan("paper1")[1].cell)) as child:
        out = reproduce.reproduce("paper1", results=results, workers=1)
    assert out["done"] == ["main-transformer-s0"] and list(out["held"]) == ["main-transformer-s1"]
    assert f"process {child.pid}" in out["held"]["main-transformer-s1"]
    assert not (results / "quick" / "cells" / "main-transformer-s1").exists()
    again = reproduce.reproduce("paper1", results=results, workers=1)  # its holder gone: worked now
    assert again["done"] == ["main-transformer-s1"] and again["held"] == {}


def test_the_slurm_executor_refuses_where_there_is_no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo
    monkeypatch.setitem(sys.modules, "submitit", sys.modules.get("submitit") or type(sys)("submitit"))
    with pytest.raises(executors.UserError, match="needs a SLURM cluster"):
        executors.environment_ok()
    monkeypatch.setitem(sys.modules, "submitit", None)  # not installed
    with pytest.raises(executors.UserError, match=r"pip install 'windtunnel\[slurm\]'"):
        executors.environment_ok()


def test_the_command_line_refuses_slurm_options_without_the_slurm_executor(capsys: pytest.CaptureFixture) -> None:
    from windtunnel.cli import main

    assert main(["reproduce", "paper1", "--slurm-tasks", "2"]) == 2
    assert capsys.readouterr().err.strip().endswith("--slurm-tasks needs --executor slurm")
    assert main(["table", "--slurm-config", "x.toml"]) == 2
    assert "--slurm-config needs --executor slurm" in capsys.readouterr().err


@pytest.mark.slow
def test_the_dry_run_prints_the_array_plan(capsys: pytest.CaptureFixture) -> None:
    from windtunnel.cli import main

    assert main(["reproduce", "paper1", "--preset", "paper", "--dry-run", "--executor", "slurm",
                 "--slurm-tasks", "8", "--slurm-gpus", "1"]) == 0
    out = capsys.readouterr().out
    assert "as a SLURM job array of" in out and "3 cell(s) at once" in out and "the array ends in ≈" in out


@pytest.mark.slow
def test_status_says_what_is_done_running_failed_and_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture) -> None:
    """Built by the code that writes it in real use: one cell reproduced, one whose last attempt failed, one held by
    a live process, one not started."""
    from windtunnel.cli import main

    plan = _tiny_plan(monkeypatch, (0, 1, 2, 3))
    results = tmp_path / "results"
    reproduce.reproduce("paper1", results=results, workers=1, only=["main-transformer-s0"])
    broken = plan("paper1")[1]
    real = reproduce._work_claimed
    monkeypatch.setattr(reproduce, "_work_claimed", lambda job: (_ for _ in ()).throw(RuntimeError("out of disk")))
    with pytest.raises(RuntimeError, match="out of disk"):
        reproduce.reproduce("paper1", results=results, workers=1, only=[broken.cell.folder])
    monkeypatch.setattr(reproduce, "_work_claimed", real)
    with _held_by_another_process(reproduce.run_dir(results, plan("paper1")[2].cell)) as child:
        capsys.readouterr()
        assert main(["status", "--results", str(results), "--target", "paper1"]) == 1
    out = capsys.readouterr().out
    assert "main-transformer-s1: failed (RuntimeError: out of disk; on " in out
    assert f"main-transformer-s2: running (process {child.pid} on " in out
    assert "main-transformer-s3: waiting (not started)" in out
    assert "paper1 (quick): 4 cells — done 1, running 1, failed 1, waiting 1" in out
    reproduce.reproduce("paper1", results=results, workers=1)  # the failed one worked again: its record goes
    assert not reproduce.failure_path(reproduce.run_dir(results, broken.cell)).exists()
    assert main(["status", "--results", str(results), "--target", "paper1"]) == 0
    assert main(["status", "--results", str(tmp_path / "none")]) == 2
    assert main(["status", str(results)]) == 2  # the results folder is named as reproduce names it: --results


def test_a_task_that_ended_without_a_result_is_reported_not_waited_on(tmp_path: Path) -> None:
    """A task cancelled (or killed, or lost with its node) writes no result: once the grace for a late file is over
    it is one line naming why and its log — submitit itself would wait for ever where ``sacct`` cannot be asked."""
    from types import SimpleNamespace

    err = tmp_path / "41_1_0_log.err"
    err.write_text("slurmstepd-vm: error: *** JOB 41 ON vm CANCELLED AT 2026-11-27T17:07:38 ***\nsrun: Killed\n")
    job = SimpleNamespace(job_id="41_1", paths=SimpleNamespace(result_pickle=tmp_path / "none.pkl", stderr=err),
                          result=lambda: pytest.fail("waited on a task that wrote no result"))
    assert executors._result_of(job, waited_s=0.0) is None  # its result may still be on its way
    failed = executors._result_of(job, waited_s=executors.RESULT_GRACE_S)
    assert isinstance(failed, executors.CellFailed)
    assert str(failed) == f"SLURM task 41_1 ended without a result (JOB 41 ON vm CANCELLED AT 2026-11-27T17:07:38; log: {err})"


def test_the_slurm_executor_is_refused_before_anything_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture) -> None:
    from windtunnel.cli import main

    monkeypatch.setattr(executors, "scheduler_available", lambda: False)
    for argv in (["reproduce", "paper1", "--results", str(tmp_path / "r"), "--executor", "slurm"],
                 ["table", "--out", str(tmp_path / "t"), "--executor", "slurm", "--tasks", "hmm", "--seeds", "1"]):
        assert main(argv) == 2, argv
        assert capsys.readouterr().err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
