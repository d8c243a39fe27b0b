"""Every command that takes a run folder is sound on a run whose training diverged (issue 64, item 6): it does its
job on the last finite checkpoint and says so in one line, or it refuses in one line on stderr with exit status 2
and leaves every file of the folder as it was, byte for byte — never a traceback.  The runs are real: trained by
the package, diverged the way training diverges (the loss turning NaN, :func:`contracts.poison_loss_after`), and
their weights blown up or made non-finite through the package's own checkpoint reader and writer."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from windtunnel.cli import main
from windtunnel.geometry.run import DIAGNOSTICS
from windtunnel.run import checkpoint as ckpt
from windtunnel.run.runs import RunDir
from windtunnel.training.loop import TrainConfig, build, param_groups

from contracts import diverged_training, poison_loss_after

TINY = TrainConfig(task="bijection", task_params={"V": 4, "L": 3}, arch="transformer", params=5_000,
                   model={"n_layers": 1, "n_heads": 2}, steps=8, log_every=1, eval_every=3, ckpt_every=3, eval_n=8,
                   progress=False)
"""A one-layer transformer on a small bijection (it has attention heads, so every diagnostic applies), logging
every step (so a resume writes its training log before a divergence stops it)."""

RUN_COMMAND = ["run", "bijection", "--V", "4", "--L", "3", "--steps", "8", "--params", "5000", "--n", "8",
               "--no-progress", "--no-analyze"]
"""``windtunnel run`` on a tiny main job (``--out`` added)."""


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (the lock aside) by the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != RunDir.LOCK}


def command(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, list[str]]:
    """Run the CLI in this process: ``(exit status, stdout, the non-empty lines of stderr)``; never a traceback."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, (argv, err[-3000:])
    return code, out, [line for line in err.splitlines() if line.strip()]


def refused(argv: list[str], run: Path, capsys: pytest.CaptureFixture) -> str:
    """Run the CLI on ``run``: it must exit 2 with one ``windtunnel: error:`` line on stderr and leave every file of
    the folder as it was; returns that line."""
    before = snapshot(run)
    code, _, err = command(argv, capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("windtunnel: error:"), (argv, code, err)
    assert snapshot(run) == before
    return err[0]


def rewrite_weights(run: Path, step: int, change: Callable[[torch.nn.Module], None]) -> None:
    """Checkpoint ``step`` of ``run`` with ``change`` applied to its model, read and written back through the
    package's own checkpoint reader and writer (its optimizer state and training state kept); ``latest`` is left
    naming the checkpoint it named."""
    rd = RunDir(run)
    cfg = TrainConfig.from_dict(rd.read_config()["train"])
    _, model = build(cfg)
    path = rd.checkpoint_at(step)
    assert path is not None
    optimizer = torch.optim.AdamW(param_groups(model, cfg), lr=cfg.lr) if ckpt.has_optimizer(path) else None
    state = ckpt.load(path, model, optimizer)
    with torch.no_grad():
        change(model)
    latest = (rd.checkpoints / ckpt.LATEST).read_text()
    ckpt.save(rd.checkpoints, step, model, optimizer,
              {k: v for k, v in state.items() if k not in ("step", "rng", "optimizer")})
    (rd.checkpoints / ckpt.LATEST).write_text(latest)


def blow_up_readout(model: torch.nn.Module) -> None:
    """The readout grown to ~1e30, still finite: where a diverging run's weights are the step before they overflow
    (its outputs saturate, and every gradient through them is 0 or NaN)."""
    for name, p in model.named_parameters():
        if name.startswith("head."):
            p.mul_(1e30)


def make_non_finite(model: torch.nn.Module) -> None:
    """Every weight NaN: what a checkpoint written after the weights overflowed would hold."""
    for p in model.parameters():
        p.fill_(float("nan"))


@pytest.fixture(scope="module")
def diverged_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run whose loss turned NaN at step 4 of 8: training stopped, kept its step-3 checkpoint (and the
    log-spaced ones before it) and recorded ``diverged.json``."""
    return diverged_training(TINY, tmp_path_factory.mktemp("diverged") / "run")


@pytest.fixture(scope="module")
def analysed_run(diverged_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The diverged run analysed at its last good checkpoint (``geometry.json``: every diagnostic's result)."""
    run = tmp_path_factory.mktemp("analysed") / "run"
    shutil.copytree(diverged_run, run)
    assert main(["analyze", str(run), "--n", "8"]) == 0
    return run


@pytest.fixture(scope="module")
def diverged_main_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder ``windtunnel run`` made on a tiny main job whose loss turned NaN at step 4."""
    run = tmp_path_factory.mktemp("main_job") / "run"
    with pytest.MonkeyPatch.context() as mp:
        poison_loss_after(mp, 4)
        assert main(RUN_COMMAND + ["--out", str(run)]) == 2
    assert RunDir(run).divergence() is not None
    return run


@pytest.mark.slow
def test_analyze_of_a_blown_up_run_draws_every_figure_and_says_it_diverged(diverged_run: Path, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    """The last good checkpoint's readout blown up (finite): the routing law's gradients are 0 or NaN on every head,
    and its log-scaled figure is drawn with them left out instead of raising; analyze exits 0 and says in one line
    that it analysed the last good checkpoint of a diverged run."""
    run = tmp_path / "run"
    shutil.copytree(diverged_run, run)
    rewrite_weights(run, 3, blow_up_readout)
    code, _, err = command(["analyze", str(run), "--n", "8"], capsys)
    assert code == 0 and len(err) == 1, err
    assert "diverged" in err[0] and "analysed its last good checkpoint, step 3 of 8" in err[0]
    geometry = json.loads((run / RunDir.GEOMETRY).read_text())
    assert not [k for k, v in geometry.items() if isinstance(v, dict) and "error" in v]
    assert (run / "figures" / "geometry_routing_law.png").is_file()


@pytest.mark.slow
def test_analyze_passes_over_a_checkpoint_whose_weights_are_not_finite(diverged_run: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """A checkpoint between the first and the last holding NaN weights: the diagnostics over training read the others
    and name its step, where they failed with a traceback; analyze exits 0 and says in one line what it read."""
    run = tmp_path / "run"
    shutil.copytree(diverged_run, run)
    rewrite_weights(run, 2, make_non_finite)
    code, _, err = command(["analyze", str(run), "--n", "8"], capsys)
    assert code == 0 and len(err) == 1 and "diverged" in err[0], err
    geometry = json.loads((run / RunDir.GEOMETRY).read_text())
    for name in ("frame_precision", "reference_predictors"):
        assert geometry[name]["skipped_non_finite_steps"] == [2], geometry[name]
        assert 2 not in geometry[name]["steps"] and geometry[name]["steps"][-1] == 3


@pytest.mark.parametrize("flags", [[], ["--steps", "12"]], ids=["as-recorded", "steps-extended"])
def test_a_resume_that_diverges_again_changes_nothing(flags: list[str], diverged_run: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    """Resumed from its last good checkpoint, the run diverges again before a new one: nothing was gained, so the
    resume is a refusal — one line, exit 2, and the training log, configuration and divergence record it rewrote on
    the way are as they were."""
    run = tmp_path / "run"
    shutil.copytree(diverged_run, run)
    with pytest.MonkeyPatch.context() as mp:
        poison_loss_after(mp, 1)  # one good step (logged), then NaN again
        line = refused(["train", "--resume", str(run), "--no-progress"] + flags, run, capsys)
    assert "diverged again from its last good checkpoint, step 3" in line and "nothing was changed" in line


def test_a_resume_from_non_finite_weights_is_refused_in_one_line(diverged_run: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """The newest checkpoint's weights non-finite: the resume refuses with the checkpoint's one line (the note that
    the run diverged goes to standard output, not before the refusal on standard error) and changes nothing."""
    run = tmp_path / "run"
    shutil.copytree(diverged_run, run)
    rewrite_weights(run, 3, make_non_finite)
    assert "non-finite weights" in refused(["train", "--resume", str(run), "--no-progress"], run, capsys)


def test_run_on_its_diverged_folder_that_diverges_again_changes_nothing(diverged_main_job: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """``windtunnel run`` again on the folder it left diverged resumes it; diverging again before a new checkpoint
    (at once, this time), it refuses in one line and leaves the folder, divergence record included, as it was."""
    run = tmp_path / "run"
    shutil.copytree(diverged_main_job, run)
    with pytest.MonkeyPatch.context() as mp:
        poison_loss_after(mp, 0)
        line = refused(RUN_COMMAND + ["--out", str(run)], run, capsys)
    assert "diverged again" in line


def poison_member_after(monkeypatch: pytest.MonkeyPatch, member: int, good_steps: int, members: int = 2) -> None:
    """In a stack of ``members`` runs, member ``member``'s training loss turns NaN after ``good_steps`` steps (the
    stacked step computes each member's loss in member order); the others stay finite."""
    from windtunnel.training import step

    real, calls = step.loss_fn, {"n": 0}

    def poisoned(logits, ep, soft, n_scored=None):
        k = calls["n"]
        calls["n"] += 1
        loss = real(logits, ep, soft, n_scored)
        return loss * float("nan") if k % members == member and k // members >= good_steps else loss

    monkeypatch.setattr(step, "loss_fn", poisoned)


@pytest.fixture(scope="module")
def diverged_stack(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """``windtunnel train --seeds 0,1`` whose seed-1 member's loss turned NaN at step 4: the folder holding both
    runs (``run-s0`` merely stopped with it, ``run-s1`` diverged) and the command that made them."""
    parent = tmp_path_factory.mktemp("stack")
    config = parent.parent / f"{parent.name}.json"
    config.write_text(json.dumps({k: v for k, v in TINY.to_dict().items() if k != "seed"}))
    argv = ["train", "--config", str(config), "--seeds", "0,1", "--stack", "on", "--out", str(parent / "run"), "--no-progress"]
    with pytest.MonkeyPatch.context() as mp:
        poison_member_after(mp, 1, 4)
        assert main(argv) == 2
    assert RunDir(parent / "run-s1").divergence() is not None and RunDir(parent / "run-s0").divergence() is None
    return parent, argv


def test_a_stack_resumed_that_diverges_again_changes_nothing(diverged_stack: tuple[Path, list[str]], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    """The same ``train --seeds`` again resumes the stack; its diverged member diverging again before a new
    checkpoint, the command refuses in one line and leaves both members' folders as they were."""
    made, argv = diverged_stack
    parent = tmp_path / "stack"
    shutil.copytree(made, parent)
    argv = [str(parent / "run") if a == str(made / "run") else a for a in argv]
    before = {name: snapshot(parent / name) for name in ("run-s0", "run-s1")}
    with pytest.MonkeyPatch.context() as mp:
        poison_member_after(mp, 1, 1)
        code, _, err = command(argv, capsys)
    assert code == 2 and {name: snapshot(parent / name) for name in before} == before
    assert len(err) == 1 and err[0].startswith("windtunnel: error:") and "nothing was changed" in err[0], err


NON_FINITE_OR_NOT_POSITIVE = {"NaN": math.nan, "inf": math.inf, "zero": 0.0, "negative": -1.0}
"""What every float of a diagnostic's result is replaced by before its figure is drawn."""


def every_float(value: Any, by: float) -> Any:
    """``value`` with every float in it (not the integers: steps, layers, counts) replaced by ``by``."""
    if isinstance(value, float):
        return by
    if isinstance(value, dict):
        return {k: every_float(v, by) for k, v in value.items()}
    if isinstance(value, list):
        return [every_float(v, by) for v in value]
    return value


@pytest.mark.slow
def test_every_figure_draws_values_that_are_not_finite_or_not_positive(analysed_run: Path, tmp_path: Path) -> None:
    """Each registered diagnostic's figure, drawn from its result on the diverged run with every number NaN,
    infinite, zero or negative (what a diverged model's diagnostics can return): none raises, and each writes its
    PNG — a log-scaled axis of nothing it can show stays linear and says so."""
    geometry = json.loads((analysed_run / RunDir.GEOMETRY).read_text())
    failures = []
    drawn = 0
    for name, diag in DIAGNOSTICS.items():
        result = geometry.get(name)
        if diag.figure is None or not isinstance(result, dict) or not result.get("applicable", True):
            continue
        for label, by in NON_FINITE_OR_NOT_POSITIVE.items():
            path = tmp_path / f"{name}-{label}.png"
            try:
                diag.figure(every_float(result, by), path)
            except Exception as exc:  # noqa: BLE001 - every failure is listed, not only the first
                failures.append(f"{name} with {label} values: {type(exc).__name__}: {exc}")
                continue
            assert path.is_file(), path
            drawn += 1
    assert not failures, "\n".join(failures)
    assert drawn >= 4 * 8  # the diagnostics a one-layer transformer's run has
