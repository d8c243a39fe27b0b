"""Stacked cells in the commands that plan many (``windtunnel.orchestration.stacking``): a table whose seeds are trained
as one stacked model writes, for every cell, what the same table trained cell by cell writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from windtunnel.orchestration import stacking
from windtunnel.orchestration.table import run_table
from windtunnel.run.runs import RunDir


def _log(run: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


@pytest.mark.slow
def test_a_stacked_table_writes_what_a_table_trained_cell_by_cell_writes(tmp_path: Path) -> None:
    """Three seeds of a cell, one trained earlier alone: the other two are trained as one stack (their timings say
    so), the first is reused; every cell's training log and evaluation equal those of the table trained cell by cell
    (float32: to rounding), and the two tables hold the same cells."""
    kw = dict(preset="quick", archs=["transformer"], tasks=["recall"], workers=1, steps=20, eval_n=64)
    run_table(**kw, seeds=3, out=tmp_path / "alone", stack="off")
    run_table(**kw, seeds=1, out=tmp_path / "stacked", stack="off")
    run_table(**kw, seeds=3, out=tmp_path / "stacked", stack="on")
    runs = sorted((tmp_path / "stacked" / "runs").glob("*-s*"))
    assert [r.name for r in runs] == ["recall-transformer-s0", "recall-transformer-s1", "recall-transformer-s2"]
    assert [RunDir(r).timings().get("stacked_members") for r in runs] == [None, 2, 2]
    for r in runs:
        alone = tmp_path / "alone" / "runs" / r.name
        assert _log(r) == pytest.approx(_log(alone), rel=1e-4)
        a, b = RunDir(r).read_eval()["metrics"], RunDir(alone).read_eval()["metrics"]
        assert a["kl"]["value"] == pytest.approx(b["kl"]["value"], rel=1e-3)
    tables = [json.loads((tmp_path / t / "table.json").read_text())["cells"] for t in ("alone", "stacked")]
    assert [c["seeds"] for c in tables[0]] == [c["seeds"] for c in tables[1]] == [[0, 1, 2]]


@pytest.mark.slow
def test_a_stacked_table_trains_two_columns_of_one_shape_together(tmp_path: Path) -> None:
    """Bijection with and without replacement at the paper preset (episodes of one shape there; small models), one
    seed each: one stack of two (their timings say so) whose cells each equal the table trained cell by cell."""
    kw = dict(preset="paper", archs=["transformer"], tasks=["bijection", "bijection_replacement"], workers=1,
              steps=6, eval_n=64, seeds=1, params=20_000)
    run_table(**kw, out=tmp_path / "alone", stack="off")
    run_table(**kw, out=tmp_path / "stacked", stack="on")
    runs = sorted((tmp_path / "stacked" / "runs").glob("*-s*"))
    assert [r.name for r in runs] == ["bijection-transformer-s0", "bijection_replacement-transformer-s0"]
    assert [RunDir(r).timings().get("stacked_members") for r in runs] == [2, 2]
    for r in runs:
        assert _log(r) == pytest.approx(_log(tmp_path / "alone" / "runs" / r.name), rel=1e-4)
    assert _log(runs[0]) != _log(runs[1])


@pytest.mark.skipif(not any(__import__("shutil").which(c) for c in ("g++", "c++", "clang++")),
                    reason="torch.compile's CPU code generation needs a C++ compiler")
@pytest.mark.slow
def test_a_compiled_stacked_table_trains_the_same_cells_and_reuses_uncompiled_ones(tmp_path: Path,
                                                                                    capsys: pytest.CaptureFixture) -> None:
    """``table --stack on --compile``: the seed already trained without compiling is the same cell and is reused
    (compiling is not part of the recipe); the others train as one compiled stack, say so, record ``compile`` in
    their configs, and equal the table trained cell by cell to rounding."""
    kw = dict(preset="quick", archs=["mlp"], tasks=["recall"], workers=1, steps=20, eval_n=64)
    run_table(**kw, seeds=3, out=tmp_path / "alone", stack="off")
    run_table(**kw, seeds=1, out=tmp_path / "stacked", stack="off")
    capsys.readouterr()
    run_table(**kw, seeds=3, out=tmp_path / "stacked", stack="on", compile=True)
    assert "stacked forward: vmapped, compiled" in capsys.readouterr().out
    runs = sorted((tmp_path / "stacked" / "runs").glob("*-s*"))
    assert [RunDir(r).timings().get("stacked_members") for r in runs] == [None, 2, 2]
    assert [RunDir(r).read_config()["train"]["compile"] for r in runs] == [False, True, True]
    for r in runs:
        assert _log(r) == pytest.approx(_log(tmp_path / "alone" / "runs" / r.name), rel=1e-4)


def _payload(seed: int, arch: str = "transformer", lr: float = 1e-3, column: str = "bijection", **task: object) -> dict:
    config = {"task": "bijection", "task_params": {"V": 4, "L": 4, **task}, "arch": arch, "seed": seed, "lr": lr,
              "steps": 9}
    return {"column": column, "arch": arch, "seed": seed, "config": config, "run_dir": f"runs/{column}-{arch}-s{seed}",
            "threads": 1, "device": None, "analyze": column == "bijection"}


def test_cells_that_differ_only_in_seed_or_rate_are_one_stack_and_come_back_one_by_one() -> None:
    """Seeds, rates and columns whose episodes have one shape (with and without replacement; analysed or not
    afterwards) share a stack; another architecture, or a task of other shapes, does not."""
    payloads = [_payload(0), _payload(0, "lstm"), _payload(1), _payload(2, lr=3e-3), _payload(1, "lstm"),
                _payload(0, column="bijection_replacement", replacement=True), _payload(0, column="wider", V=5)]
    grouped = stacking.group(payloads, gpus=2)
    assert [[m["run_dir"] for m in stacking.members(g)] for g in grouped] == [
        ["runs/bijection-transformer-s0", "runs/bijection-transformer-s1", "runs/bijection-transformer-s2",
         "runs/bijection_replacement-transformer-s0"], ["runs/bijection-lstm-s0", "runs/bijection-lstm-s1"],
        ["runs/wider-transformer-s0"]]
    assert [[m["device"] for m in stacking.members(g)] for g in grouped] == [["cuda:0"] * 4, ["cuda:1"] * 2,
                                                                              ["cuda:0"]]
    assert stacking.group([_payload(0)]) == [_payload(0)]  # alone, a cell is its own payload off a GPU
    assert stacking.members(stacking.group([_payload(0)], gpus=1)[0]) == [{**_payload(0), "device": "cuda:0"}]
    assert "members" in stacking.group([_payload(0)], gpus=1)[0]  # on one, a stack of one: the recorded step
    boom = RuntimeError("out of memory")
    back = list(stacking.outcomes([
        (grouped[0], {"members": [(m, {"ok": m["seed"]}, None) for m in grouped[0]["members"]]}, None),
        (grouped[1], None, boom)]))
    assert [(p["run_dir"], r, e) for p, r, e in back] == [
        ("runs/bijection-transformer-s0", {"ok": 0}, None), ("runs/bijection-transformer-s1", {"ok": 1}, None),
        ("runs/bijection-transformer-s2", {"ok": 2}, None), ("runs/bijection_replacement-transformer-s0", {"ok": 0}, None),
        ("runs/bijection-lstm-s0", None, boom), ("runs/bijection-lstm-s1", None, boom)]
    assert stacking.wanted("auto", 1) and not stacking.wanted("auto", 0) and stacking.wanted("on", 0)


def test_reproduce_hands_a_cells_seeds_out_as_one_stack_and_counts_each_seed(tmp_path: Path, monkeypatch,
                                                                             capsys: pytest.CaptureFixture) -> None:
    """``reproduce --stack on``: the three seeds of each planned cell reach one worker together, are trained together
    first, then worked one by one by reproduce's own work; each seed is reported done on its own."""
    from windtunnel.orchestration import reproduce

    trained, worked = [], []
    monkeypatch.setattr(stacking, "train_together", lambda ps, held: trained.append([p["seed"] for p in ps]) or [])
    monkeypatch.setattr(reproduce, "_work", lambda p: worked.append(p["run_dir"]) or {"run_dir": p["run_dir"],
                                                                                      "wall_s": 1.0})
    summary = reproduce.reproduce("paper1", results=tmp_path, workers=1, only=["main-transformer-s*"], stack="on")
    assert trained == [[0, 1, 2]] and len(worked) == 3
    assert sorted(summary["done"]) == ["main-transformer-s0", "main-transformer-s1", "main-transformer-s2"]
    assert capsys.readouterr().out.count("  done main-transformer-s") == 3


def test_on_gpus_reproduce_runs_one_graphed_stack_per_gpu_and_three_cells_unstacked(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """Two GPUs (as ``torch.cuda`` reports them), no ``--workers``: the cells' seeds as stacks run one stack per GPU
    (three graphed stacks on one GPU each ran slower than alone); with ``--stack off``, three cells per GPU.  The
    stacks' devices alternate between the GPUs."""
    import torch
    from windtunnel.orchestration import executors, reproduce

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    seen: list[tuple[int, list[str]]] = []

    def run_local(work, payloads, workers):
        seen.append((workers, [m["device"] for p in payloads for m in stacking.members(p)]))
        return iter(())

    monkeypatch.setattr(executors, "run_local", run_local)
    reproduce.reproduce("paper1", results=tmp_path, only=["main-transformer-s*", "hmm-transformer-s*"])
    reproduce.reproduce("paper1", results=tmp_path, only=["main-transformer-s*", "hmm-transformer-s*"], stack="off")
    (stacked, devices), (alone, _) = seen
    assert stacked == 2 * 1 and alone == min(2 * 3, 6)
    assert sorted(devices) == ["cuda:0"] * 3 + ["cuda:1"] * 3
    assert executors.default_workers(0, True, cores=5) == 5 and executors.default_workers(3, False, cores=5) == 9


@pytest.mark.slow
def test_a_stack_whose_member_diverges_leaves_each_seed_to_finish_alone(tmp_path: Path, monkeypatch) -> None:
    """One seed's loss goes non-finite inside the stack: the stack stops at the last good checkpoints, and each seed
    then goes on alone from there (the command's own work) — the healthy one finishes instead of failing with its
    partner, and the table is written."""
    from windtunnel.training import step as step_module

    real, calls = step_module.loss_fn, {"n": 0}

    def poisoned(logits, ep, soft, n_scored=None):  # seed 1's loss inside the stack, from its 6th step on
        calls["n"] += 1
        loss = real(logits, ep, soft, n_scored)
        return loss * float("nan") if calls["n"] % 2 == 0 and calls["n"] > 10 else loss

    monkeypatch.setattr(step_module, "loss_fn", poisoned)
    run_table(preset="quick", archs=["transformer"], tasks=["recall"], workers=1, steps=20, eval_n=64, seeds=2,
              out=tmp_path, stack="on")
    runs = sorted((tmp_path / "runs").glob("*-s*"))
    assert [RunDir(r).latest_step() for r in runs] == [20, 20]
    assert all(RunDir(r).divergence() is None and "stacked_members" not in RunDir(r).timings() for r in runs)
    assert json.loads((tmp_path / "table.json").read_text())["cells"][0]["seeds"] == [0, 1]
    assert calls["n"] > 10  # the stack reached the poisoned steps (and stopped there: no member says it was stacked)
