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
from windtunnel.run.runs import RunDir
from windtunnel.training.loop import TrainConfig, train

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
    ["table", "--archs", "no-such-arch"], ["table", "--tasks", "sudoku"], ["table", "--steps", "0"], ["table", "--steps", "-3"],
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
    # numbers beyond what the code holds, and empty file names
    ["tasks", "show", "bijection", "--seed", "100000000000000000000"], ["tasks", "show", "bijection", "--seed", "-1"],
    ["eval", "r", "--seed", str(10**30)], ["train", "--task", "bijection", "--seed", str(2**31), "--out", "r"],
    ["table", "--steps", str(2**63)], ["run", "--n", str(10**20)], ["train", "--config", "", "--out", "r"],
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
    ["--L", "0"], ["--bogus", "3"], ["--task", "nope"], ["--task", ""], ["--log", "neptune"],
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
                 '{"train": {}, "task": {"name": "bijection", "params": {}}, "model": {"arch": "no-such-arch"}}']


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
    from windtunnel.orchestration.main_job import default_folder

    def name(task=None, seed=None, steps=None, params=None, preset="quick", arch="transformer", **tp):
        return default_folder(task, arch, preset, task_params=tp, steps=steps, seed=seed, params=params).as_posix()

    assert name() == "runs/main"
    assert name("hmm") == "runs/hmm"
    got = {name(seed=1), name(seed=2), name(steps=10), name(params=9000), name("bijection", V=8),
           name(arch="hf:llama"), name(preset="paper"), name()}
    assert len(got) == 8
    assert name(arch="hf:llama") == "runs/main-hf_llama-quick" and all(":" not in n for n in got)


# --- the filesystem is not what the code assumed: every entry of the layout, the wrong kind ----------
LAYOUT = list(RunDir.FILES + RunDir.FOLDERS)
READERS = {"eval": ["eval", "{run}", "--n", "8", "--force"], "report": ["report", "{run}"],
           "analyze": ["analyze", "{run}", "--n", "8", "--force"], "resume": ["train", "--resume", "{run}", "--no-progress"],
           "routing law": ["routing", "law", "{run}", "--n", "4"], "compare": ["compare", "{run}", "{run}", "--out", "{run}.png"]}


@pytest.fixture(scope="module")
def full_run(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny run evaluated, analysed and reported: every entry of the layout present."""
    run = tmp_path_factory.mktemp("full") / "run"
    shutil.copytree(tiny_run, run)
    assert main(["eval", str(run), "--n", "8"]) == 0
    assert main(["analyze", str(run), "--n", "8"]) in (0, 1)
    (run / RunDir.CELL).write_text(json.dumps({"task": "x", "arch": "lstm", "seed": 0, "metrics": {}}))
    return run


@pytest.mark.parametrize("entry", LAYOUT)
@pytest.mark.parametrize("command", list(READERS))
@pytest.mark.slow
def test_an_entry_of_the_wrong_kind_is_refused_before_anything_changes(entry: str, command: str, full_run: Path,
                                                                       tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    shutil.copytree(full_run, run)
    target = run / entry
    if target.is_dir():
        shutil.rmtree(target)
        target.write_text("not a folder")
    else:
        target.unlink(missing_ok=True)
        (target / "inside").mkdir(parents=True)
    before = snapshot(run)
    err = user_error([a.format(run=run) for a in READERS[command]], capsys)
    assert entry in err
    assert snapshot(run) == before and target.exists()


def _as_a_user(argv: list[str], cwd: Path) -> "subprocess.CompletedProcess[str]":
    """Run the CLI in a child as a user the file modes apply to: as root, without the capabilities that
    override them (``setpriv``), so read-only means read-only."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "windtunnel.cli", *argv]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: file modes cannot be tested")
        caps = "-dac_override,-dac_read_search"
        cmd = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=300)


PERMISSION_CASES = {
    "eval, read-only run": (["eval", "{run}", "--n", "8", "--force"], "."),
    "report, read-only run": (["report", "{run}"], "."),
    "analyze, read-only run": (["analyze", "{run}", "--n", "8", "--force"], "."),
    "resume, read-only run": (["train", "--resume", "{run}", "--no-progress"], "."),
    "eval, read-only figures": (["eval", "{run}", "--n", "8", "--force"], "figures"),
    "resume, read-only checkpoints": (["train", "--resume", "{run}", "--no-progress"], "checkpoints"),
    "resume, read-only training log": (["train", "--resume", "{run}", "--no-progress"], RunDir.METRICS),
    "train into a read-only parent": (["train", "--task", "bijection", "--V", "4", "--L", "3", "--steps", "2",
                                       "--out", "{run}/../locked/new", "--no-progress"], "../locked"),
    "table into a read-only folder": (["table", "--steps", "2", "--tasks", "recall", "--archs", "lstm",
                                       "--seeds", "1", "--out", "{run}/../locked"], "../locked"),
}


@pytest.mark.parametrize("case", list(PERMISSION_CASES))
@pytest.mark.slow
def test_permissions_are_one_line_and_change_nothing(case: str, full_run: Path, tmp_path: Path) -> None:
    import os
    import stat

    argv, locked = PERMISSION_CASES[case]
    run = tmp_path / "run"
    shutil.copytree(full_run, run)
    (tmp_path / "locked").mkdir()
    target = (run / locked).resolve()
    paths = [target, *target.rglob("*")] if target.is_dir() else [target]
    modes = {p: p.stat().st_mode for p in paths}
    for p in paths:
        os.chmod(p, modes[p] & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    before = snapshot(run)
    try:
        proc = _as_a_user([a.format(run=run) for a in argv], tmp_path)
    finally:
        for p in paths:
            os.chmod(p, modes[p])
    err = proc.stderr.strip()
    assert proc.returncode == 2 and err.startswith("windtunnel: error:") and "\n" not in err, (case, proc.returncode, err)
    assert snapshot(run) == before and not any((tmp_path / "locked").iterdir())


# --- a damaged checkpoint's insides ----------------------------------------------------------------
def _partial_run(tmp_path: Path, until: int | None) -> tuple[TrainConfig, Path]:
    cfg = TrainConfig(task="bijection", task_params={"V": 4, "L": 3}, arch="lstm", model={"d_model": 8, "n_layers": 1},
                      steps=8, eval_every=2, ckpt_every=2, eval_n=8, keep_last=3, log_checkpoints=False, progress=False)
    run = tmp_path / f"run-{until}"
    train(cfg, run, until=until)
    return cfg, run


def _state(run: Path) -> dict[str, "Any"]:
    from safetensors.torch import load_file

    return load_file(str(RunDir(run).latest_checkpoint() / "model.safetensors"))


INSIDES = {
    "optimizer truncated": lambda ck: (ck / "optimizer.safetensors").write_bytes((ck / "optimizer.safetensors").read_bytes()[:30]),
    "optimizer missing": lambda ck: (ck / "optimizer.safetensors").unlink(),
    "state without fields": lambda ck: (ck / "state.json").write_text("{}"),
    "state of another step": lambda ck: (ck / "state.json").write_text(
        json.dumps({**json.loads((ck / "state.json").read_text()), "step": 999})),
    "generator state of the wrong size": lambda ck: (ck / "state.json").write_text(
        json.dumps({**json.loads((ck / "state.json").read_text()), "rng": {"torch": "YWJj"}})),
    "weights truncated": lambda ck: (ck / "model.safetensors").write_bytes((ck / "model.safetensors").read_bytes()[:50]),
}


@pytest.mark.parametrize("damage", list(INSIDES))
def test_a_damaged_newest_checkpoint_falls_back_and_resumes_exactly(damage: str, tmp_path: Path, capsys) -> None:
    """The newest checkpoint damaged inside: the resume starts from the one before, says so, and ends
    bitwise where an undamaged run ends."""
    import torch

    _, whole = _partial_run(tmp_path, None)
    cfg, run = _partial_run(tmp_path, 6)
    newest = RunDir(run).checkpoints / "step_00000006"
    INSIDES[damage](newest)
    train(cfg, run, resume=True)
    assert "resuming" in capsys.readouterr().err
    a, b = _state(whole), _state(run)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("damage", list(INSIDES) + ["checkpoints folder gone"])
def test_no_whole_checkpoint_refuses_and_keeps_the_log(damage: str, tmp_path: Path, capsys) -> None:
    """With no whole checkpoint left, resume refuses in one line: it never starts a new run over the
    old one's training log."""
    _, run = _partial_run(tmp_path, 6)
    if damage == "checkpoints folder gone":
        shutil.rmtree(RunDir(run).checkpoints)
    else:
        for ck in RunDir(run).checkpoints.glob("step_*"):
            INSIDES[damage](ck)
    before = snapshot(run)
    user_error(["train", "--resume", str(run), "--no-progress"], capsys)
    assert snapshot(run) == before


# --- config values of the wrong type: every field of TrainConfig ------------------------------------
WRONG_KIND = {"str": [3, True, ""], "int": [True, "3", 2.5], "float": [True, "x", None], "bool": ["no", "maybe", 1],
              "int?": [True, "3", 2.5], "table": [[], "x"], "list": [{}, "x"]}


def config_type_cases() -> list[tuple[str, "Any"]]:
    from windtunnel.run.config import _KINDS

    return [(f.name, bad) for f in dataclasses.fields(TrainConfig) for bad in WRONG_KIND[_KINDS[str(f.type)]]]


@pytest.mark.parametrize("field,bad", config_type_cases())
def test_a_config_value_of_the_wrong_type_is_refused(field: str, bad: "Any", tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"task": "bijection", "steps": 1, field: bad}))  # no flag overrides the field
    err = user_error(["train", "--config", str(cfg), "--out", str(tmp_path / "r")], capsys)
    assert field in err and not (tmp_path / "r").exists()


# --- nothing overwrites a result by default ---------------------------------------------------------
FINISHED_RESULTS = {
    "table": ["table", "--steps", "2", "--tasks", "recall", "--archs", "lstm", "--seeds", "1", "--workers", "1"],
    "routing em": ["routing", "em", "--steps", "2", "--seeds", "1", "--arms", "sgd"],
    "routing timescales": ["routing", "timescales", "--steps", "2", "--seeds", "1"],
}


@pytest.mark.parametrize("command", list(FINISHED_RESULTS))
@pytest.mark.slow
def test_a_finished_result_is_replaced_only_with_force(command: str, tmp_path: Path, capsys) -> None:
    """A second run into a folder that holds a finished result — the same recipe or a smoke run of
    another — is refused before any work; ``--force`` replaces it."""
    argv = FINISHED_RESULTS[command] + ["--out", str(tmp_path / "out")]
    assert main(argv) == 0
    capsys.readouterr()
    before = snapshot(tmp_path / "out")
    assert "--force" in user_error(argv, capsys)
    assert "--force" in user_error([a if a != "2" else "3" for a in argv], capsys)  # another recipe: the same
    assert snapshot(tmp_path / "out") == before
    assert main(argv + ["--force"]) == 0


def test_routing_em_with_more_seeds_extends_the_finished_result(tmp_path: Path, capsys) -> None:
    """More seeds of the same setup add to a finished EM experiment without ``--force``: the finished
    seed's record is reused, not retrained; fewer seeds, or another setup, are still refused."""
    out = tmp_path / "out"
    one = ["routing", "em", "--steps", "2", "--seeds", "1", "--arms", "sgd", "--out", str(out)]
    assert main(one) == 0
    first = (out / "runs.jsonl").read_text().splitlines()
    capsys.readouterr()
    doc = json.loads((out / "em.json").read_text())
    del doc["setup"]["norm"]  # as em.json was written before the field existed: it ran at the default
    (out / "em.json").write_text(json.dumps(doc))
    assert main([a if a != "1" else "2" for a in one]) == 0
    lines = (out / "runs.jsonl").read_text().splitlines()
    assert lines[0] == first[0] and len(lines) == 2  # seed 42 kept as it was, seed 2024 added
    assert json.loads((out / "em.json").read_text())["setup"]["seeds"] == [42, 2024]
    before = snapshot(out)
    assert "--force" in user_error(one, capsys)  # fewer seeds would replace the 2-seed result
    other_setup = ["routing", "em", "--steps", "3", "--seeds", "3", "--arms", "sgd", "--out", str(out)]
    assert "--force" in user_error(other_setup, capsys)  # more seeds, but of another setup
    assert snapshot(out) == before


def test_eval_keeps_a_better_evaluation_unless_forced(full_run: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    shutil.copytree(full_run, run)
    assert main(["eval", str(run), "--n", "16", "--lengths", "3", "--force"]) == 0
    before = snapshot(run)
    for argv in (["--n", "3"], ["--n", "16", "--seed", "5"], ["--n", "16", "--lengths", "2"]):
        assert "--force" in user_error(["eval", str(run), *argv], capsys)
    assert snapshot(run) == before
    assert main(["eval", str(run), "--n", "16"]) == 0  # the same evaluation again: its lengths kept
    assert set(RunDir(run).read_eval()["lengths"]) == {"3"}
    assert main(["eval", str(run), "--n", "3", "--force"]) == 0 and RunDir(run).read_eval()["n"] == 3


def test_analyze_keeps_diagnostics_on_more_episodes_unless_forced(full_run: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    shutil.copytree(full_run, run)
    before = snapshot(run)
    assert "--force" in user_error(["analyze", str(run), "--n", "4"], capsys)
    assert snapshot(run) == before


def test_a_run_being_trained_is_not_evaluated_analysed_or_reported(full_run: Path, tmp_path: Path, capsys) -> None:
    """Another process holds the run (training it): the readers refuse instead of reading a moving checkpoint."""
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(full_run, run)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(run / RunDir.LOCK)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(run)
        for argv in (READERS["eval"], READERS["analyze"], READERS["report"]):
            assert "in use" in user_error([a.format(run=run) for a in argv], capsys)
        assert snapshot(run) == before
    finally:
        holder.kill()
        holder.wait()


def test_a_failing_diagnostic_fails_the_command_and_keeps_the_others(full_run: Path, tmp_path: Path, capsys,
                                                                     monkeypatch) -> None:
    import dataclasses as dc

    from windtunnel.geometry import registry

    _, model = RunDir(full_run).load()
    name = next(n for n, d in registry.discover().items() if d.applies(model) and not d.checkpoints)
    broken = dc.replace(registry.discover()[name], compute=lambda *a, **k: 1 / 0)  # one that runs on this model
    monkeypatch.setitem(registry._REGISTRY, name, broken)
    run = tmp_path / "run"
    shutil.copytree(full_run, run)
    assert main(["analyze", str(run), "--n", "8", "--force"]) == 1
    assert name in capsys.readouterr().err
    geo = RunDir(run).read_geometry()
    assert "error" in geo[name] and any(k != name and isinstance(v, dict) and "error" not in v
                                        for k, v in geo.items() if k not in ("summary", "meta", "interpretation"))


def test_a_short_run_scales_the_preset_curriculum() -> None:
    from windtunnel.run import grid

    cfg = grid.with_steps(grid.preset("quick", "bijection_replacement", "transformer"), 400)
    assert cfg["steps"] == 400 and [s["until"] for s in cfg["curriculum"]] == [50]
    TrainConfig.from_dict(cfg)  # valid
    assert grid.with_steps(grid.preset("quick", "bijection_replacement", "transformer"), 1)["curriculum"] == []


def test_a_model_whose_outputs_overflow_is_refused_not_scored(tmp_path: Path, capsys) -> None:
    """Finite weights whose outputs overflow (a diverged run caught between checkpoints' checks): eval
    refuses in one line instead of printing NaN metrics."""
    import torch
    from safetensors.torch import load_file, save_file

    cfg = TrainConfig(task="bijection", task_params={"V": 4, "L": 3}, arch="transformer", params=20_000,
                      model={"n_layers": 1, "n_heads": 2}, steps=2, eval_n=8, progress=False)
    run = tmp_path / "run"
    train(cfg, run)
    for f in RunDir(run).checkpoints.glob("step_*/model.safetensors"):
        w = load_file(str(f))  # the output head at the edge of float32: finite, but its sums overflow
        save_file({k: torch.full_like(v, 3e38) if k.startswith("head.") else v for k, v in w.items()}, str(f))
    before = snapshot(run)
    assert "not finite" in user_error(["eval", str(run), "--n", "8"], capsys)
    assert "not finite" in user_error(["analyze", str(run), "--n", "8"], capsys)
    assert snapshot(run) == before


def test_a_misspelt_name_is_answered_with_the_closest_one(tmp_path, capsys) -> None:
    """Unknown task, architecture and model-option names say which known name is closest; a name close to none
    gets no guess."""
    from windtunnel.cli import main

    out = str(tmp_path / "run")
    for argv, want in ((["train", "--task", "bijectoin", "--out", out], "(did you mean 'bijection'?)"),
                       (["train", "--task", "bijection", "--arch", "transfomer", "--out", out],
                        "(did you mean 'transformer'?)"),
                       (["train", "--task", "hmm", "--kk", "3", "--out", out], "(did you mean 'K'?)")):
        assert main(argv) == 2
        assert want in capsys.readouterr().err
    assert main(["train", "--task", "zzzzzz", "--out", out]) == 2
    assert "did you mean" not in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
