"""The training loop: learning, exact resume, crash safety, and bad configs."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from windtunnel.run import checkpoint as ckpt
from windtunnel import models, tasks
from windtunnel.training import optim
from windtunnel.cli import main as cli_main
from windtunnel.run.runs import RunDir
from windtunnel.run.runs import load
from windtunnel.training.loop import ConfigError, TrainConfig, TrainingDiverged, train

from contracts import poison_loss_after


def tiny(**kw) -> TrainConfig:
    base = dict(task="bijection", task_params={"V": 5, "L": 5}, arch="transformer", params=20_000,
                model={"n_layers": 2, "n_heads": 2}, steps=20, batch_size=16, lr=3e-3, warmup=5,
                eval_every=10, eval_n=64, ckpt_every=10, progress=False)
    base.update(kw)
    return TrainConfig(**base)


def weights(run: Path) -> dict[str, torch.Tensor]:
    _, model = load(run)
    return {k: v.clone() for k, v in model.state_dict().items()}


def sees_its_context(model: torch.nn.Module, task: tasks.Task) -> bool:
    """Whether ``model``'s answer at a later position moves when the first token changes: false for a model with
    no mixing across positions (``mlp_pointwise``), whose best is the context-blind optimum."""
    tokens = task.sample(4, 0).tokens
    moved = tokens.clone()
    moved[:, 0] = (moved[:, 0] + 1) % task.vocab_size
    with torch.no_grad():
        return not torch.allclose(model(tokens)[:, 1:], model(moved)[:, 1:])


@pytest.mark.parametrize("arch", models.names())
@pytest.mark.slow
def test_every_architecture_learns_bijection(tmp_path: Path, arch: str) -> None:
    """After 300 steps the KL to the best the architecture can reach is under 10% of the untrained KL: the best is
    the exact posterior (KL 0) for a model that sees its context, the context-blind optimum for one that does not
    (``mlp_pointwise``).  Each registered architecture has its tiny instance's layers and heads, its own widths
    sized to 20k parameters.

    Measured (V=5, L=5, 20k parameters, batch 32, 300 steps): untrained ≈0.95 bits for every
    architecture; trained 0.038 (transformer, 3 heads), 0.021 (mamba), 0.019 (lstm), 0.020 (mlp, whose
    window covers the whole 9-token prefix) — ratios 0.02-0.04, so the bar 0.1 leaves a 2.5× margin;
    mlp_pointwise 0.941 against its optimum's 0.940.
    """
    from windtunnel.evaluation.metrics import compute
    from windtunnel.models import catalog

    steps, bar = 300, 0.1
    depth = {k: v for k, v in catalog.get(arch).tiny.items() if k in ("n_layers", "n_heads")}
    cfg = tiny(arch=arch, steps=steps, batch_size=32, eval_every=steps, ckpt_every=steps, model=depth)
    train(cfg, tmp_path / arch)
    task, model = load(tmp_path / arch)
    ep = task.sample(512, 999)
    untrained = models.build(json.loads((tmp_path / arch / "config.json").read_text())["model"]).eval()
    with torch.no_grad():
        kl_after = compute(model(**ep.inputs), ep)["values"]["kl"]
        kl_before = compute(untrained(**ep.inputs), ep)["values"]["kl"]
        sees = sees_its_context(untrained, task)
        best = 0.0 if sees else compute(tasks.context_blind(task)(**ep.inputs), ep)["values"]["kl"]
    print(f"{arch}: KL {kl_before:.3f} -> {kl_after:.3f} bits, best reachable {best:.3f} "
          f"(ratio {(kl_after - best) / kl_before:.3f})")
    assert kl_after - best < bar * kl_before, (arch, kl_after, kl_before, best)


def test_resume_is_bitwise_exact(tmp_path: Path) -> None:
    train(tiny(steps=20), tmp_path / "straight")
    train(tiny(steps=20), tmp_path / "split", until=7)  # interrupted off the checkpoint grid
    train(tiny(steps=20), tmp_path / "split", resume=True)
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "split")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_a_fixed_training_set_is_the_only_data_and_resumes_exactly(tmp_path: Path) -> None:
    """``train_set=N``: every step's episodes are rows of one set of N episodes, the same set after a
    resume and in a fresh process's cache; the default draws fresh episodes that are not in it."""
    from windtunnel.training import streams
    from windtunnel import tasks

    cfg = tiny(train_set=12, batch_size=8)
    task = tasks.make(cfg.task, **cfg.task_params)
    data = streams.training_set(cfg, task)
    rows = {tuple(t.tolist()) for t in data.tokens}
    assert len(data) == 12
    seen = set()
    for step in range(6):
        batch = streams.step_batch(cfg, task, step, shards=1)
        got = {tuple(t.tolist()) for t in batch.tokens}
        assert got <= rows and len(batch) == 8
        assert torch.equal(batch.posterior, data.posterior[[list(map(tuple, data.tokens.tolist())).index(tuple(t))
                                                              for t in batch.tokens.tolist()]])
        seen |= got
    assert len(seen) > 8  # the steps draw different rows
    streams.TRAINING_SETS.clear()  # a new process samples the same set again
    assert torch.equal(streams.training_set(cfg, task).tokens, data.tokens)
    fresh = streams.step_batch(tiny(batch_size=8), task, 0, shards=1)
    assert not {tuple(t.tolist()) for t in fresh.tokens} <= rows
    train(cfg, tmp_path / "straight")
    train(cfg, tmp_path / "split", until=7)
    streams.TRAINING_SETS.clear()
    train(cfg, tmp_path / "split", resume=True)
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "split")
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="train_set"):
        tiny(train_set=0)
    with pytest.raises(ValueError, match="train_set"):
        tiny(train_set=4, curriculum=[{"until": 5, "task_params": {"V": 4}}])


KILL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import torch
    torch.set_num_threads(__THREADS__)  # same float reductions as the parent's uninterrupted run
    from windtunnel import io
    from windtunnel.run import checkpoint, runs
    from windtunnel.training.loop import TrainConfig, train
    where = sys.argv[2]

    def die(path, data):  # half the bytes on disk, then the process is gone
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)

    real_save, real_atomic, real_bytes, real_rmtree = (checkpoint.save_file, io.write_bytes_atomic,
                                                       checkpoint.write_bytes_synced, checkpoint.shutil.rmtree)
    def save_file(tensors, path):
        if "step_00000020" in path and path.endswith(where + ".safetensors"):
            die(path, b"x" * 64)
        return real_save(tensors, path)
    def write_bytes(path, data):
        if where == "state" and "step_00000020" in str(path):
            die(path, data)
        return real_bytes(path, data)
    def write_bytes_atomic(path, data):
        path = Path(path)
        if (where == "latest" and path.name == "latest" and b"00000020" in data) or (
                where == "log-rewrite" and path.name == "metrics.jsonl"):
            die(path.with_name("." + path.name + ".tmp"), data)
        return real_atomic(path, data)
    def rmtree(path, *a, **k):
        if where == "prune" and Path(path).name == "step_00000010":
            (Path(path) / "model.safetensors").unlink()
            os.kill(os.getpid(), signal.SIGKILL)
        return real_rmtree(path, *a, **k)
    real_append = runs.RunDir.append_metrics
    def append_metrics(self, record):
        if where == "log" and record.get("step", 0) >= 15:
            with open(self.metrics_path, "a") as f:
                f.write('{"step": 15, "lo')
            os.kill(os.getpid(), signal.SIGKILL)
        return real_append(self, record)
    checkpoint.save_file, checkpoint.write_bytes_synced, io.write_bytes_atomic = save_file, write_bytes, write_bytes_atomic
    checkpoint.shutil.rmtree, runs.RunDir.append_metrics = rmtree, append_metrics
    train(TrainConfig(**__CFG__), sys.argv[1], resume=where == "log-rewrite")
    """
)
WRITES = ["model", "optimizer", "state", "latest", "prune", "log", "log-rewrite"]
"""Every write of a run folder during training: checkpoint weights, optimizer state and state.json,
the ``latest`` pointer, pruning an old checkpoint, a line of the training log, and the resume's rewrite
of that log."""


@pytest.mark.parametrize("where", WRITES)
@pytest.mark.slow
def test_sigkill_inside_every_write_resumes_exactly(where: str, tmp_path: Path) -> None:
    """SIGKILL in the middle of each write (half its bytes on disk): the resume continues from the newest
    whole checkpoint and ends bitwise where an uninterrupted run ends, with a log of each step once."""
    cfg = tiny(steps=30, log_checkpoints=False, keep_last=1, log_every=5)
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT.replace("__CFG__", repr(cfg.to_dict())).replace("__THREADS__", str(torch.get_num_threads())))
    run = tmp_path / "run"
    if where == "log-rewrite":  # a run killed at step 15 first, then killed again inside its resume's log rewrite
        assert subprocess.run([sys.executable, str(script), str(run), "log"], capture_output=True).returncode == -signal.SIGKILL
    proc = subprocess.run([sys.executable, str(script), str(run), where], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-500:]
    latest = ckpt.find_latest(run / "checkpoints")
    assert latest is not None and ckpt.step_of(latest) in (10, 20)
    train(cfg, run, resume=True)
    train(cfg, tmp_path / "straight")
    a, b = weights(run), weights(tmp_path / "straight")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [line["step"] for line in lines if "loss" in line]
    assert steps == sorted(set(steps)) and steps[-1] == 30


@pytest.mark.parametrize("every,log_checkpoints", [(10, True), (6, False)])
@pytest.mark.slow
def test_timed_checkpoints_bound_what_a_kill_loses_and_leave_no_trace(every: int, log_checkpoints: bool,
                                                                        tmp_path: Path) -> None:
    """``ckpt_minutes``: a run killed between scheduled checkpoints resumes from the last timed one (here
    every step is due one), not from the schedule's; the timed ones never take the ``keep_last`` places of
    the scheduled ones; once finished the run keeps exactly the checkpoints (each whole or weights-only alike)
    and ends with exactly the weights of a run that never took a timed one."""
    cfg = tiny(steps=30, ckpt_every=every, keep_last=2, log_every=5, log_checkpoints=log_checkpoints, ckpt_minutes=1e-9)
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT.replace("__CFG__", repr(cfg.to_dict())).replace("__THREADS__", str(torch.get_num_threads())))
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(script), str(run), "log"], capture_output=True)  # killed logging step 15
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-500:]

    def kept(r: Path) -> list[tuple[int, bool]]:
        return [(ckpt.step_of(p), ckpt.has_optimizer(p)) for p in ckpt.list_checkpoints(r / "checkpoints")]

    assert ckpt.step_of(ckpt.find_latest(run / "checkpoints")) == 14  # the schedule alone would resume from 10 or 12
    scheduled = [(s, whole) for s, whole in kept(run) if s != 14]
    on = [s for s in range(1, 15) if s % every == 0 or (log_checkpoints and s in optim.log_spaced_steps(30))]
    assert 14 not in on and [s for s, _ in scheduled][-2:] == on[-2:]
    assert all(whole for _, whole in scheduled[-2:])  # the keep_last newest scheduled ones still whole
    train(cfg, run, resume=True)
    straight = tmp_path / "straight"
    train(replace(cfg, ckpt_minutes=0.0), straight)
    a, b = weights(run), weights(straight)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert kept(run) == kept(straight)
    assert RunDir(run).holds(replace(cfg, ckpt_minutes=5.0).to_dict())  # not part of what the run is
    assert RunDir(run).holds(replace(cfg, device="cpu").to_dict())  # nor is where it computed
    assert not RunDir(run).holds(replace(cfg, lr=cfg.lr * 2).to_dict())


def test_nan_stops_and_keeps_last_good_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    poison_loss_after(monkeypatch, 15)
    with pytest.raises(TrainingDiverged, match="step 15"):
        train(tiny(steps=20), tmp_path / "run")
    latest = ckpt.find_latest(tmp_path / "run" / "checkpoints")
    assert latest is not None and latest.name == "step_00000010"
    _, model = load(tmp_path / "run")
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_loss_gone_non_finite_mid_interval_is_caught_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loss is watched on the device and read back only at logs, evaluations, checkpoints and stops (no step
    waits on a GPU); a loss that goes non-finite between two of them still stops the run naming its own step, before
    any checkpoint or log line of the poisoned weights.  Timed checkpoints (here one after every step) look too."""
    from windtunnel.training import optim

    reads = {"n": 0}
    real_first_bad = optim.FiniteWatch.first_bad

    def counted(self, *a, **kw):
        reads["n"] += 1
        return real_first_bad(self, *a, **kw)

    monkeypatch.setattr(optim.FiniteWatch, "first_bad", counted)
    train(tiny(steps=100, log_every=25, eval_every=50, ckpt_every=50, log_checkpoints=False), tmp_path / "clean")
    assert reads["n"] == 4  # steps 25, 50, 75, 100: not one read per step
    poison_loss_after(monkeypatch, 12)  # step 12 (counted from 0) is the first poisoned
    with pytest.raises(TrainingDiverged, match="loss became nan at step 12"):
        train(tiny(steps=40, log_every=25, ckpt_every=20, log_checkpoints=False), tmp_path / "run")
    assert RunDir(tmp_path / "run").latest_step() == 0  # the checkpoint due at step 20 was never written
    monkeypatch.undo()
    poison_loss_after(monkeypatch, 12)
    with pytest.raises(TrainingDiverged, match="loss became nan at step 12"):
        train(tiny(steps=40, log_every=25, ckpt_every=20, ckpt_minutes=1e-9), tmp_path / "timed")
    assert RunDir(tmp_path / "timed").latest_step() == 12  # the timed checkpoint after step 12 was never written
    _, model = load(tmp_path / "timed")
    assert all(torch.isfinite(p).all() for p in model.parameters())
    logged = [json.loads(line) for line in (tmp_path / "timed" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["step"] <= 12 for r in logged)


def test_a_stacked_member_whose_loss_goes_non_finite_stops_the_stack_naming_its_seed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from windtunnel.training import stacked, step

    real, calls = step.loss_fn, {"n": 0}

    def poisoned(logits, ep, soft, n_scored=None):  # member 1 (seed 1) from step 7 on; member 0 stays finite
        calls["n"] += 1
        loss = real(logits, ep, soft, n_scored)
        return loss * float("nan") if calls["n"] % 2 == 0 and calls["n"] > 14 else loss

    monkeypatch.setattr(step, "loss_fn", poisoned)
    runs = [tmp_path / "s0", tmp_path / "s1"]
    with pytest.raises(TrainingDiverged, match=r"at step 7 for seed\(s\) \[1\]"):
        stacked.train_stacked([tiny(seed=0), tiny(seed=1)], runs)
    assert [RunDir(r).latest_step() for r in runs] == [5, 5]  # the last checkpoint before step 7 (log-spaced: 5)
    # the member that diverged says so (diverged.json, what eval, runs and the report read); its partner merely stopped
    assert RunDir(runs[1]).divergence()["last_good_step"] == 5 and RunDir(runs[0]).divergence() is None
    for r in runs:
        assert all(torch.isfinite(p).all() for p in load(r)[1].parameters())


def test_a_diverged_run_is_told_from_a_killed_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    """Training that stops on non-finite numbers records it beside the run (``diverged.json``); eval, runs and the
    report say "diverged" and which checkpoint they read, where a killed run is merely unfinished; a run trained on
    past it is no longer diverged."""
    from windtunnel import RunDir

    killed = tmp_path / "killed"
    train(tiny(steps=20), killed, until=10)  # stopped at step 10 on purpose: unfinished, not diverged
    assert RunDir(killed).divergence() is None
    poison_loss_after(monkeypatch, 15)
    run = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match="step 15"):
        train(tiny(steps=20), run)
    monkeypatch.undo()
    record = RunDir(run).divergence()
    assert record is not None and record["last_good_step"] == 10 and "step 15" in record["message"]
    capsys.readouterr()
    assert cli_main(["eval", str(run), "--n", "16"]) == 0
    assert f"note: {run} diverged (loss became nan at step 15): evaluated its last good checkpoint, step 10 of 20" in (
        capsys.readouterr().err)
    assert cli_main(["eval", str(killed), "--n", "16"]) == 0
    assert "(unfinished)" in capsys.readouterr().err
    assert cli_main(["runs", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "step 10 of 20 (diverged)" in listed and "step 10 of 20 (unfinished)" in listed
    assert cli_main(["report", str(run)]) == 0
    summary = (run / "summary.md").read_text()
    assert "**Diverged:** loss became nan at step 15" in summary and "(step 10), not of its recipe" in summary
    assert "**Unfinished:**" not in summary
    train(tiny(steps=20), run, resume=True)  # trained on past it (the loss no longer poisoned)
    assert RunDir(run).divergence() is None


def test_bad_config_key_or_value_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('task = "bijection"\nlearning_rate = 0.1\n')
    assert cli_main(["train", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "learning_rate" in err and len(err.strip().splitlines()) == 1
    bad.write_text('task = "bijection"\nbatch_size = -4\n')
    assert cli_main(["train", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "batch_size" in capsys.readouterr().err
    bad.write_text('task = "bijection"\nckpt_minutes = -1.0\n')
    assert cli_main(["train", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "ckpt_minutes" in capsys.readouterr().err
    assert cli_main(["train", "--task", "bijection", "--V", "1", "--out", str(tmp_path / "o")]) == 2
    assert "V" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_existing_run_is_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    train(tiny(steps=10), run)
    before = (run / "config.json").read_text()
    assert cli_main(["train", "--task", "bijection", "--steps", "5", "--out", str(run), "--no-progress"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (run / "config.json").read_text() == before
    assert cli_main(["eval", str(tmp_path / "nowhere")]) == 2
    (run / "checkpoints" / "latest").write_text("step_99999999\n")
    for p in ckpt.list_checkpoints(run / "checkpoints"):
        (p / "model.safetensors").write_bytes(b"corrupt")
    assert cli_main(["eval", str(run), "--n", "8"]) == 2
    assert "checkpoint" in capsys.readouterr().err


def test_config_rejects_unknown_key() -> None:
    with pytest.raises(ConfigError, match="nonsense"):
        TrainConfig.from_dict({"nonsense": 1})
    with pytest.raises(ConfigError, match="loss"):
        TrainConfig(loss="mse")


def test_modules_and_functions_do_not_shadow_each_other() -> None:
    """``windtunnel.train`` / ``windtunnel.evaluate`` are the functions; the modules are nouns."""
    import importlib

    import windtunnel as wt

    assert callable(wt.train) and callable(wt.evaluate)
    assert importlib.import_module("windtunnel.training.loop").train is wt.train
    assert importlib.import_module("windtunnel.evaluation.evaluate").evaluate is wt.evaluate
    for sub, module in {"geometry": "geometry", "models": "models", "tasks": "tasks", "report": "report",
                        "runs": "run.runs", "stages": "orchestration.stages", "table": "orchestration.table",
                        "metrics": "evaluation.metrics"}.items():
        assert getattr(wt, sub).__name__ == f"windtunnel.{module}"
    with pytest.raises(ImportError):
        importlib.import_module("windtunnel.train")


def test_readout_lr_mult_scales_only_the_readouts_steps(tmp_path: Path) -> None:
    """With ``readout_lr_mult = m``, AdamW's first step moves the final norm and the head exactly
    ``m`` times as far as with 1 (Adam's first update is ``lr · g/(|g| + ε)``, linear in lr), and
    every other parameter exactly as far (same init, same batch)."""
    m = 5.0
    base = dict(steps=1, warmup=0, eval_every=1, ckpt_every=1)
    train(tiny(**base), tmp_path / "one")
    train(tiny(readout_lr_mult=m, **base), tmp_path / "five")
    _, init = load(tmp_path / "one", step=0)
    start = {k: v.clone() for k, v in init.state_dict().items()}
    a, b = weights(tmp_path / "one"), weights(tmp_path / "five")
    readout = {"norm.weight", "head.weight"}
    assert readout == {n for n, p in init.named_parameters() if any(p is q for q in init.readout_parameters())}
    for k in a:
        step_a, step_b = a[k] - start[k], b[k] - start[k]
        assert step_a.abs().max() > 0, k
        if k in readout:
            torch.testing.assert_close(step_b, m * step_a, rtol=1e-4, atol=1e-7)
        else:
            assert torch.equal(step_a, step_b), k


def test_readout_lr_mult_resumes_exactly_and_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = tiny(steps=20, readout_lr_mult=4.0)
    train(cfg, tmp_path / "straight")
    train(cfg, tmp_path / "split", until=7)
    train(cfg, tmp_path / "split", resume=True)
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "split")
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert not torch.equal(a["head.weight"], weights_of(tiny(steps=20), tmp_path / "plain")["head.weight"])
    # optimizer state saved under other parameter groups is refused as such, not as a traceback
    train(tiny(steps=20, readout_lr_mult=4.0), tmp_path / "other", until=10)
    with pytest.raises(ckpt.CheckpointError, match="another configuration"):
        train(tiny(steps=20), tmp_path / "other", resume=True)
    with pytest.raises(ConfigError, match="readout_lr_mult"):
        TrainConfig(readout_lr_mult=0)
    bad = tmp_path / "bad.toml"
    bad.write_text('task = "bijection"\nreadout_lr_mult = -1\n')
    assert cli_main(["train", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "readout_lr_mult" in capsys.readouterr().err


def weights_of(cfg: TrainConfig, run: Path) -> dict[str, torch.Tensor]:
    train(cfg, run)
    return weights(run)


def test_train_command_records_its_training_time(tmp_path: Path) -> None:
    """``windtunnel train`` goes through the stages: the run folder gets ``timings.json`` with the
    loop's own wall time, and a resume adds to the same record."""
    from windtunnel.run.runs import RunDir

    out = tmp_path / "r"
    assert cli_main(["train", "--task", "bijection", "--V", "4", "--L", "4", "--params", "5000", "--steps", "3",
                     "--out", str(out), "--no-progress"]) == 0
    run = RunDir(out)
    first = run.timings()["train_s"]
    assert first > 0 and first == pytest.approx(run.training_seconds())
    assert cli_main(["train", "--resume", str(out), "--steps", "5", "--no-progress"]) == 0
    assert run.latest_step() == 5 and run.timings()["train_s"] >= first


def test_dynamics_checkpoints_keep_weights_without_optimizer_state(tmp_path: Path) -> None:
    """The log-spaced checkpoints kept for the training-dynamics curves hold weights alone; the newest
    ``keep_last`` scheduled ones (and step 0, whose optimizer state is empty) stay whole, and so does the one
    where ``until`` stopped (off the schedule, it takes none of their places), so a resume is still exact."""
    cfg = tiny(steps=40, ckpt_every=20, keep_last=1)
    train(cfg, tmp_path / "run", until=30)
    kept = ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")
    newest = kept[-1]
    assert ckpt.step_of(newest) == 30 and (newest / "optimizer.safetensors").is_file()
    assert ckpt.has_optimizer(tmp_path / "run" / "checkpoints" / "step_00000020")  # the keep_last = 1 scheduled one
    dynamics = [p for p in kept if ckpt.step_of(p) not in (0, 20, 30)]
    assert dynamics and all(not (p / "optimizer.safetensors").exists() and not ckpt.has_optimizer(p) for p in dynamics)
    assert all(ckpt.complete(p) for p in kept)  # every one still loads for the dynamics diagnostics
    train(cfg, tmp_path / "run", resume=True)
    train(cfg, tmp_path / "straight")
    a, b = weights(tmp_path / "run"), weights(tmp_path / "straight")
    assert all(torch.equal(a[k], b[k]) for k in a)


ARTIFACT_KILL = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from windtunnel import io
    from windtunnel.orchestration.stages import evaluate_run
    real = io.write_bytes_atomic
    def dying(path, data):
        path = Path(path)
        if path.name == "eval.json":  # half the new record in the temporary file, then the process is gone
            with open(path.with_name("." + path.name + ".tmp"), "wb") as f:
                f.write(data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, data)
    io.write_bytes_atomic = dying
    evaluate_run(sys.argv[1], n=32, force=True)
    """
)


@pytest.mark.slow
def test_sigkill_inside_an_artifact_write_keeps_the_old_one_and_a_rerun_writes_it(tmp_path: Path) -> None:
    from windtunnel.run.runs import RunDir
    from windtunnel.orchestration.stages import evaluate_run

    run = tmp_path / "run"
    train(tiny(steps=10), run)
    evaluate_run(run, n=16)
    before = (run / "eval.json").read_bytes()
    script = tmp_path / "kill.py"
    script.write_text(ARTIFACT_KILL)
    assert subprocess.run([sys.executable, str(script), str(run)], capture_output=True).returncode == -signal.SIGKILL
    assert (run / "eval.json").read_bytes() == before  # the reader never sees half a record
    evaluate_run(run, n=32)
    assert RunDir(run).read_eval()["n"] == 32


def test_no_progress_prints_one_line_per_evaluation_interval(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Without a bar (``--no-progress``, or a log file): a plain line per evaluation interval, no carriage returns."""
    assert cli_main(["train", "--task", "bijection", "--V", "4", "--L", "3", "--arch", "lstm", "--steps", "12",
                     "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    assert cli_main(["train", "--resume", str(tmp_path / "r"), "--steps", "24", "--no-progress"]) == 0
    out = capsys.readouterr()
    lines = [line for line in out.out.splitlines() if "lstm/bijection step" in line]
    assert [line.split("step ")[1].split(":")[0] for line in lines] == ["12/12", "24/24"]
    assert "\r" not in out.out + out.err


def test_checkpoint_files_get_the_mode_every_other_file_gets(tmp_path: Path) -> None:
    """safetensors creates its files readable by the owner alone; a run folder shared on a cluster must
    be readable as any file the user writes (the umask decides)."""
    old = os.umask(0o022)
    try:
        train(tiny(steps=2), tmp_path / "run")
    finally:
        os.umask(old)
    files = [f for f in (tmp_path / "run" / "checkpoints").rglob("*") if f.is_file() and f.name != ckpt.LATEST]
    assert files and all(f.stat().st_mode & 0o777 == 0o644 for f in files), {f.name: oct(f.stat().st_mode) for f in files}


@pytest.mark.parametrize("stack", [False, True])
def test_a_hard_target_step_computes_the_posterior_only_where_a_log_reads_it(tmp_path: Path, monkeypatch, stack: bool) -> None:
    """Trained against sampled targets, a run computes the exact posterior of its batch only at a log step (for the
    Bayes gap) and of its held-out batch once — not at each of its steps; its logged gaps are those of the posterior
    read then (finite, non-negative)."""
    from windtunnel.tasks.bijection import Bijection
    from windtunnel.training.stacked import train_stacked

    calls = []
    original = Bijection.posterior
    monkeypatch.setattr(Bijection, "posterior", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    cfg = tiny(steps=40, log_every=10, eval_every=20, ckpt_every=40)
    if stack:
        train_stacked([cfg, replace(cfg, seed=1)], [tmp_path / "a", tmp_path / "b"])
    else:
        train(cfg, tmp_path / "a")
    members = 2 if stack else 1
    assert len(calls) == members * (40 // 10 + 1)  # four logged batches and one held-out batch per member
    gaps = [r["bayes_gap"] for r in map(json.loads, (tmp_path / "a" / "metrics.jsonl").read_text().splitlines())
            if "bayes_gap" in r]
    assert len(gaps) == 4 and all(0 <= g < 10 for g in gaps)


def test_a_model_the_compiler_refuses_trains_uncompiled_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``compile`` where ``torch.compile``'s program cannot be made (no C++ compiler, no Triton): one line on stderr
    with the reason, and the run trains uncompiled — the same losses and weights as a run that never asked."""
    def refusing(model, **kw):
        def call(*a, **k):
            raise RuntimeError("no C++ compiler found\nmore")
        return call

    monkeypatch.setattr(torch, "compile", refusing)
    train(tiny(compile=True), tmp_path / "asked")
    assert "not compiled (RuntimeError: no C++ compiler found): training uncompiled" in capsys.readouterr().err
    train(tiny(), tmp_path / "plain")
    a, b = weights(tmp_path / "asked"), weights(tmp_path / "plain")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert RunDir(tmp_path / "asked").read_config()["train"]["compile"] is True


@pytest.mark.skipif(not any(__import__("shutil").which(c) for c in ("g++", "c++", "clang++")),
                    reason="torch.compile's CPU code generation needs a C++ compiler")
@pytest.mark.slow
def test_a_backward_the_compiler_refuses_trains_uncompiled_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                       backward_refused: None) -> None:
    """The backward pass is compiled with the forward, so a backward the compiler refuses is met at the first
    forward call and the run trains uncompiled, as for a refused forward, rather than failing at ``backward()``."""
    train(tiny(compile=True), tmp_path / "asked")
    assert "not compiled (BackendCompilerFailed: " in capsys.readouterr().err
    train(tiny(), tmp_path / "plain")
    a, b = weights(tmp_path / "asked"), weights(tmp_path / "plain")
    assert all(torch.equal(a[k], b[k]) for k in a)
