"""The command line end to end (tiny budgets), and the table's resume-without-redo contract."""

import json
from pathlib import Path

import pytest

from windtunnel import tasks
from windtunnel.cli import main
from windtunnel.orchestration.table import run_table


def test_tasks_list_and_show(capsys: pytest.CaptureFixture) -> None:
    assert main(["tasks"]) == 0
    listing = capsys.readouterr().out
    listed = [line.split()[0] for line in listing.splitlines()[::2]]
    assert set(tasks.names()) <= set(listed), sorted(set(tasks.names()) - set(listed))  # every registered task
    assert main(["tasks", "show", "hmm", "--K", "4"]) == 0
    shown = capsys.readouterr().out
    assert "H_Bayes" in shown and "o" in shown
    assert main(["tasks", "show", "bijection", "--V", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "V" in err
    assert main(["tasks", "show", "nope"]) == 2
    assert main(["tasks", "show", "coin", "--n"]) == 2


@pytest.mark.slow
def test_run_main_job_then_rerun_resumes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    args = ["run", "bijection", "--V", "4", "--L", "4", "--steps", "30", "--n", "64", "--out", str(out), "--no-progress", "--no-analyze"]
    assert main(args) == 0
    for name in ("config.json", "metrics.jsonl", "eval.json", "report.html", "summary.md", "figures/entropy.png"):
        assert (out / name).exists(), name
    first = json.loads((out / "eval.json").read_text())
    assert first["oracle"]["kl"]["value"] < 1e-9
    assert main(args) == 0  # same command: resumes (already complete), re-evaluates, nothing lost
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_00000030"
    # a different configuration in the same folder is refused, and the folder is intact
    assert main(["run", "bijection", "--V", "5", "--L", "4", "--steps", "30", "--out", str(out), "--no-progress", "--no-analyze"]) == 2
    assert "different configuration" in capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["task"]["params"]["V"] == 4


@pytest.mark.slow
def test_the_main_job_trains_its_recipe_and_resumes_folders_of_older_versions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``windtunnel run`` with no task trains the grid's ``main`` experiment (only the step count is
    shortened here), and a folder written before a config key existed still resumes."""
    from dataclasses import replace

    from windtunnel.run import grid

    args = ["run", "--n", "32", "--steps", "4", "--out", str(tmp_path / "main"), "--no-progress", "--no-analyze"]
    assert main(args) == 0
    train = json.loads((tmp_path / "main" / "config.json").read_text())["train"]
    assert (train["task"], train["steps"], train["batch_size"]) == (grid.DEFAULT_TASK, 4, grid.MAIN_JOB_BATCH)
    assert (train["lr"], train["readout_lr_mult"]) == (grid.MAIN_JOB_LR, grid.MAIN_JOB_READOUT_LR_MULT)
    # a version before readout_lr_mult: the key absent from config.json, the readout trained at 1×
    e = grid.EXPERIMENTS[grid.MAIN_JOB]
    monkeypatch.setitem(grid.EXPERIMENTS, grid.MAIN_JOB,
                        replace(e, recipes={**e.recipes, "quick": replace(e.recipes["quick"], readout_lr_mult=1.0)}))
    old = tmp_path / "old"
    args = ["run", "--n", "32", "--steps", "4", "--out", str(old), "--no-progress", "--no-analyze"]
    assert main(args) == 0
    record = json.loads((old / "config.json").read_text())
    del record["train"]["readout_lr_mult"]
    (old / "config.json").write_text(json.dumps(record))
    assert main(args) == 0  # resumes (complete): the missing key reads as its default
    assert (old / "checkpoints" / "latest").read_text().strip() == "step_00000004"


def test_run_trains_the_main_job_of_the_size_it_names(tmp_path: Path) -> None:
    """``run bijection --V 20`` (or ``run --V 20``) is the main job on the papers' V=20, L=19 cell with
    its own recipe; another V keeps the V=10 recipe with the parameters changed; another task is itself."""
    from windtunnel.run import grid

    assert grid.main_job(None, {}) == grid.MAIN_JOB == grid.main_job("bijection", {"L": 5})
    assert grid.main_job("bijection", {"V": 20}) == grid.main_job(None, {"V": 20, "L": 7}) == "main_v20"
    assert grid.main_job(None, {"V": 4}) == grid.main_job(None, {"V": "x"}) == grid.MAIN_JOB
    assert grid.main_job("hmm", {"V": 20}) == "hmm"
    assert grid.EXPERIMENTS["main_v20"].task_params["quick"] == {"V": 20, "L": 19}
    out = tmp_path / "v20"
    # the README's form: a task parameter and its value with no task named (argparse alone would read the value
    # as the optional TASK)
    assert main(["run", "--V", "20", "--steps", "3", "--n", "16", "--out", str(out), "--no-progress",
                 "--no-analyze"]) == 0
    record = json.loads((out / "config.json").read_text())
    recipe = grid.EXPERIMENTS["main_v20"].recipes["quick"]
    assert record["task"]["params"] == {**record["task"]["params"], "V": 20, "L": 19}
    assert (record["train"]["batch_size"], record["train"]["lr"], record["train"]["readout_lr_mult"]) == (
        recipe.batch_size, recipe.lr, recipe.readout_lr_mult)
    assert abs(record["n_params"] - recipe.params) <= 0.03 * recipe.params


@pytest.mark.slow
def test_table_resumes_without_redoing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    kw = dict(preset="quick", archs=["lstm", "mlp"], tasks=["recall"], out=tmp_path, workers=1, steps=20, eval_n=64,
              seeds=1)
    md = run_table(**kw)
    table = json.loads((tmp_path / "table.json").read_text())
    assert {c["arch"] for c in table["cells"]} == {"lstm", "mlp"}
    cell = table["cells"][0]
    assert set(cell) >= {"task", "arch", "seeds", "params", "metrics", "run_dirs"}
    assert set(cell["metrics"]["accuracy"]) >= {"mean", "std", "ci95", "bootstrap_ci"}
    text = md.read_text()
    assert "Bayes oracle" in text and "context-blind optimum" in text and (tmp_path / "table.html").exists()
    refs = table["references"]["recall"]
    assert refs["oracle"]["metrics"]["accuracy"] == 1.0
    # the context-blind optimum on recall: chance over the 16 values (uniform at every query)
    assert abs(refs["context_blind"]["metrics"]["kl"] - 4.0) < 0.05
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/eval.json")}
    assert "Training time of all cells" in text and "reused" not in text
    capsys.readouterr()
    run_table(**kw)
    said = capsys.readouterr().out  # a resumed table says what it resumed, cell by cell
    assert "resuming the table: 2 of 2 cells finished earlier are reused, 0 to work" in said
    assert said.count("  reused recall/") == 2 and "  done " not in said
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/eval.json")} == stamps
    again = json.loads((tmp_path / "table.json").read_text())["meta"]
    assert again["cells_reused"] == again["cells"] == 2
    assert again["train_s_total"] == pytest.approx(table["meta"]["train_s_total"])  # the cells' own times
    assert "2 of 2 cells reused" in (tmp_path / "table.md").read_text()
    # a cell trained under another recipe is neither reused nor overwritten: one clear refusal
    snapshot = {p: p.read_bytes() for p in tmp_path.glob("runs/**/*") if p.is_file()}
    with pytest.raises(ValueError, match=r"recall-lstm-s0 was trained with another recipe \(.*steps.* differ\)"):
        run_table(**{**kw, "steps": 30})
    assert {p: p.read_bytes() for p in tmp_path.glob("runs/**/*") if p.is_file()} == snapshot
    with pytest.raises(ValueError, match="unknown arch"):
        run_table(preset="quick", archs=["no-such-arch"], out=tmp_path)


@pytest.mark.slow
def test_table_takes_the_cells_reproduce_committed_when_their_run_folders_are_gone(tmp_path: Path) -> None:
    """The committed cells and the table are one set of runs: with the (uncommitted) run folder gone, the
    table re-renders from the cell ``reproduce`` exported, without training; a committed cell of another
    recipe is never taken for it."""
    import shutil

    from windtunnel.run import grid
    from windtunnel.orchestration import reproduce

    out = tmp_path / "quick"
    kw = dict(preset="quick", archs=["lstm"], tasks=["recall"], out=out, workers=1, steps=20, eval_n=64, seeds=1)
    run_table(**kw)
    first = json.loads((out / "table.json").read_text())
    from windtunnel.run.runs import RunDir
    from windtunnel.orchestration.table import references

    cell = grid.Cell("quick", "recall", "lstm", 0, None, 20)
    RunDir(out / "runs" / cell.folder).write_references(references("quick", "recall", 64, None))  # as reproduce does
    reproduce.export(reproduce.Job(cell, analyze=False), tmp_path)  # what reproduce commits
    shutil.rmtree(out / "runs")
    run_table(**kw)
    again = json.loads((out / "table.json").read_text())
    assert not any((out / "runs").iterdir())  # nothing trained
    committed = str(tmp_path / "quick" / "cells" / cell.folder)
    assert again["cells"][0]["run_dirs"] == [committed]  # the folder the numbers now live in
    assert {k: v for k, v in again["cells"][0].items() if k != "run_dirs"} == \
        {k: v for k, v in first["cells"][0].items() if k != "run_dirs"}
    assert again["meta"]["cells_reused"] == again["meta"]["cells"] == 1
    # another recipe (more steps) or another evaluation size: the committed cell is not this table's; it trains
    for change in ({"steps": 30}, {"eval_n": 32}):
        shutil.rmtree(out / "runs")
        (out / "runs").mkdir()
        run_table(**{**kw, **change})
        assert (out / "runs" / cell.folder / "cell.json").is_file(), change
        assert json.loads((out / "table.json").read_text())["meta"]["cells_reused"] == 0
    # a run folder of its own, even unfinished, is the cell: the committed one is not taken in its place
    from windtunnel.orchestration.table import committed_cell

    job = {"config": cell.config(), "run_dir": str(out / "runs" / cell.folder), "eval_n": 64, "lengths": None}
    assert committed_cell(job, out) is None
    shutil.rmtree(out / "runs" / cell.folder)
    assert committed_cell(job, out)["run_dir"] == committed
    (tmp_path / "quick" / "cells" / cell.folder / "config.json").write_text("{not json")  # damaged: not taken
    assert committed_cell(job, out) is None


@pytest.mark.slow
def test_table_cells_are_in_the_tables_order_and_read_by_column_and_row(tmp_path: Path) -> None:
    """table.json lists cells column by column, row by row, each metric's per-seed values in seed order
    whatever order the cells finished in; a ``table:`` fact finds a cell by its column and row."""
    from windtunnel.claims import docs
    from windtunnel.claims.evidence import Evidence, _g

    out = tmp_path / "quick"
    run_table(preset="quick", archs=["mlp", "lstm"], tasks=["recall"], out=out, workers=2, steps=5, eval_n=32, seeds=2)
    table = json.loads((out / "table.json").read_text())
    assert [(c["task"], c["arch"]) for c in table["cells"]] == [("recall", "lstm"), ("recall", "mlp")]  # ARCHS order
    for c in table["cells"]:
        assert c["seeds"] == [0, 1]
        per_seed = [json.loads((out / "runs" / f"recall-{c['arch']}-s{s}" / "cell.json").read_text())["metrics"]["kl"]
                    for s in (0, 1)]
        assert c["metrics"]["kl"]["values"] == per_seed
    mlp = table["cells"][1]["metrics"]["kl"]["mean"]
    assert docs.fact("table:quick:recall:mlp:metrics.kl.mean", Evidence(tmp_path), {}) == _g(mlp)
    with pytest.raises(Exception, match="reads nothing"):
        docs.fact("table:quick:hmm:mlp:metrics.kl.mean", Evidence(tmp_path), {})


def test_aggregate_cells_orders_by_column_row_and_seed_whatever_order_they_come_in(tmp_path: Path) -> None:
    import random

    from windtunnel.orchestration.table import aggregate_cells

    def cell(task: str, arch: str, seed: int) -> dict:
        v = {"kl": 0.1 * seed + (1.0 if arch == "mlp" else 0.0)}
        return {"task": task, "arch": arch, "seed": seed, "params": 1, "metrics": v, "ci": {"kl": [0, 1]},
                "lengths": {}, "run_dir": f"{task}-{arch}-s{seed}", "train_s": 1.0}

    cells = [cell(t, a, s) for t in ("recall", "bijection") for a in ("pkg.mod:factory", "mlp", "transformer")
             for s in (2, 0, 1)]
    random.Random(0).shuffle(cells)
    table = aggregate_cells(cells)
    assert [(c["task"], c["arch"]) for c in table] == [
        ("bijection", "transformer"), ("bijection", "mlp"), ("bijection", "pkg.mod:factory"),
        ("recall", "transformer"), ("recall", "mlp"), ("recall", "pkg.mod:factory")]  # columns, rows, then others
    for c in table:
        assert c["seeds"] == [0, 1, 2]
        assert c["run_dirs"] == [f"{c['task']}-{c['arch']}-s{s}" for s in (0, 1, 2)]
        assert c["metrics"]["kl"]["values"] == pytest.approx([0.1 * s + (1.0 if c["arch"] == "mlp" else 0.0)
                                                              for s in (0, 1, 2)])
    # a table: fact finds an external architecture's row by its full name (package.module:factory)
    from windtunnel.claims import docs
    from windtunnel.claims.evidence import Evidence

    (tmp_path / "quick").mkdir()
    (tmp_path / "quick" / "table.json").write_text(json.dumps({"cells": table}))
    assert docs.fact("table:quick:recall:pkg.mod:factory:metrics.kl.mean", Evidence(tmp_path), {}) == "0.1"


def test_every_option_of_every_command_says_what_it_does() -> None:
    import argparse

    from windtunnel.cli import make_parser

    missing, seen = [], 0

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:  # every command, sub-commands included
        nonlocal seen
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, f"{prefix} {name}".strip())
            if prefix and not a.help and not isinstance(a, argparse._HelpAction):
                missing.append(f"{prefix} {a.option_strings or a.dest}")
            seen += 1

    walk(make_parser(), "")
    assert missing == [] and seen > 60
