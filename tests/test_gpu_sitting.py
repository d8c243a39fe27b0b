"""``benchmarks/gpu_sitting.py`` — one command for a sitting on a lent GPU — and ``benchmarks/paper_stacked.py``'s
stops, run here on a CPU: the GPU phases skipped and said so, an estimate that does not fit skipping its item, the
pack in ``OUT`` surviving a kill, ``unpack`` placing a real cell and refusing to overwrite it, and a timing command
stopped mid-cell leaving that cell for a rerun."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SITTING = REPO / "benchmarks" / "gpu_sitting.py"
STACKED = REPO / "benchmarks" / "paper_stacked.py"
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_sitting  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL") or not Path("/proc").is_dir(),
                                reason="the driver stops its children through /proc (Linux)")


def sit(tmp: Path, *argv: str) -> subprocess.Popen:
    """The driver as the GPU machine runs it, its output and scratch under ``tmp``, in a session of its own (so that
    the test can end it with everything it started, as the machine ends a command)."""
    return subprocess.Popen([sys.executable, str(SITTING), "--out", str(tmp / "out"), "--work", str(tmp / "work"),
                             "--name", "test_sitting", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=tmp, start_new_session=True)


@contextlib.contextmanager
def ended_after(proc: subprocess.Popen):
    """The block, then ``proc``'s session killed if a failed assertion left it running (no stray process)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def sat(tmp: Path, *argv: str, timeout: float) -> tuple[int, str]:
    """The driver run to its end: (exit status, what it printed)."""
    with ended_after(sit(tmp, *argv)) as proc:
        said, _ = proc.communicate(timeout=timeout)
    return proc.returncode, said


def packed(out: Path) -> dict[str, bytes]:
    """The files of ``OUT/sitting.tar.gz`` by their path in the repository."""
    with tarfile.open(out / gpu_sitting.PACK, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def wait_for(predicate, timeout: float, proc: subprocess.Popen) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the driver ended first ({proc.returncode}): {proc.stdout.read()}")
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for the driver")
        time.sleep(0.2)


def state(out: Path) -> dict:
    try:
        return json.loads((out / gpu_sitting.STATE).read_text())
    except (OSError, ValueError):
        return {}


def test_on_a_cpu_the_gpu_phases_are_skipped_with_their_reason_and_everything_is_packed(tmp_path: Path) -> None:
    code, said = sat(tmp_path, "--deadline-min", "1", "--no-compile-check", "--phases", "stacked", "train", "compiled",
                     timeout=120)
    assert code == 0, said
    doc = state(tmp_path / "out")
    assert doc["status"] == "done"
    pre = doc["preflight"]
    assert pre["status"] == "done" and pre["device"]["cuda"] is False and pre["matmul_peak_tflops_bf16"] > 0
    assert pre["versions"]["torch"] and pre["import_s"] > 0
    assert pre["mamba_scan"]["scan"] and "no CUDA device" in pre["mamba_scan"]["why"]  # what runs instead, and why
    assert pre["compile"] == {"checked": False, "why": "--no-compile-check"}
    for name in ("stacked", "train", "compiled"):
        assert doc["phases"][name]["status"] == "skipped"
        assert "no CUDA device" in doc["phases"][name]["reason"]
    # the three files, and in the tarball the same state and log where unpack puts them
    files = packed(tmp_path / "out")
    assert json.loads(files["benchmarks/results/test_sitting/sitting.json"]) == doc
    assert files["benchmarks/results/test_sitting/sitting.log"] == (tmp_path / "out" / "sitting.log").read_bytes()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["sitting.json", "sitting.log", "sitting.tar.gz"]


def test_a_deadline_already_past_skips_everything_and_still_packs(tmp_path: Path) -> None:
    # 0.1 min is under the seconds kept for the last pack: nothing may start
    code, said = sat(tmp_path, "--deadline-min", "0.1", timeout=120)
    assert code == 0, said
    doc = state(tmp_path / "out")
    assert doc["preflight"]["status"] == "skipped"
    assert {p["status"] for p in doc["phases"].values()} == {"skipped"}
    assert all(p["reason"] == "the deadline has passed" for p in doc["phases"].values())
    assert "benchmarks/results/test_sitting/sitting.json" in packed(tmp_path / "out")


def test_a_phase_whose_estimate_exceeds_the_time_left_is_skipped(tmp_path: Path) -> None:
    s = gpu_sitting.Sitting(tmp_path / "out", tmp_path / "work", "unit", 1.0, ["stacked", "train", "profile"], "x")
    left = s.left()
    assert 0 < left <= 60 - gpu_sitting.RESERVE_S
    assert not s.begin("stacked", gpu_sitting.Estimate(left + 30, "a test's figure"))
    record = state(tmp_path / "out")["phases"]["stacked"]
    assert record["status"] == "skipped" and "exceeds" in record["reason"] and "a test's figure" in record["reason"]
    assert record["estimate"]["seconds"] == round(left + 30, 1)
    # nothing to estimate from: refused where an estimate is required, a pilot otherwise
    assert not s.begin("train", gpu_sitting.Estimate(None, "nothing committed"), needs_estimate=True)
    assert "nothing committed" in s.phase("train")["reason"]
    assert s.begin("profile", gpu_sitting.Estimate(None, "nothing measured yet"))
    assert state(tmp_path / "out")["phases"]["profile"]["status"] == "running"  # packed as it started


def test_the_training_plan_puts_the_cells_the_claims_wait_for_first_and_estimates_them_from_committed_gpu_cells() -> None:
    """At the paper preset, from the committed results: uncommitted ``scale`` cells lead, stacked together; their
    cost is the committed GPU cells' of the same recipe (the longest training, each member's evaluation), and a stack
    that does not fit loses members before it is dropped."""
    from windtunnel.orchestration import reproduce

    results = REPO / "results"
    candidates = gpu_sitting.training_candidates(results, "paper")
    assert [c.priority for c in candidates] == sorted(c.priority for c in candidates)
    assert all(reproduce.missing(c.job, results) for c in candidates)  # nothing already complete is planned
    new = [c for c in candidates if c.priority == 0]
    if not new:
        pytest.skip("every scale cell is committed")
    assert all(not (reproduce.cell_dir(results, c.job.cell) / "cell.json").is_file() for c in new)
    group = gpu_sitting.stack_groups(candidates)[0]
    assert group[0] is new[0] and all(c in new for c in group)  # the first stack: the claims' cells, one recipe
    assert len({json.dumps(c.job.cell.config() | {"seed": 0}, sort_keys=True, default=str) for c in group}) == 1
    first = group[0].job
    cfg = first.cell.config()
    timings = []
    for folder in sorted((results / "paper" / "cells").iterdir()):
        c = json.loads((folder / "config.json").read_text())
        t = json.loads((folder / "timings.json").read_text())
        if (str(c["train"]["device"]).startswith("cuda") and c["model"]["arch"] == first.cell.arch
                and c["train"]["steps"] == cfg["steps"] and c["train"]["batch_size"] == cfg["batch_size"]
                and c["task"]["name"] == cfg["task"]):
            timings.append(t)
    if not timings:
        pytest.skip("no committed GPU cell of this recipe")
    start = 7.0
    k = len(group)
    e = gpu_sitting.group_estimate(group, k, results, True, start)
    after = sum(max(t["eval_s"] for t in timings) + (max(t["analyze_s"] for t in timings if "analyze_s" in t)
                                                     if c.job.analyze else 0) for c in group)
    assert e.seconds == pytest.approx(gpu_sitting.MARGIN * (max(t["train_s"] for t in timings) + after) + start)
    assert "committed GPU cell" in e.source
    # the deadline decides how many members start: all, fewer, or none (with the one-member estimate)
    estimate = lambda m: gpu_sitting.group_estimate(group, m, results, True, start)  # noqa: E731
    assert gpu_sitting.most_that_fit(group, e.seconds, estimate)[0] == k
    one = estimate(1).seconds
    assert gpu_sitting.most_that_fit(group, one, estimate)[0] == 1
    none, said = gpu_sitting.most_that_fit(group, one - 1, estimate)
    assert none == 0 and said.seconds == one
    # on a CPU nothing GPU-trained says what it costs there
    assert gpu_sitting.group_estimate(group, 1, results, False, start).seconds != one


def test_the_preflight_names_the_scan_a_small_mamba_actually_runs(monkeypatch) -> None:
    """On a CPU without the fused kernel: the reference scan, alone and vmapped over two stacked members, as the
    scan module records what it ran."""
    from windtunnel.models import scans

    monkeypatch.setitem(scans._KERNEL, "mod", None)  # no fused C++ scan: the step-by-step reference runs
    for stacked, said in ((False, "alone"), (True, "vmapped")):
        scans.scans_run(reset=True)
        assert gpu_sitting.run_small_mamba("cpu", stacked=stacked) == said
        assert scans.scans_run(reset=True) == ["PyTorch reference"]


def test_a_killed_sitting_leaves_its_pack_from_before_the_kill(tmp_path: Path) -> None:
    """SIGKILL to the driver and its child mid-phase (as a command's time limit does): the files written at the start
    of the phase are there and whole."""
    out = tmp_path / "out"
    with ended_after(sit(tmp_path, "--deadline-min", "5", "--no-compile-check", "--phases", "profile",
                         "--profile-members", "3", "--profile-steps", "100000")) as proc:
        wait_for(lambda: state(out).get("phases", {}).get("profile", {}).get("status") == "running", 90, proc)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its child at once
        proc.wait(timeout=30)
    doc = state(out)
    assert doc["status"] == "running" and doc["preflight"]["status"] == "done"
    assert doc["phases"]["profile"]["status"] == "running" and doc["phases"]["profile"]["started_at_s"] > 0
    files = packed(out)  # a whole tarball: a kill during a rewrite leaves the last one, not half of the next
    assert json.loads(files["benchmarks/results/test_sitting/sitting.json"])["phases"]["profile"]["status"] == "running"
    assert {"sitting.json", "sitting.log", "sitting.tar.gz"} <= {p.name for p in out.iterdir()}


def committed_cell_job():
    """A committed cell at the paper preset whose artifacts are all there (the fixture unpack places)."""
    from windtunnel.orchestration import reproduce

    for job in reproduce.plan("scale", "paper"):
        if not reproduce.missing(job, REPO / "results"):
            return job
    pytest.skip("no complete committed paper cell")


def test_unpack_places_a_cell_and_the_rows_refuses_to_overwrite_and_replaces_when_asked(tmp_path: Path, capsys) -> None:
    job = committed_cell_job()
    s = gpu_sitting.Sitting(tmp_path / "out", tmp_path / "work", "unit", 5.0, ["profile"], "x")
    assert gpu_sitting.collect_cells(REPO / "results", s.pack_root, [job]) == {job.cell.folder: "exported"}
    s.log("a line")
    s.pack()
    root = tmp_path / "repo"
    root.mkdir()
    cell = f"results/paper/cells/{job.cell.folder}"
    assert gpu_sitting.main(["unpack", str(tmp_path / "out"), "--root", str(root)]) == 0
    assert f"placed {cell}" in capsys.readouterr().out
    source = REPO / cell
    assert sorted(p.name for p in (root / cell).iterdir()) == sorted(p.name for p in source.iterdir())
    assert all((root / cell / p.name).read_bytes() == p.read_bytes() for p in source.iterdir())
    assert json.loads((root / "benchmarks/results/unit/sitting.json").read_text())["name"] == "unit"
    # a second unpack would overwrite both: refused in one line, nothing changed
    (root / cell / "cell.json").write_text("{}")
    assert gpu_sitting.main(["unpack", str(tmp_path / "out"), "--root", str(root)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and cell in err and "benchmarks/results/unit" in err and "--replace" in err
    assert (root / cell / "cell.json").read_text() == "{}"
    assert not [p for p in root.iterdir() if p.name.startswith(".gpu_sitting_unpack")]
    # asked to: the pack's folder replaces the one there, said so
    assert gpu_sitting.main(["unpack", str(tmp_path / "out"), "--root", str(root), "--replace"]) == 0
    assert f"replaced {cell}" in capsys.readouterr().out
    assert (root / cell / "cell.json").read_bytes() == (source / "cell.json").read_bytes()


def test_unpack_refuses_a_path_outside_the_places_a_pack_writes(tmp_path: Path, capsys) -> None:
    evil = tmp_path / "evil"
    evil.mkdir()
    payload = tmp_path / "x"
    payload.write_text("x")
    with tarfile.open(evil / gpu_sitting.PACK, "w:gz") as tar:
        tar.add(payload, arcname="results/../../escape")
    assert gpu_sitting.main(["unpack", str(evil), "--root", str(tmp_path)]) == 2
    assert "not a place a sitting's pack writes" in capsys.readouterr().err
    assert not (tmp_path.parent / "escape").exists()


@pytest.mark.parametrize("argv, says", [
    (["--deadline-min", "8.5"], "required: --out"),
    (["--out", "o", "--deadline-min", "0"], "--deadline-min must be positive"),
    (["--out", "o", "--deadline-min", "-2"], "--deadline-min must be positive"),
    (["--out", "o", "--deadline-min", "x"], "invalid float value"),
    (["--out", "o", "--deadline-min", "8.5", "--phases", "stacked", "warp"], "invalid choice: 'warp'"),
    (["--out", "o", "--deadline-min", "8.5", "--profile-cell", "hmm"], "--profile-cell"),
    (["--out", "o", "--deadline-min", "8.5", "--name", "a/b"], "--name"),
    (["unpack", "no/such/folder"], "holds no sitting.tar.gz"),
    (["unpack"], "required: folder"),
])
def test_bad_input_is_one_line_and_exit_status_2(argv: list, says: str, capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert gpu_sitting.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_an_out_that_is_a_file_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "f").write_text("")
    assert gpu_sitting.main(["--out", str(tmp_path / "f"), "--deadline-min", "1"]) == 2
    assert "is a file" in capsys.readouterr().err


# --- slow: whole phases on a CPU -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_profile_item_whose_estimate_does_not_fit_is_skipped_after_the_pilot(tmp_path: Path) -> None:
    """The first profile has nothing to estimate from and runs as a pilot; the next is estimated from it (linear in
    the members) and, far too long for what is left, skipped with its estimate."""
    code, said = sat(tmp_path, "--deadline-min", "2", "--no-compile-check", "--phases", "profile", "--profile-members",
                     "2", "2000", "--profile-steps", "3", timeout=300)
    assert code == 0, said
    record = state(tmp_path / "out")["phases"]["profile"]
    pilot, big = record["items"]
    assert pilot["estimate"]["seconds"] is None and pilot["status"] == "done"
    row = pilot["row"]
    assert row["members"] == 2 and row["host_ms"] == pytest.approx(row["host_sample_ms"] + row["host_load_ms"])
    assert row["device_ms"] > 0 and row["loop_ms"] > 0 and row["bound"] in ("host", "device")
    assert big["status"] == "skipped" and "exceeds" in big["reason"] and big["estimate"]["seconds"] > 100 * 0.5
    assert record["status"] == "partial"
    rows = [json.loads(x) for x in packed(tmp_path / "out")["benchmarks/results/test_sitting/profile/rows.jsonl"]
            .decode().splitlines()]
    assert [r["members"] for r in rows] == [2]


@pytest.mark.slow
def test_sigterm_stops_the_running_phase_and_its_child_and_packs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with ended_after(sit(tmp_path, "--deadline-min", "5", "--no-compile-check", "--phases", "profile",
                         "--profile-members", "3", "--profile-steps", "100000")) as proc:
        wait_for(lambda: state(out).get("phases", {}).get("profile", {}).get("status") == "running", 90, proc)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)  # the driver alone: it must end its child itself
        said, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, said
    doc = state(out)
    assert doc["status"] == "stopped (SIGTERM)"
    assert doc["phases"]["profile"]["status"] == "stopped" and "SIGTERM" in doc["phases"]["profile"]["reason"]
    work = str(tmp_path / "work")
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and work in _cmdline(p)]
    assert not left, "the phase's child outlived the driver"
    assert json.loads(packed(out)["benchmarks/results/test_sitting/sitting.json"])["status"] == "stopped (SIGTERM)"


def _cmdline(proc_dir: Path) -> str:
    try:
        return (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
def test_the_stacked_phase_runs_on_a_cpu_when_allowed_and_its_rows_unpack_into_benchmarks(tmp_path: Path) -> None:
    code, said = sat(tmp_path, "--deadline-min", "4", "--no-compile-check", "--phases", "stacked", "--allow-cpu",
                     "--preset", "quick", "--columns", "hmm", "--archs", "mlp", "--steps", "4", "--seeds", "2",
                     timeout=400)
    assert code == 0, said
    record = state(tmp_path / "out")["phases"]["stacked"]
    assert record["status"] == "done" and record["rows"] == 1 and record["estimate"]["seconds"] is None
    root = tmp_path / "repo"
    root.mkdir()
    assert gpu_sitting.main(["unpack", str(tmp_path / "out"), "--root", str(root)]) == 0
    rows = [json.loads(x) for x in (root / "benchmarks/results/test_sitting/stacked/rows.jsonl").read_text().splitlines()]
    assert [(r["column"], r["arch"], r["seeds"]) for r in rows] == [("hmm", "mlp", 2)]
    assert rows[0]["graph"]["ms_per_step"] > 0 and rows[0]["alone"]["ms_per_step"] > 0 and rows[0]["cell_wall_s"] > 0
    assert json.loads((root / "benchmarks/results/test_sitting/stacked/summary.json").read_text())["cells"] == 1


@pytest.mark.slow
def test_a_cell_reproduce_exports_is_packed_and_unpacked_into_the_committed_layout(tmp_path: Path) -> None:
    """A real (short) cell through ``reproduce`` as phase b trains one, collected into the pack and unpacked: the
    folder ``reproduce`` wrote, file for file, where the committed cells live; an unfinished one is not packed."""
    from windtunnel.orchestration import reproduce
    from windtunnel.run import grid

    results = tmp_path / "results"
    done = reproduce.Job(grid.Cell("quick", "hmm", "mlp_pointwise", 0, steps=20), analyze=False)
    never = reproduce.Job(grid.Cell("quick", "hmm", "mlp_pointwise", 1, steps=20), analyze=False)
    reproduce.reproduce("scale", "quick", results, jobs=[done], stack="off", workers=1, threads=1)
    s = gpu_sitting.Sitting(tmp_path / "out", tmp_path / "work", "cells", 5.0, ["train"], "x")
    said = gpu_sitting.collect_cells(results, s.pack_root, [done, never])
    assert said[done.cell.folder] == "exported" and said[never.cell.folder].startswith("not exported")
    s.pack()
    root = tmp_path / "repo"
    root.mkdir()
    assert gpu_sitting.main(["unpack", str(tmp_path / "out"), "--root", str(root)]) == 0
    src = reproduce.cell_dir(results, done.cell)
    dst = root / "results" / "quick" / "cells" / done.cell.folder
    assert sorted(p.name for p in dst.iterdir()) == sorted(p.name for p in src.iterdir())
    assert all((dst / p.name).read_bytes() == p.read_bytes() for p in src.iterdir())
    assert not (root / "results" / "quick" / "cells" / never.cell.folder).exists()
    assert gpu_sitting.main(["unpack", str(tmp_path / "out"), "--root", str(root)]) == 1  # a committed cell stays


# --- paper_stacked.py: a stop mid-cell is not that cell's result ---------------------------------------------------
@pytest.mark.slow
def test_a_timing_stopped_mid_cell_writes_no_row_and_a_rerun_measures_the_cell(tmp_path: Path) -> None:
    """SIGTERM while a cell's stack trains: the command ends with the signal's status, writes no row for the cell (it
    used to write the stopped way as an error and skip the cell on the rerun), and the rerun measures it."""
    cmd = [sys.executable, str(STACKED), "--preset", "quick", "--seeds", "2", "--columns", "hmm", "--archs", "mlp",
           "--device", "cpu", "--out", str(tmp_path)]
    with ended_after(subprocess.Popen([*cmd, "--steps", "2000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, cwd=STACKED.parent, start_new_session=True)) as proc:
        for line in proc.stderr:
            if line.startswith("measuring hmm/mlp: graph"):
                break
        time.sleep(2.0)  # inside the training loop
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped during hmm/mlp" in err and "not written" in err
    assert not (tmp_path / "rows.jsonl").exists() or not (tmp_path / "rows.jsonl").read_text().strip()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["cells"] == 0 and summary["not_measured"] == ["hmm/mlp"]
    subprocess.run([*cmd, "--steps", "4"], check=True, capture_output=True, cwd=STACKED.parent)
    rows = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["graph"]["ms_per_step"] > 0 and rows[0]["alone"]["ms_per_step"] > 0
    assert "error" not in rows[0]["graph"] and rows[0]["cell_wall_s"] > 0
    # with a deadline shorter than the longest cell measured so far, the next cell is not started
    ended = subprocess.run([sys.executable, str(STACKED), "--preset", "quick", "--seeds", "2", "--columns", "hmm",
                            "recall", "--archs", "mlp", "--device", "cpu", "--out", str(tmp_path), "--steps", "4",
                            "--deadline-min", "0.05"],
                           capture_output=True, text=True, cwd=STACKED.parent)
    assert ended.returncode == 0, ended.stderr
    assert "recall/mlp not started: its estimate" in ended.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["not_measured"] == ["recall/mlp"] and summary["cells"] == 1
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 1
