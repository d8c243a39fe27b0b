"""Stacked training (``windtunnel.training.stacked``): several seeds of one cell trained as one model must each follow the
trajectory the same seed follows alone — own data, own clipping, own optimizer moments, own run folder — and resume
from their own checkpoints."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from windtunnel.run.runs import RunDir
from windtunnel.training.stacked import train_stacked
from windtunnel.training.loop import ConfigError, TrainConfig, TrainingDiverged, train
from windtunnel.training.optim import lr_at
from windtunnel.training.step import Schedule, StackedStep

SEEDS = (0, 1, 2)


def tiny(arch: str = "transformer", **kw) -> TrainConfig:
    base = dict(task="bijection", task_params={"V": 4, "L": 4}, arch=arch, params=6_000,
                model={"n_layers": 2, "n_heads": 2} if arch == "transformer" else {}, steps=60, batch_size=8,
                lr=3e-3, warmup=5, eval_every=30, eval_n=32, ckpt_every=30, progress=False, log_every=5,
                grad_clip=0.05, readout_lr_mult=4.0 if arch == "transformer" else 1.0)
    base.update(kw)
    return TrainConfig(**base)


def _losses(run: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(RunDir(run).latest_checkpoint() / "model.safetensors"))


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["transformer", "lstm"])
def test_each_member_follows_its_seed_trained_alone(tmp_path: Path, arch: str, float64: None) -> None:
    """Float64, a clipping bound every step hits (so a clip shared across members would show), three seeds: each
    member's logged losses, gradient norms, held-out metrics and checkpointed weights equal its seed's run alone;
    no member equals another's (their data streams are their own).  The LSTM has no vmap rule: its members run one
    by one inside the stacked step, with the same result."""
    cfgs = [tiny(arch, seed=s) for s in SEEDS]
    train_stacked(cfgs, [tmp_path / f"stacked{s}" for s in SEEDS])
    for c in cfgs:
        train(c, tmp_path / f"alone{c.seed}")
    for s in SEEDS:
        stacked, alone = tmp_path / f"stacked{s}", tmp_path / f"alone{s}"
        assert _losses(stacked) == pytest.approx(_losses(alone), rel=1e-9, abs=1e-12)
        log = [json.loads(x) for x in (stacked / "metrics.jsonl").read_text().splitlines()]
        ref = [json.loads(x) for x in (alone / "metrics.jsonl").read_text().splitlines()]
        assert [r["grad_norm"] for r in log if "grad_norm" in r] == pytest.approx(
            [r["grad_norm"] for r in ref if "grad_norm" in r], rel=1e-9)
        assert all(r["grad_norm"] > 0.05 for r in log if "grad_norm" in r)  # every logged step was clipped
        assert [r["step"] for r in log if "eval" in r] == [r["step"] for r in ref if "eval" in r] == [30, 60]
        assert [r["eval"]["kl"] for r in log if "eval" in r] == pytest.approx(
            [r["eval"]["kl"] for r in ref if "eval" in r], rel=1e-9)
        a, b = _weights(stacked), _weights(alone)
        assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-9, atol=1e-12) for k in a)
        assert json.loads((stacked / "config.json").read_text()) == json.loads((alone / "config.json").read_text())
    assert _losses(tmp_path / "stacked0") != _losses(tmp_path / "stacked1")


@pytest.mark.slow
def test_a_stacked_run_resumes_from_its_members_checkpoints(tmp_path: Path, float64: None) -> None:
    """Stopped at step 30 and resumed, the stacked runs end where an unbroken stacked run ends; a member resumes
    alone from its stacked checkpoint (the single-run format) and ends there too."""
    cfgs = [tiny(seed=s) for s in SEEDS]
    whole = [tmp_path / f"whole{s}" for s in SEEDS]
    train_stacked(cfgs, whole)
    parts = [tmp_path / f"part{s}" for s in SEEDS]
    train_stacked(cfgs, parts, until=30)
    assert all(RunDir(p).latest_step() == 30 for p in parts)
    train(cfgs[1], parts[1], resume=True)  # one member alone, from the stacked checkpoint
    train_stacked([cfgs[0], cfgs[2]], [parts[0], parts[2]], resume=True)
    for w, p in zip(whole, parts):
        assert _losses(p) == pytest.approx(_losses(w), rel=1e-9)
        a, b = _weights(p), _weights(w)
        assert all(torch.allclose(a[k], b[k], rtol=1e-9, atol=1e-12) for k in a)


def test_runs_that_differ_in_more_than_seed_and_learning_rates_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="differ only in their seed, lr, min_lr, readout_lr_mult, task, task_params "
                                          r"\(a task whose episodes have the same shapes\); these differ: batch_size"):
        train_stacked([tiny(seed=0), tiny(seed=1, batch_size=16)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ConfigError, match="these differ: the shapes of their tasks' episodes"):  # V = 5: other sizes
        train_stacked([tiny(seed=0), tiny(seed=1, task_params={"V": 5, "L": 4})], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ConfigError, match="distinct runs"):
        train_stacked([tiny(seed=0), tiny(seed=0)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ConfigError, match="a run folder each"):
        train_stacked([tiny(seed=0), tiny(seed=1)], [tmp_path / "a", tmp_path / "a"])
    with pytest.raises(ConfigError, match="invalid graph"):
        train_stacked([tiny(seed=0), tiny(seed=1)], [tmp_path / "a", tmp_path / "b"], graph="sometimes")
    assert not (tmp_path / "a").exists()  # refused before anything is written


def _same_runs(a: Path, b: Path, rel: float = 1e-9) -> None:
    assert _losses(a) == pytest.approx(_losses(b), rel=rel, abs=1e-12)
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], rtol=rel, atol=1e-12) for k in wa)


@pytest.mark.slow
def test_members_that_differ_in_their_learning_rates_each_follow_their_run_alone(tmp_path: Path,
                                                                                float64: None) -> None:
    """One seed at two rates, and a third member whose readout keeps the base rate while the others scale theirs:
    each member's own schedule and parameter groups reach it (a rate shared across members would show), and each
    equals its run alone; the logged rate is the member's own."""
    cfgs = [tiny(seed=0), tiny(seed=0, lr=1e-3, min_lr=1e-4), tiny(seed=1, readout_lr_mult=1.0)]
    train_stacked(cfgs, [tmp_path / f"stacked{i}" for i in range(3)])
    for i, c in enumerate(cfgs):
        train(c, tmp_path / f"alone{i}")
        _same_runs(tmp_path / f"stacked{i}", tmp_path / f"alone{i}")
        lrs = [r["lr"] for r in map(json.loads, (tmp_path / f"stacked{i}" / "metrics.jsonl").read_text().splitlines())
               if "lr" in r]
        assert lrs[-1] == pytest.approx(lr_at(59, c), rel=1e-12)
    assert _losses(tmp_path / "stacked0") != _losses(tmp_path / "stacked1")


@pytest.mark.slow
def test_columns_whose_episodes_have_one_shape_stack_each_member_on_its_own_task(tmp_path: Path,
                                                                                float64: None) -> None:
    """Bijection with and without replacement (the same shapes, other episodes) stack, each member trained on its own
    task exactly as alone: its config names its task, and its losses and weights are its run's alone (a member fed
    its partner's episodes would show)."""
    cfgs = [tiny(seed=0), tiny(seed=0, task_params={"V": 4, "L": 4, "replacement": True}), tiny(seed=1)]
    train_stacked(cfgs, [tmp_path / f"stacked{i}" for i in range(3)])
    for i, c in enumerate(cfgs):
        train(c, tmp_path / f"alone{i}")
        _same_runs(tmp_path / f"stacked{i}", tmp_path / f"alone{i}")
        task = json.loads((tmp_path / f"stacked{i}" / "config.json").read_text())["task"]["params"]
        assert task["replacement"] == c.task_params.get("replacement", False)
    assert _losses(tmp_path / "stacked0") != _losses(tmp_path / "stacked1")  # one seed, two tasks


def test_the_device_schedule_is_the_hosts() -> None:
    """The schedule the recorded step computes on the device equals ``lr_at`` at every step, warm-up, cosine and past
    the end, for members with different rates."""
    cfgs = [tiny(seed=0, warmup=5, steps=60), tiny(seed=1, warmup=5, steps=60, lr=1e-2, min_lr=1e-3)]
    rates = Schedule(cfgs, torch.device("cpu"))
    for s in range(0, 70):
        got = rates(torch.tensor(s))
        assert got.tolist() == pytest.approx([lr_at(s, c) for c in cfgs], rel=1e-12, abs=1e-18)


def _faithful(body, warmup, reset):
    """A recorder whose replay runs the recorded program again — what a faithful CUDA graph does — after the
    warm-up steps and a recording that each change the weights (the program must undo both)."""
    warmup()
    warmup()
    reset()
    body()
    return body


def _frozen(body, warmup, reset):
    """A recorder whose replay leaves the weights where they are: a graph that recorded the wrong thing."""
    body()
    return lambda: None


def _stale(body, warmup, reset):
    """A recorder whose replay reads the batch it was recorded with, not the one the loop refills each step (a value
    fixed at recording): right at the step recorded, wrong at every later one."""
    program = body.__self__
    warmup()
    reset()
    body()  # the recording: it runs the step once, as a CUDA graph's does (undone by the program)
    recorded = {k: v.clone() for k, v in program.buffers.items()}

    def replay():
        now = {k: v.clone() for k, v in program.buffers.items()}
        for k, v in recorded.items():
            program.buffers[k].copy_(v)
        body()
        for k, v in now.items():
            program.buffers[k].copy_(v)

    return replay


def _broken(body, warmup, reset):
    warmup()
    raise RuntimeError("operation not permitted when stream is capturing")


@pytest.mark.parametrize("recorder, note", [(_faithful, "CUDA graph"), (_frozen, "did not reproduce the eager one"),
                                            (_stale, "did not reproduce the eager one"),
                                            (_broken, "could not record the step: RuntimeError")])
@pytest.mark.slow
def test_a_recorded_step_is_trusted_only_where_it_reproduces_the_eager_step(
        tmp_path: Path, float64: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
        recorder, note: str) -> None:
    """With a recorder standing in for CUDA graphs on this CPU: a faithful replay is used and trains exactly as the
    eager step; a replay that does not update the weights, or a recording that fails, is refused, said, and the runs
    go on eagerly — with the warm-up and the recording undone, so they too end exactly where the eager runs end.  A
    replay that reads a stale batch is right at the step recorded: the check's second step, on another batch, shows it."""
    cfgs = [tiny(seed=s) for s in (0, 1)]
    train_stacked(cfgs, [tmp_path / f"eager{s}" for s in (0, 1)], graph="off")
    monkeypatch.setattr(StackedStep, "recorder", staticmethod(recorder))
    monkeypatch.setattr(StackedStep, "records_on", staticmethod(lambda device: True))
    train_stacked(cfgs, [tmp_path / f"graph{s}" for s in (0, 1)], log_lines=True)
    said = [x for x in capsys.readouterr().out.splitlines() if "stacked step:" in x]
    assert len(said) == 1 and note in said[0] and (note == "CUDA graph") == ("eager" not in said[0])
    for s in (0, 1):
        _same_runs(tmp_path / f"graph{s}", tmp_path / f"eager{s}")


def test_a_replayed_step_still_watches_for_divergence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The divergence watch is part of the recorded program: with every step a replay, a member whose loss turns NaN
    mid-interval still stops the stack, naming that step, with the last good checkpoints kept."""
    from windtunnel.training import step as step_module

    real, calls = step_module.loss_fn, {"n": 0}

    def poisoned(logits, ep, soft, n_scored=None):  # member 0 from the 23rd loss computed on
        calls["n"] += 1
        loss = real(logits, ep, soft, n_scored)
        return loss * float("nan") if calls["n"] % 2 == 1 and calls["n"] > 22 else loss

    monkeypatch.setattr(step_module, "loss_fn", poisoned)
    monkeypatch.setattr(StackedStep, "recorder", staticmethod(_faithful))
    monkeypatch.setattr(StackedStep, "records_on", staticmethod(lambda device: True))
    runs = [tmp_path / "s0", tmp_path / "s1"]
    # step 0 is recorded (two warm-up steps, the recording, two checked replays, two eager steps, the step itself: 16
    # losses), each later step computes 2: the 23rd loss is member 0's at step 4, which the watch must name from the
    # replay's own counter
    with pytest.raises(TrainingDiverged, match=r"non-finite at step 4 for seed\(s\) \[0\]"):
        train_stacked([tiny(seed=0), tiny(seed=1)], runs)
    for r in runs:
        assert all(torch.isfinite(p).all() for p in _weights(r).values())


def test_soft_targets_and_a_curriculum_that_changes_the_episode_length_stack_as_alone(tmp_path: Path,
                                                                                     float64: None) -> None:
    """The HMM trains against its exact posterior (soft targets), and a curriculum that starts on shorter episodes
    changes the batch's shape mid-run (the step's input buffers are made anew): each member still equals its run
    alone."""
    cfgs = [tiny(seed=s, task="hmm", task_params={"S": 3, "O": 4, "K": 6}, steps=30, eval_every=15, ckpt_every=15,
                 curriculum=[{"until": 12, "task_params": {"K": 3}}]) for s in (0, 1)]
    train_stacked(cfgs, [tmp_path / f"stacked{c.seed}" for c in cfgs])
    for c in cfgs:
        train(c, tmp_path / f"alone{c.seed}")
        _same_runs(tmp_path / f"stacked{c.seed}", tmp_path / f"alone{c.seed}")


def _member_adamw_against_torch(unused: bool, n_layers: int = 2, steps: int = 4):
    """Three members of a small stack of linears (float64), updated by MemberAdamW from the same gradients that
    torch.optim.AdamW gets for each member alone; returns the largest difference and the update's operation count."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from windtunnel.training.step import MemberAdamW, clip_per_member

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(5, 5) for _ in range(n_layers))
            self.spare = torch.nn.Parameter(torch.randn(3))  # used only where `unused` is False

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = torch.tanh(layer(x))
            return x if unused else x * self.spare.sum()

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            Count.n += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    members = [Net().double() for _ in range(3)]
    alone = [torch.optim.AdamW(m.parameters(), lr=0.05, weight_decay=0.1) for m in members]
    stacked = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in members]).requires_grad_(True)
               for n, _ in members[0].named_parameters()}
    opt = MemberAdamW(stacked, [(list(stacked), 0.1, [1.0, 1.0, 1.0])], betas=(0.9, 0.999))
    xs = torch.randn(steps, 3, 4, 5, dtype=torch.float64)
    for t in range(steps):
        opt.zero_grad()
        for i, (m, o) in enumerate(zip(members, alone)):
            o.zero_grad(set_to_none=True)
            m(xs[t, i]).pow(2).sum().backward()
            for n, p in m.named_parameters():
                if p.grad is not None:
                    g = p.grad.clone()
                    if stacked[n].grad is None:
                        stacked[n].grad = torch.zeros_like(stacked[n])
                    stacked[n].grad[i] = g
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            o.step()
        clip_per_member(opt.grads(), 1.0)
        with Count():
            opt.step(torch.full((3,), 0.05, dtype=torch.float64))
    diff = max(float((stacked[n][i] - p).detach().abs().max()) for i, m in enumerate(members) for n, p in m.named_parameters())
    return diff, Count.n // steps


@pytest.mark.parametrize("unused", [False, True])
def test_the_stacked_adamw_is_each_members_adamw(unused: bool) -> None:
    """MemberAdamW over three members equals torch.optim.AdamW (with clip_grad_norm_) on each member alone, step by
    step in float64 — also where a parameter gets no gradient, which AdamW leaves as it is rather than decaying."""
    diff, _ = _member_adamw_against_torch(unused)
    assert diff < 1e-12


def test_the_stacked_update_is_the_same_few_operations_however_many_parameters() -> None:
    """The update runs on the group's one buffer: its operation count does not grow with the number of parameters
    (a per-parameter loop would take about ten more operations for each one)."""
    assert _member_adamw_against_torch(False, n_layers=2)[1] == _member_adamw_against_torch(False, n_layers=12)[1]


def test_stacked_lstms_run_as_one_block_diagonal_lstm_each_member_its_own(tmp_path: Path, float64: None,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the fold is used (a GPU; here the CPU, told to), a stack's LSTM layers run as one block-diagonal LSTM —
    one fold a layer a step, the forward pass vmapped rather than member by member — and each member still equals its
    seed trained alone (a block reading another member's state or weights would show)."""
    from windtunnel.models import lstm

    folds = []
    monkeypatch.setattr(lstm, "FOLDED_DEVICES", ("cpu",))
    fold = lstm._FoldedLSTM.vmap
    monkeypatch.setattr(lstm._FoldedLSTM, "vmap", staticmethod(lambda *a: folds.append(a[0].batch_size) or fold(*a)))
    cfgs = [tiny("lstm", seed=s, steps=20, eval_every=20, ckpt_every=20) for s in SEEDS]
    train_stacked(cfgs, [tmp_path / f"stacked{s}" for s in SEEDS])
    assert folds and set(folds) == {len(SEEDS)}  # every layer of every forward pass folded, the three members at once
    for c in cfgs:
        train(c, tmp_path / f"alone{c.seed}")
        _same_runs(tmp_path / f"stacked{c.seed}", tmp_path / f"alone{c.seed}")


def test_a_parameter_first_used_after_the_first_step_still_trains() -> None:
    """A parameter with no gradient at the first step is left alone then; once a step uses it, its gradient is taken
    into the buffers and it is updated (its stray gradient not ignored)."""
    from windtunnel.training.step import MemberAdamW

    stacked = {"a": torch.ones(2, 3, requires_grad=True), "b": torch.ones(2, 3, requires_grad=True)}
    opt = MemberAdamW(stacked, [(["a", "b"], 0.1, [1.0, 1.0])], betas=(0.9, 0.999))
    rates = torch.full((2,), 0.01, dtype=torch.float64)
    for use_b in (False, True, True):
        opt.zero_grad()
        (stacked["a"].sum() + (stacked["b"].pow(2).sum() if use_b else 0)).backward()
        before = stacked["b"].detach().clone()
        opt.grads()
        opt.step(rates)
        moved = not torch.equal(stacked["b"].detach(), before)
        assert moved == use_b
    assert stacked["b"].grad.data_ptr() == opt.grads()[0][:, 3:].data_ptr()  # its gradient lives in the buffer now


def test_a_stack_says_whether_its_forward_pass_is_vmapped(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The first step's line says how the members' forward pass ran: vmapped (the transformer), or member by member
    with the reason (an LSTM on a CPU, where nn.LSTM has no vmap rule) — a fallback is never silent."""
    for arch in ("transformer", "lstm"):
        cfgs = [tiny(arch, seed=s, steps=2, eval_every=2, ckpt_every=2) for s in (0, 1)]
        train_stacked(cfgs, [tmp_path / f"{arch}{s}" for s in (0, 1)], log_lines=True)
    out = capsys.readouterr().out
    assert "transformer/bijection stacked forward: vmapped" in out
    assert "lstm/bijection stacked forward: member by member (" in out


needs_compiler = pytest.mark.skipif(
    not any(__import__("shutil").which(c) for c in ("g++", "c++", "clang++")),
    reason="torch.compile's CPU code generation needs a C++ compiler")


@needs_compiler
@pytest.mark.parametrize("pos", ["learned", "rotary"])
@pytest.mark.slow
def test_a_compiled_stack_trains_each_member_as_its_seed_alone(tmp_path: Path, pos: str, float64: None,
                                                               capsys: pytest.CaptureFixture) -> None:
    """``compile``: the vmapped forward and its backward run as one inductor program (one graph, no break: rotary
    positions trace their tables into it), and each member still follows its seed trained alone and eagerly — in
    float64, every step clipped — up to the compiler's summation order; with rotary positions up to one float32
    rounding of the angle tables (made in float32: the compiled, vectorised cosine and the eager one differ in the
    last bit at some angles), a relative 10⁻⁷."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    cfgs = [tiny(seed=s, compile=True, model={"n_layers": 2, "n_heads": 2, "pos": pos}) for s in (0, 1)]
    train_stacked(cfgs, [tmp_path / f"stacked{s}" for s in (0, 1)], log_lines=True)
    assert "stacked forward: vmapped, compiled\n" in capsys.readouterr().out
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    for c in cfgs:
        alone = c.to_dict() | {"compile": False}
        train(TrainConfig(**alone), tmp_path / f"alone{c.seed}")
        stacked, ref = tmp_path / f"stacked{c.seed}", tmp_path / f"alone{c.seed}"
        rel = 1e-9 if pos == "learned" else 1e-6
        assert _losses(stacked) == pytest.approx(_losses(ref), rel=rel)
        a, b = _weights(stacked), _weights(ref)
        assert all((a[k] - b[k]).abs().max() <= rel * b[k].abs().max() for k in a)  # each tensor, at its scale
    assert _losses(tmp_path / "stacked0") != _losses(tmp_path / "stacked1")


def test_a_forward_the_compiler_refuses_runs_vmapped_and_says_why(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Where compiling fails, the step runs the same vmapped forward uncompiled and its first line says so, with
    the reason; the members train as they would have."""
    def refusing(fn, **kw):
        def call(*a, **k):
            raise RuntimeError("this compiler refuses\nmore detail")
        return call

    monkeypatch.setattr(torch, "compile", refusing)
    cfgs = [tiny(seed=s, steps=4, eval_every=4, ckpt_every=4, compile=c) for s, c in ((0, True), (1, True))]
    train_stacked(cfgs, [tmp_path / f"c{s}" for s in (0, 1)], log_lines=True)
    out = capsys.readouterr().out
    assert "stacked forward: vmapped (not compiled: RuntimeError: this compiler refuses)\n" in out
    plain = [tiny(seed=s, steps=4, eval_every=4, ckpt_every=4) for s in (0, 1)]
    train_stacked(plain, [tmp_path / f"p{s}" for s in (0, 1)])
    for s in (0, 1):
        assert _losses(tmp_path / f"c{s}") == _losses(tmp_path / f"p{s}")


@needs_compiler
@pytest.mark.parametrize("recorder, note", [(_faithful, "CUDA graph"), (_broken, "could not record the step")])
@pytest.mark.slow
def test_a_compiled_step_is_recorded_and_checked_like_an_eager_one(
        tmp_path: Path, float64: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
        recorder, note: str) -> None:
    """``compile`` with the step recorded (a stand-in recorder on this CPU): the compiled forward is what the
    recording runs and what its replays are checked against; a faithful replay is kept, a failed recording is said,
    and either way each member ends where its uncompiled, unrecorded run ends (up to the compiler's summation order)."""
    import torch._dynamo as dynamo

    dynamo.reset()
    cfgs = [tiny(seed=s, steps=20, eval_every=10, ckpt_every=10, model={"n_layers": 2, "n_heads": 2, "pos": "learned"})
            for s in (0, 1)]  # learned positions: rotary tables would add a float32 rounding (see above)
    train_stacked(cfgs, [tmp_path / f"eager{s}" for s in (0, 1)], graph="off")
    capsys.readouterr()
    monkeypatch.setattr(StackedStep, "recorder", staticmethod(recorder))
    monkeypatch.setattr(StackedStep, "records_on", staticmethod(lambda device: True))
    compiled = [dataclasses.replace(c, compile=True) for c in cfgs]
    train_stacked(compiled, [tmp_path / f"graph{s}" for s in (0, 1)], log_lines=True)
    out = capsys.readouterr().out.splitlines()
    assert [x.split("stacked forward: ")[1] for x in out if "stacked forward: " in x] == ["vmapped, compiled"]
    said = [x for x in out if "stacked step:" in x]
    assert len(said) == 1 and note in said[0]
    for s in (0, 1):
        a, b = _weights(tmp_path / f"graph{s}"), _weights(tmp_path / f"eager{s}")
        assert _losses(tmp_path / f"graph{s}") == pytest.approx(_losses(tmp_path / f"eager{s}"), rel=1e-9)
        assert all((a[k] - b[k]).abs().max() <= 1e-9 * b[k].abs().max() for k in a)  # each tensor, at its scale


@needs_compiler
@pytest.mark.slow
def test_a_backward_the_compiler_refuses_is_caught_at_the_forward_and_runs_vmapped(
        tmp_path: Path, capsys: pytest.CaptureFixture, backward_refused: None) -> None:
    """A backward pass is compiled with its forward (not lazily at the first ``backward()``), so a backward the
    compiler refuses falls back like a refused forward — one line, the same training — instead of ending the run."""
    cfgs = [tiny(seed=s, steps=4, eval_every=4, ckpt_every=4, compile=True) for s in (0, 1)]
    train_stacked(cfgs, [tmp_path / f"c{s}" for s in (0, 1)], log_lines=True)
    assert "stacked forward: vmapped (not compiled: BackendCompilerFailed: " in capsys.readouterr().out
    plain = [tiny(seed=s, steps=4, eval_every=4, ckpt_every=4) for s in (0, 1)]
    train_stacked(plain, [tmp_path / f"p{s}" for s in (0, 1)])
    for s in (0, 1):
        assert _losses(tmp_path / f"c{s}") == _losses(tmp_path / f"p{s}")


def test_a_stack_with_fixed_training_sets_samples_each_members_set_once(tmp_path: Path) -> None:
    """Members of a stack each train on their own fixed set, asked for member after member on every step: each set
    is sampled once for the whole run (a cache of one set sampled every member's set anew on every step), the sets
    differ between members, and a member's batches are rows of its own set."""
    from windtunnel.training import streams
    from windtunnel import tasks

    streams.TRAINING_SETS.clear()
    before = streams.TRAINING_SETS.draws
    cfgs = [tiny(seed=s, steps=12, eval_every=12, ckpt_every=12, log_every=4, train_set=16) for s in SEEDS]
    train_stacked(cfgs, [tmp_path / f"m{s}" for s in SEEDS])
    assert streams.TRAINING_SETS.draws - before == len(SEEDS)
    task = tasks.make(cfgs[0].task, **cfgs[0].task_params)
    sets = [streams.training_set(c, task) for c in cfgs]
    assert streams.TRAINING_SETS.draws - before == len(SEEDS)  # still cached after the run
    rows = [{tuple(t.tolist()) for t in s.tokens} for s in sets]
    assert rows[0] != rows[1] != rows[2]
    for c, own in zip(cfgs, rows):
        assert {tuple(t.tolist()) for t in streams.step_batch(c, task, 5, shards=1).tokens} <= own


def test_training_sets_past_their_memory_budget_drop_the_least_recently_used() -> None:
    """The cache keeps sets while their estimated bytes fit its budget, dropping the least recently used first, and
    always keeps the newest; a dropped set sampled again is the same set."""
    from windtunnel.training import streams
    from windtunnel import tasks

    cfgs = [tiny(seed=s, train_set=8) for s in SEEDS]
    task = tasks.make(cfgs[0].task, **cfgs[0].task_params)
    one = 8 * task.seq_len * (8 * task.n_classes + 32)
    cache = streams.TrainingSets(budget=2 * one)
    first = cache.get(cfgs[0], task)
    cache.get(cfgs[1], task)
    cache.get(cfgs[0], task)  # seed 0 used again: seed 1 is now the least recent
    assert cache.draws == 2 and len(cache) == 2
    cache.get(cfgs[2], task)
    assert len(cache) == 2 and cache.draws == 3
    cache.get(cfgs[0], task)
    assert cache.draws == 3  # kept
    cache.get(cfgs[1], task)
    assert cache.draws == 4  # dropped, sampled again
    assert torch.equal(cache.get(cfgs[0], task).tokens, first.tokens)
    small = streams.TrainingSets(budget=1)
    small.get(cfgs[0], task)
    small.get(cfgs[1], task)
    assert len(small) == 1  # the newest is kept even past the budget
