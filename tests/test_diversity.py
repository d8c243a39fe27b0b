"""The task-diversity summary on cells whose models are the two oracles: the pool's (a perfect memoriser)
and the true prior's (a perfect inferrer), evaluated and written as a real cell's eval.json is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from windtunnel.orchestration import diversity
from windtunnel.run import grid
from windtunnel import tasks
from windtunnel.cli import main
from windtunnel.evaluation.evaluate import evaluate
from windtunnel.run.runs import RunDir


def _cells(results: Path, arch: str, prior: str, seeds=(0, 1)) -> None:
    for size in (*grid.POOL_SIZES, None):
        column = "bijection" if size is None else f"pool_{size}"
        name, params = grid.task_spec(column, "quick")
        task = tasks.make(name, **params)
        for seed in seeds:
            result = evaluate(tasks.oracle(task, prior=prior), task, n=40, seed=100 + seed, n_boot=10)
            RunDir(results / "quick" / "cells" / f"{column}-{arch}-s{seed}").write_eval(result.to_dict())


@pytest.mark.slow
def test_the_memoriser_never_switches_and_the_inferrer_infers_from_the_smallest_pool(tmp_path: Path, capsys) -> None:
    _cells(tmp_path, "transformer", "task")
    _cells(tmp_path, "lstm", "true")
    doc = diversity.summarise(tmp_path)
    assert doc["summary"]["transformer"]["inferring_from"] is None
    assert doc["summary"]["lstm"]["inferring_from"] == 1
    memo, infer = doc["rows"]["transformer"], doc["rows"]["lstm"]
    assert [r["pool"] for r in memo] == [*grid.POOL_SIZES, None]
    assert all(r["tv_to_pool"]["mean"] < 1e-12 for r in memo)  # the pool's oracle is the pool's posterior
    assert all(r["kl_fresh"]["mean"] < 1e-12 and r["tv_to_true"]["mean"] < 1e-12 for r in infer)
    # a pool of one permutation: the memoriser is one-hot from the first key, so far from the true prior
    assert memo[0]["tv_to_true"]["mean"] > 0.5 and memo[0]["pool_oracle_tv_fresh"]["mean"] > 0.05
    # the pool oracle on fresh permutations falls back on the true prior once no member agrees, so it is far
    # closer there than to the true prior in the pool (where every context agrees with a member)
    assert memo[0]["pool_oracle_tv_fresh"]["mean"] < memo[0]["tv_to_true"]["mean"]
    assert len(doc["missing"]) == 10 * 3 + 10 + 10  # mamba entirely, seed 2 of the others
    assert main(["diversity", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "transformer: closer to the true prior than to the pool at no finite pool size made so far" in out
    assert (tmp_path / "quick" / "diversity.png").read_bytes()[:4] == b"\x89PNG"
    assert "| ∞ |" in (tmp_path / "quick" / "diversity.md").read_text()
    assert json.loads((tmp_path / "quick" / "diversity.json").read_text())["summary"]["lstm"]["inferring_from"] == 1


def test_diversity_refuses_a_missing_results_folder(tmp_path: Path) -> None:
    assert main(["diversity", "--results", str(tmp_path / "nope")]) == 2


def test_the_hmm_sweep_reads_its_own_cells(tmp_path: Path, capsys) -> None:
    """HMM cells scored by the exact filter: the pool's posterior is the true prior's (the matrices are in the
    header), so the filter is as good on fresh HMMs as on the pool's and generalises from the smallest pool."""
    for size in (*grid.POOL_SIZES[:3], None):
        column = "hmm" if size is None else f"hmm_pool_{size}"
        name, params = grid.task_spec(column, "quick")
        task = tasks.make(name, **{**params, "K": 4})
        result = evaluate(tasks.oracle(task), task, n=20, seed=7, n_boot=10)
        RunDir(tmp_path / "quick" / "cells" / f"{column}-mamba-s0").write_eval(result.to_dict())
    doc = diversity.summarise(tmp_path, sweep="hmm")
    rows = doc["rows"]["mamba"]
    assert [r["pool"] for r in rows] == [*grid.POOL_SIZES[:3], None]
    assert all(r["kl_to_pool"]["mean"] < 1e-12 and r["kl_fresh"]["mean"] < 1e-12 for r in rows)
    assert doc["summary"]["mamba"]["generalises_from"] == 1
    assert main(["diversity", "--results", str(tmp_path)]) == 0
    assert "mamba (HMM): KL on fresh HMMs within 2x of the pool's from pool size 1" in capsys.readouterr().out
    assert (tmp_path / "quick" / "diversity_hmm.png").read_bytes()[:4] == b"\x89PNG"
    assert "| ∞ | 1 |" in (tmp_path / "quick" / "diversity_hmm.md").read_text()


@pytest.mark.parametrize("kl", [[None, float("nan")], [0.0, 0.0], [float("inf"), 0.1]], ids=["not computed", "zero", "infinite"])
def test_the_hmm_sweeps_figure_draws_cells_whose_kl_is_not_finite_or_not_positive(kl: list, tmp_path: Path) -> None:
    """A diverged cell's KL (NaN), one not computed (``None``) or one at 0: the figure is drawn (a log axis cannot show
    them; it leaves them out and says so) instead of failing."""
    rows = {"transformer": [{"pool": p, "kl_to_pool": {"mean": kl[0]}, "kl_fresh": {"mean": kl[1]}} for p in (4, 16, None)]}
    path = diversity.figure_hmm({"pool_sizes": [4, 16], "rows": rows}, tmp_path / "hmm.png")
    assert path.is_file() and path.stat().st_size > 0
