"""What ran a run's steps (``windtunnel.training.execution``): the device, the step program, the compiler, Mamba's
scan — said on the first progress line and kept in ``timings.json`` under ``"execution"``, so a slow cell shows why
(a scan that fell back, a graph not kept, a model the compiler refused) in its own files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from windtunnel.models import scans
from windtunnel.orchestration.stages import train_run
from windtunnel.run.runs import RunDir
from windtunnel.training.loop import TrainConfig, train
from windtunnel.training.stacked import train_stacked


def tiny(arch: str = "transformer", **kw) -> TrainConfig:
    base = dict(task="bijection", task_params={"V": 4, "L": 4}, arch=arch, params=6_000,
                model={"n_layers": 2, "n_heads": 2} if arch == "transformer" else {}, steps=4, batch_size=8,
                lr=3e-3, warmup=1, eval_every=4, eval_n=16, ckpt_every=4, progress=False, log_every=2)
    base.update(kw)
    return TrainConfig(**base)


def _execution(run: Path) -> dict:
    return json.loads((run / "timings.json").read_text())["execution"]


def _cpu_scan() -> str:
    return "fused C++ kernel" if scans.cpu_kernel() is not None else "PyTorch reference"


def test_a_run_records_what_ran_its_steps_beside_its_seconds(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A transformer alone on a CPU: eager, uncompiled, no scan — on its first progress line and in timings.json,
    which still holds the training seconds the stage records after (and the numbers a reader of timings reads)."""
    rd = train_run(tiny(), tmp_path / "t", log_lines=True)
    ran = _execution(tmp_path / "t")
    assert ran == {"device": "cpu", "members": 1, "step": "eager", "compile": "off", "bf16": False, "scan": "none"}
    assert "transformer/bijection execution: cpu, step eager, compile off, bf16 off, scan none\n" in capsys.readouterr().out
    assert set(rd.timings()) == {"train_s"} and rd.timings()["train_s"] > 0
    rd.add_timing(eval_s=1.5)  # a later stage's seconds keep what ran
    assert _execution(tmp_path / "t") == ran and rd.timings()["eval_s"] == 1.5


def test_a_mamba_run_records_the_scan_it_ran(tmp_path: Path) -> None:
    """Mamba on a CPU runs the fused kernel where it builds, else the PyTorch reference; the run says which."""
    train(tiny("mamba", params=4_000, model={"n_layers": 1}), tmp_path / "m")
    assert _execution(tmp_path / "m")["scan"] == _cpu_scan()


def test_a_model_the_compiler_refuses_records_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refusing(model, **kw):
        def call(*a, **k):
            raise RuntimeError("no C++ compiler found\nmore")
        return call

    monkeypatch.setattr(torch, "compile", refusing)
    train(tiny(compile=True), tmp_path / "c")
    assert _execution(tmp_path / "c")["compile"] == "not compiled (RuntimeError: no C++ compiler found)"
    train_stacked([tiny(seed=s, compile=True) for s in (0, 1)], [tmp_path / f"s{s}" for s in (0, 1)])
    for s in (0, 1):
        assert _execution(tmp_path / f"s{s}")["compile"] == "not compiled (RuntimeError: no C++ compiler found)"


def test_each_member_of_a_stack_records_the_stack_that_ran_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Three seeds stacked on a CPU: each member's timings.json says three members, an eager step (a CUDA graph needs
    a CUDA device), no compiler; a resumed stack says it again."""
    cfgs = [tiny(seed=s, steps=6, ckpt_every=2, eval_every=2) for s in (0, 1, 2)]
    dirs = [tmp_path / f"m{s}" for s in (0, 1, 2)]
    train_stacked(cfgs, dirs, until=2, log_lines=True)
    assert "execution: cpu, 3 members, step eager, compile off, bf16 off, scan none\n" in capsys.readouterr().out
    for d in dirs:
        assert _execution(d) == {"device": "cpu", "members": 3, "step": "eager", "compile": "off", "bf16": False,
                                 "scan": "none"}
        (d / "timings.json").unlink()
    train_stacked(cfgs, dirs, resume=True)
    assert all(_execution(d)["members"] == 3 for d in dirs)


def test_the_scans_run_are_named_and_a_refused_triton_scan_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """``scans_run`` names each scan as it runs (reset per run); the Triton scan's refusal keeps its reason — the
    self-check's difference, or the error that stopped it — where ``triton_available`` kept only a yes or no."""
    g = torch.Generator().manual_seed(0)
    u, delta = torch.randn(2, 5, 3, generator=g), torch.rand(2, 5, 3, generator=g)
    A, B, C, D = -torch.rand(3, 4, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(3, generator=g)
    scans.scans_run(reset=True)
    for method in ("loop", "doubling", "auto"):
        scans.selective_scan(u, delta, A, B, C, D, method=method)
    assert scans.scans_run(reset=True) == ["loop", "doubling", _cpu_scan()]
    assert scans.scans_run() == []
    assert scans.triton_refusal("cpu") == "not a CUDA device"
    monkeypatch.setattr(scans, "triton_self_check", lambda device: "y differs from the reference by 0.5 (relative)")
    assert scans._checked_outside_transforms("cpu") is False
    assert scans._TRITON_VERDICTS["cpu"] == "its self-check: y differs from the reference by 0.5 (relative)"

    def broken(device):
        raise ImportError("No module named 'triton'\ntraceback lines")

    monkeypatch.setattr(scans, "triton_self_check", broken)
    assert scans._checked_outside_transforms("cpu") is False
    assert scans._TRITON_VERDICTS["cpu"] == "ImportError: No module named 'triton'"
    scans._TRITON_VERDICTS.pop("cpu")


def _sets_threads(payload: dict) -> dict:
    torch.set_num_threads(payload["threads"])
    if payload.get("fail"):
        raise ValueError("this cell fails")
    return {"threads": torch.get_num_threads()}


def test_a_cell_worked_in_this_process_leaves_its_thread_count_behind() -> None:
    # one worker runs each cell in the calling process: the count a cell's recipe sets must end with the cell (a
    # test session left with two threads on a busy core ran its later tests many times slower)
    from windtunnel.orchestration.executors import run_local

    before = torch.get_num_threads()
    wanted = before + 1
    outcomes = list(run_local(_sets_threads, [{"threads": wanted}, {"threads": wanted, "fail": True}], 1))
    assert outcomes[0][1] == {"threads": wanted}  # the cell ran with its own count
    assert isinstance(outcomes[1][2], ValueError)
    assert torch.get_num_threads() == before
