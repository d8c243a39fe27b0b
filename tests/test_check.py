"""``windtunnel check``: the evidence of named claims regenerated in a folder of one's own and judged there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from windtunnel.claims import CLAIMS
from windtunnel.errors import InvalidValue
from windtunnel.orchestration import check

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"


def test_a_check_plans_exactly_the_cells_its_claims_declare() -> None:
    scale = check.Scale(steps=40, seeds=1)
    planned = check.jobs(["A1", "B1"], "quick", scale)
    want = {(n.preset or "quick", n.name, n.arch) for cid in ("A1", "B1") for n in CLAIMS[cid].cells}
    got = {(j.cell.preset, j.cell.column, j.cell.arch) for jobs in planned.values() for j in jobs}
    assert got == want and ("paper", "main_paper_size", "transformer") in got  # B1's papers'-size cell at its preset
    for jobs in planned.values():
        for j in jobs:
            assert j.cell.seed == 0 and j.cell.config()["steps"] == 40
            assert j.analyze == any(n.analysed for cid in ("A1", "B1") for n in CLAIMS[cid].cells if n.name == j.cell.column)
    full = check.jobs(["A1"], "quick", check.Scale())
    assert {j.cell.seed for j in full["quick"]} == {0, 1, 2}
    assert {j.cell.config()["steps"] for j in full["quick"]} == {3000, 30000}  # each recipe's own


def test_a_scale_says_what_it_is_and_refuses_nonsense() -> None:
    assert check.Scale().committed and "committed" in check.Scale().text()
    assert check.Scale(300, 1).text() == "laptop scale: 300 steps a cell, 1 seed"
    for bad in ({"steps": 0}, {"seeds": 0}, {"seeds": 4}):
        with pytest.raises(InvalidValue):
            check.Scale(**bad)
    with pytest.raises(InvalidValue, match="unknown claim"):
        check.jobs(["A1", "Z99"], "quick", check.Scale())


def test_a_check_trains_judges_and_compares_with_the_committed_verdict(tmp_path: Path) -> None:
    """A3 (the main job's KL in nats) checked on one seed trained 20 steps: its cell is written under the check's
    folder through the reproduction's own code, judged there, and the committed verdict is read beside it; a second
    run trains nothing."""
    scale = check.Scale(steps=20, seeds=1)
    worked, checked = check.check(["A3"], tmp_path, "quick", scale, RESULTS, workers=1, threads=1)
    assert worked == {"quick": ["main-transformer-s0"]}
    cell = tmp_path / "quick" / "cells" / "main-transformer-s0"
    assert (cell / "eval.json").is_file() and not (RESULTS / "quick" / "cells" / "main-transformer-s0" / "x").exists()
    (one,) = checked
    assert one.claim == "A3" and one.committed_word == "agree"
    # 20 steps leave the model far from the posterior: the papers' 0.01 nats is not met there
    assert one.word.startswith("disagree") and "laptop scale: 20 steps a cell, 1 seed" in one.line(scale)
    again, _ = check.check(["A3"], tmp_path, "quick", scale, RESULTS, workers=1, threads=1)
    assert again == {"quick": []}


def test_the_command_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    for argv in (["check", "Z99", "--out", str(tmp_path / "c"), "--dry-run"],
                 ["check", "A1", "--seeds", "9", "--out", str(tmp_path / "c")],
                 ["check", "A1", "--out", str(RESULTS), "--dry-run"]):
        p = subprocess.run([sys.executable, "-m", "windtunnel", *argv], capture_output=True, text=True, cwd=REPO)
        assert p.returncode == 2, (argv, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
        assert p.stdout == "" and not (tmp_path / "c").exists()  # refused before anything is said or written
