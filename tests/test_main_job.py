"""The main job as a library call (:mod:`windtunnel.orchestration.main_job`): what it trains, what it redoes, and
what it refuses — the same decisions ``windtunnel run`` prints."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from windtunnel.errors import UserError
from windtunnel.orchestration.main_job import main_job, plan_main_job, run_main_job


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.mark.slow
def test_the_main_job_runs_once_then_redoes_only_what_is_not_current(tmp_path: Path) -> None:
    out = tmp_path / "main"
    lines: list[str] = []
    first = main_job(steps=4, out=out, eval_n=32, analyse=False, progress=False, say=lines.append)
    assert (first.trained_from, first.trained_to) == (0, 4)
    assert first.redone == ("eval.json", "report.html")
    assert lines == first.lines and lines[0].startswith(f"training transformer ({first.plan.n_params:,} parameters)")
    assert first.metrics["kl"]["value"] >= 0 and first.report == out / "report.html" and first.geometry is None
    assert first.plan.config.steps == 4 and first.plan.experiment == "main"
    # the run folder's evaluation read back as the object evaluate returns
    assert first.run.evaluation().metrics["kl"]["value"] == first.metrics["kl"]["value"]
    assert first.run.evaluation().n == 32

    plan = plan_main_job(steps=4, out=out, eval_n=32, progress=False)
    again = run_main_job(plan, analyse=False)
    assert (again.trained_from, again.trained_to, again.redone) == (4, 4, ())
    assert again.lines == [f"{out} already finished (step 4 of 4) and evaluated: nothing to do"]
    assert again.metrics == first.metrics  # read back, not evaluated again

    (out / "report.html").unlink()
    redone = run_main_job(plan, analyse=False)
    assert redone.redone == ("report.html",) and redone.report.is_file()
    assert "redoing only what is not current: report.html" in redone.lines[0]

    # a larger evaluation than the one on disk is not current: it is evaluated again at the plan's size
    bigger = run_main_job(plan_main_job(steps=4, out=out, eval_n=64, progress=False), analyse=False)
    assert bigger.redone == ("eval.json", "report.html") and bigger.trained_from == 4  # the report reads it


@pytest.mark.slow
def test_a_folder_of_another_configuration_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "main"
    main_job(steps=2, out=out, eval_n=16, analyse=False, progress=False, say=lambda line: None)
    before = _hashes(out)
    with pytest.raises(UserError, match="different configuration"):
        run_main_job(plan_main_job(steps=3, out=out, eval_n=16, progress=False), analyse=False)
    assert _hashes(out) == before
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not a windtunnel run folder"):
        run_main_job(plan_main_job(steps=2, out=stray, eval_n=16, progress=False), force=True)
    assert (stray / "notes.txt").read_text() == "mine"
    replaced = run_main_job(plan_main_job(steps=3, out=out, eval_n=16, progress=False), force=True, analyse=False)
    assert (replaced.trained_from, replaced.trained_to) == (0, 3)


@pytest.mark.slow
def test_the_model_is_built_once_and_is_the_model_a_plain_training_run_trains(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan builds the task and model to check the config and count parameters; training takes that model over
    (no second build), and what it trains is bit for bit what ``train`` trains from the same config alone."""
    import torch

    from windtunnel.run.runs import load
    from windtunnel.training import loop

    built = []
    real_build = loop.build
    monkeypatch.setattr(loop, "build", lambda cfg: built.append(cfg) or real_build(cfg))
    monkeypatch.setattr("windtunnel.orchestration.main_job.build", loop.build)
    plan = plan_main_job(steps=3, out=tmp_path / "job", eval_n=16, progress=False)
    result = run_main_job(plan, analyse=False)
    assert len(built) == 1 and plan.take_built() is None  # handed over once; a second run of the plan builds anew
    assert result.trained_to == 3 and plan.n_params == sum(p.numel() for p in plan.built[1].parameters())
    loop.train(plan.config, tmp_path / "alone")
    assert len(built) == 2
    _, by_job = load(tmp_path / "job")
    _, alone = load(tmp_path / "alone")
    for (name, a), (_, b) in zip(by_job.state_dict().items(), alone.state_dict().items()):
        assert torch.equal(a, b), name
