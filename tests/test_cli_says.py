"""Every command says what it is doing: the first line before training, "resuming from step N", "nothing to do" on
a finished run, no flag taken from a prefix, the nearest name for a misspelt one, and ``compare`` saying what
each run is and what keeps their numbers apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from windtunnel.cli import main

TINY = ["bijection", "--V", "4", "--L", "4", "--steps", "12", "--n", "16", "--params", "6000", "--no-progress"]


@pytest.mark.slow
def test_run_says_what_it_trains_and_a_finished_run_is_not_redone(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    assert main(["run", *TINY, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert said.splitlines()[0].startswith("training transformer (") and f"into {out}" in said.splitlines()[0]
    assert "for 12 steps of batch" in said and "from step 0" in said
    geometry = (out / "geometry.json").stat().st_mtime_ns
    assert main(["run", *TINY, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"{out} already finished (step 12 of 12) and evaluated and analysed: nothing to do" in said
    assert "training transformer" not in said and (out / "geometry.json").stat().st_mtime_ns == geometry
    assert main(["train", "--resume", str(out), "--steps", "16", "--no-progress"]) == 0
    assert f"resuming {out} from step 12 of 16" in capsys.readouterr().out
    assert main(["run", *TINY, "--out", str(tmp_path / "other"), "--no-analyze"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("argv, says", [
    (["train", "--task", "bijection", "--step", "3", "--out", "X"], "unknown parameter 'step' for task 'bijection' (did you mean '--steps'?)"),
    (["train", "--task", "bijection", "--stpes", "3", "--out", "X"], "(did you mean '--steps'?)"),
    (["reprodcue", "paper1"], "invalid choice: 'reprodcue' (did you mean 'reproduce'?)"),
])
def test_no_flag_is_taken_from_a_prefix_and_a_slip_gets_the_nearest_name(argv: list[str], says: str, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    argv = [str(tmp_path / "x") if a == "X" else a for a in argv]
    assert main(argv) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_compare_says_what_each_run_is_and_writes_its_figure_beside_them(tmp_path: Path, monkeypatch,
                                                                          capsys: pytest.CaptureFixture) -> None:
    a, b = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    assert main(["run", *TINY, "--out", str(a), "--no-analyze"]) == 0
    assert main(["run", "bijection", "--V", "5", "--L", "5", "--steps", "8", "--n", "16", "--params", "6000",
                 "--no-progress", "--no-analyze", "--out", str(b)]) == 0
    capsys.readouterr()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["compare", str(a), str(b)]) == 0
    said = capsys.readouterr()
    rows = {line.split()[0] for line in said.out.splitlines() if line.strip()}
    assert {"task", "architecture", "parameters", "step", "entropy_mae_curve"} <= rows
    assert "note: the runs are on different tasks" in said.err and "their recipes differ in steps" in said.err
    assert (tmp_path / "runs" / "compare.png").is_file() and not any(cwd.iterdir())


def test_train_seeds_trains_the_seeds_stacked_into_their_own_folders(tmp_path: Path, capfd) -> None:
    """``--stack on``: one stacked model (each run's timings say two members); on CPU cores ``auto`` trains the
    seeds as separate processes started together (one member each, each line naming its seed), the faster way
    there; the same command again after both finished refuses to write over them."""
    import json

    args = ["train", "--task", "bijection", "--V", "4", "--L", "4", "--params", "6000", "--steps", "6", "--no-progress"]
    out = tmp_path / "r"
    assert main([*args, "--seeds", "3,5", "--out", str(out), "--stack", "on"]) == 0
    assert "seeds 3, 5 stacked into one model" in capfd.readouterr().out
    for seed in (3, 5):
        assert json.loads((tmp_path / f"r-s{seed}" / "timings.json").read_text())["execution"]["members"] == 2
    apart = tmp_path / "a"
    assert main([*args, "--seeds", "3,5", "--out", str(apart)]) == 0
    said = capfd.readouterr().out
    assert "seeds 3, 5 as 2 separate processes" in said and "[seed 5] transformer/bijection execution: cpu" in said
    for seed in (3, 5):
        timings = json.loads((tmp_path / f"a-s{seed}" / "timings.json").read_text())
        assert timings["execution"]["members"] == 1 and timings["train_s"] > 0
        assert f"trained seed {seed}: {tmp_path / f'a-s{seed}'}" in said
    assert main([*args, "--seeds", "3,5", "--out", str(apart), "--steps", "7"]) == 2  # another recipe: refused
    assert main(["train", "--task", "bijection", "--seeds", "1,1", "--out", str(out)]) == 2
    assert main(["train", "--task", "bijection", "--seeds", "1,2", "--seed", "4", "--out", str(out)]) == 2
    assert main(["train", "--task", "bijection", "--seeds", "1,2", "--stack", "off", "--cuda-graph", "off",
                 "--out", str(out)]) == 2
    assert main(["train", "--task", "bijection", "--stack", "on", "--out", str(out)]) == 2


@pytest.mark.slow
def test_runs_lists_where_each_run_stands(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``windtunnel runs DIR``: each run folder with its task, architecture, step of steps, and which of its results
    are missing or stale — a run extended past its evaluation says its eval.json is stale."""
    a, b = tmp_path / "runs" / "a", tmp_path / "runs" / "nested" / "b"
    assert main(["run", *TINY, "--out", str(a), "--no-analyze"]) == 0
    assert main(["train", "--task", "recall", "--params", "6000", "--steps", "4", "--out", str(b), "--no-progress"]) == 0
    assert main(["train", "--resume", str(a), "--steps", "16", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["runs", str(tmp_path / "runs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2  # checkpoint and figure folders are not runs
    assert lines[0].startswith(f"{a}  bijection / transformer  step 16 of 16 (finished)")
    assert "eval.json stale" in lines[0] and "geometry.json missing" in lines[0]
    assert lines[1].startswith(f"{b}  recall / transformer  step 4 of 4 (finished)") and "eval.json missing" in lines[1]
    assert main(["runs", str(tmp_path / "none")]) == 2


@pytest.mark.slow
def test_eval_says_when_it_works_on_an_unfinished_run_and_keeps_run_s_size(tmp_path: Path, capsys) -> None:
    from windtunnel.training.loop import TrainConfig, train

    run = tmp_path / "stopped"
    train(TrainConfig(task="bijection", task_params={"V": 4, "L": 4}, params=6000, steps=12, ckpt_every=6,
                      eval_every=6, eval_n=16, progress=False), run, until=6)
    assert main(["eval", str(run)]) == 0
    said = capsys.readouterr()
    assert f"note: {run} is at step 6 of 12 (unfinished): evaluated its newest checkpoint" in said.err
    assert "on 1000 sequences" in said.out  # windtunnel run's evaluation size (quick preset), not another
    assert main(["eval", str(run), "--n", "64", "--force"]) == 0 and "on 64 sequences" in capsys.readouterr().out
    assert main(["eval", str(run), "--force"]) == 0 and "on 64 sequences" in capsys.readouterr().out  # its own size
    assert main(["report", str(run)]) == 0
    html, md = (run / "report.html").read_text(), (run / "summary.md").read_text()
    assert "trained to step 6 of its 12" in html and md.index("**Unfinished:**") < md.index("Metrics")
