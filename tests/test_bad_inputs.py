"""A corpus of bad inputs, generated from the registries: every one gets one line on stderr and
exit status 2 — never a traceback, never a change to what was already on disk."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from windtunnel import tasks
from windtunnel.cli import main
from windtunnel.runs import RunDir
from windtunnel.training import TrainConfig, train

TASKS = [n for n in tasks.names()]
BAD_VALUES = ["true", "-1", "abc", "1e400", "nan", ""]


def user_error(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """Run the CLI; it must exit 2 with exactly one line on stderr; returns that line."""
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, (argv, code, err)
    assert err.startswith("windtunnel: error:") and "\n" not in err, (argv, err)
    return err


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != RunDir.LOCK}


# --- task parameters: every field of every task, several bad values ---------------------------------
def task_cases() -> list[tuple[str, str, str]]:
    out = []
    for name in TASKS:
        cls = tasks.get(name)
        for f in dataclasses.fields(cls):
            for bad in BAD_VALUES:
                if "bool" in str(f.type) and bad == "true":
                    continue
                if "str" in str(f.type) and bad in ("abc", ""):
                    continue
                out.append((name, f.name, bad))
    return out


@pytest.mark.parametrize("name,field,bad", task_cases())
def test_bad_task_parameter(name: str, field: str, bad: str, capsys: pytest.CaptureFixture) -> None:
    code = main(["tasks", "show", name, f"--{field}", bad])
    err = capsys.readouterr().err.strip()
    # a few values are legal for some fields (e.g. -1 for a signed offset): those must simply work
    assert code in (0, 2), (name, field, bad, code)
    if code == 2:
        assert err.startswith("windtunnel: error:") and "\n" not in err and field in err, err
    if bad in ("abc", "", "1e400", "nan") and "str" not in str(next(f.type for f in dataclasses.fields(tasks.get(name)) if f.name == field)):
        assert code == 2, (name, field, bad)  # never a number: always refused


@pytest.mark.parametrize("argv", [
    ["tasks", "show", ""], ["tasks", "show", "nope"], ["tasks", "show", "bijection", "--nope", "1"],
    ["tasks", "show", "bijection", "--L", "true"], ["tasks", "show", "bijection", "--V", "1e400"],
    ["tasks", "frobnicate"], ["--bogus"], ["tasks", "--bogus"], ["eval"], ["table", "--seeds", "0"],
    ["table", "--archs", "gru"], ["table", "--tasks", "sudoku"], ["table", "--steps", "0"], ["table", "--steps", "-3"],
    ["table", "--params", "5"], ["table", "--out", ""], ["run", "--n", "0"], ["run", "bijection", "--arch", "nope"],
    ["run", "nope"], ["train", "--task", "bijection", "--out", ""], ["train", "--task", "bijection"],
    ["regression_sigma_overflow"], ["sticky_noise_overflow"],
    # models from outside the registry, and the Paper II commands
    ["train", "--task", "bijection", "--arch", "no_such_module:make", "--steps", "2", "--out", "r"],
    ["train", "--task", "bijection", "--arch", "os:getcwd", "--steps", "2", "--out", "r"],
    ["train", "--task", "bijection", "--arch", "json:", "--steps", "2", "--out", "r"],
    ["train", "--task", "bijection", "--arch", "hf:", "--steps", "2", "--out", "r"],
    ["train", "--task", "bijection", "--arch", "hf:bert_nope", "--steps", "2", "--out", "r"],
    ["table", "--archs", "hf:nope"], ["table", "--archs", "nomodule:f"], ["run", "bijection", "--arch", "hf:zzz"],
    ["routing"], ["routing", "frobnicate"], ["routing", "law"], ["routing", "law", "no/such/run"],
    ["routing", "law", ".", "--n", "0"], ["routing", "em", "--steps", "0"], ["routing", "em", "--seeds", "-1"],
    ["routing", "em", "extra"], ["routing", "em", "--out", ""], ["routing", "timescales", "--steps", "0"],
    ["routing", "timescales", "--seeds", "0"], ["routing", "em", "--bogus"],
    ["routing", "em", "--deep", "--arms", "em_like"], ["routing", "em", "--arms", "sgd", "nope"],
    ["routing", "timescales", "--deep"], ["routing", "law", ".", "--arms", "sgd"],
    ["routing", "em", "--authors-model"], ["routing", "timescales", "--authors-model"],
    ["routing", "em", "--constant-lr"],
])
def test_bad_command_lines(argv: list[str], capsys: pytest.CaptureFixture, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    if argv == ["regression_sigma_overflow"]:
        argv = ["tasks", "show", "regression", "--sigma", "1e-300"]
    if argv == ["sticky_noise_overflow"]:
        argv = ["tasks", "show", "sticky", "--noise", "1e300"]
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("windtunnel: error:") and "\n" not in err, (argv, code, err)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists()


def test_version_and_help(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and "windtunnel" in capsys.readouterr().out


# --- train: bad configurations never start, never touch an existing run --------------------------------
TRAIN_BAD = [
    ["--arch", "nope"], ["--steps", "0"], ["--steps", "-3"], ["--batch-size", "0"], ["--lr", "2"],
    ["--params", "5"], ["--params", "10000000000"], ["--seed", "-1"], ["--V", "1"], ["--V", "true"],
    ["--L", "0"], ["--bogus", "3"], ["--task", "nope"], ["--task", ""],
]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("bad") / "run"
    cfg = TrainConfig(task="bijection", task_params={"V": 4, "L": 3}, arch="lstm", model={"d_model": 8, "n_layers": 1},
                      steps=6, eval_every=3, ckpt_every=3, eval_n=8, progress=False)
    train(cfg, run)
    return run


@pytest.mark.parametrize("flags", TRAIN_BAD)
@pytest.mark.parametrize("force", [False, True])
def test_bad_train_config_leaves_the_run_alone(flags: list[str], force: bool, tiny_run: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    before = snapshot(run)
    base = ["train", "--task", "bijection", "--out", str(run), "--no-progress"]
    if flags[0] == "--task":
        base = ["train", "--out", str(run), "--no-progress"]
    user_error(base + flags + (["--force"] if force else []), capsys)
    assert snapshot(run) == before


@pytest.mark.parametrize("flags", [["--task", "hmm"], ["--V", "6"], ["--lr", "0.1"], ["--arch", "mlp"],
                                   ["--out", "x"], ["--force"], ["--steps", "0"], ["--steps", "-3"], ["--steps", "2"]])
def test_resume_refuses_changes(flags: list[str], tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    before = snapshot(run)
    user_error(["train", "--resume", str(run), "--no-progress"] + flags, capsys)
    assert snapshot(run) == before


def test_config_file_arch_is_honoured(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"task": "bijection", "task_params": {"V": 4, "L": 3}, "arch": "lstm", "steps": 2,
                               "model": {"d_model": 8, "n_layers": 1}, "eval_n": 8, "progress": False}))
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "r")]) == 0
    assert RunDir(tmp_path / "r").read_config()["model"]["arch"] == "lstm"
    cfg.write_text(json.dumps({"arch": "nope"}))
    user_error(["train", "--config", str(cfg), "--out", str(tmp_path / "r2")], capsys)
    for bad in ("{", "[]", '{"steps": "many"}', '{"data_shards": 3}', '{"data_shards": -1}', '{"data_shards": true}',
                '{"task": "bijection", "model": {"mlp": "relu"}}', '{"task": "bijection", "model": {"mlp": 3}}'):
        cfg.write_text(bad)
        user_error(["train", "--config", str(cfg), "--out", str(tmp_path / "r3")], capsys)
    assert not (tmp_path / "r2").exists() and not (tmp_path / "r3").exists()


# --- damaged run folders: every reader refuses them in one line ---------------------------------------
CONFIG_DAMAGE = ["", "{}", "[]", "garbage", '{"train": {}, "task": {"name": "bijection"}}',
                 '{"train": {}, "task": {"name": "nope", "params": {}}, "model": {"arch": "lstm"}}',
                 '{"train": {}, "task": {"name": "bijection", "params": {}}, "model": {"arch": "gru"}}']


@pytest.mark.parametrize("damage", CONFIG_DAMAGE)
@pytest.mark.parametrize("command", ["eval", "report", "analyze", "resume"])
def test_damaged_config(damage: str, command: str, tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "config.json").write_text(damage)
    before = snapshot(run)
    argv = {"eval": ["eval", str(run), "--n", "8"], "report": ["report", str(run)],
            "analyze": ["analyze", str(run), "--n", "8"], "resume": ["train", "--resume", str(run)]}[command]
    user_error(argv, capsys)
    assert snapshot(run) == before


@pytest.mark.parametrize("damage", ["truncate", "garbage", "missing", "nan", "other_size"])
def test_damaged_checkpoints(damage: str, tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    for ck in RunDir(run).checkpoints.glob("step_*"):
        f = ck / "model.safetensors"
        if damage == "truncate":
            f.write_bytes(f.read_bytes()[:40])
        elif damage == "garbage":
            f.write_bytes(b"\0garbage")
        elif damage == "missing":
            f.unlink()
        elif damage == "nan":
            w = load_file(str(f))
            save_file({k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in w.items()}, str(f))
        else:
            w = load_file(str(f))
            save_file({k: torch.zeros(*(s + 1 for s in v.shape)) for k, v in w.items()}, str(f))
    before = snapshot(run)
    user_error(["eval", str(run), "--n", "8"], capsys)
    assert snapshot(run) == before
    user_error(["train", "--resume", str(run), "--no-progress"], capsys)
    assert snapshot(run) == before


@pytest.mark.parametrize("where", ["file", "under_file", "too_long"])
def test_unwritable_output(where: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    f = tmp_path / "a_file"
    f.write_text("keep me")
    out = {"file": f, "under_file": f / "run", "too_long": tmp_path / ("x" * 300)}[where]
    user_error(["train", "--task", "bijection", "--V", "4", "--L", "3", "--steps", "2", "--out", str(out),
                "--no-progress"], capsys)
    user_error(["run", "bijection", "--V", "4", "--L", "3", "--steps", "2", "--out", str(out), "--no-progress"], capsys)
    assert f.read_text() == "keep me"


def test_table_refuses_a_foreign_table_md(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "table.md").write_text("my notes")
    user_error(["table", "--out", str(tmp_path), "--steps", "2", "--tasks", "recall", "--archs", "lstm"], capsys)
    assert (tmp_path / "table.md").read_text() == "my notes" and not (tmp_path / "runs").exists()


def test_huge_sizes_are_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    user_error(["train", "--task", "bijection", "--V", "4", "--L", "3", "--arch", "lstm", "--batch-size", "100000000000",
                "--steps", "1", "--out", str(tmp_path / "r"), "--no-progress"], capsys)


def test_default_run_folders_differ_by_configuration_and_are_portable() -> None:
    """``windtunnel run``'s default folder: runs/main as shipped; a seed, steps, size, task parameter,
    architecture or preset of its own gets a name of its own, with no ``:`` in it."""
    import argparse

    from windtunnel.cli import _default_run_folder

    def name(task=None, seed=None, steps=None, params=None, preset="quick", arch="transformer", **tp):
        args = argparse.Namespace(task=task, seed=seed, steps=steps, params=params, preset=preset)
        return _default_run_folder(args, task or "bijection", arch, tp)

    assert name() == "runs/main"
    assert name("hmm") == "runs/hmm"
    got = {name(seed=1), name(seed=2), name(steps=10), name(params=9000), name("bijection", V=8),
           name(arch="hf:llama"), name(preset="paper"), name()}
    assert len(got) == 8
    assert name(arch="hf:llama") == "runs/main-hf_llama-quick" and all(":" not in n for n in got)
