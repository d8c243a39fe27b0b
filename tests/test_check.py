"""``windtunnel check``: the evidence of named claims regenerated in a folder of one's own and judged there."""

from __future__ import annotations

import json
import os
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_command_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    for argv in (["check", "Z99", "--out", str(tmp_path / "c"), "--dry-run"],
                 ["check", "A1", "--seeds", "9", "--out", str(tmp_path / "c")],
                 ["check", "A1", "--out", str(RESULTS), "--dry-run"]):
        p = subprocess.run([sys.executable, "-m", "windtunnel", *argv], capture_output=True, text=True, cwd=REPO)
        assert p.returncode == 2, (argv, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
        assert p.stdout == "" and not (tmp_path / "c").exists()  # refused before anything is said or written


class _Restricted(check.Evidence):
    """The committed results with each cell's ``geometry.json`` cut down to the diagnostics in ``keep``."""

    def __init__(self, root: Path, keep: check.Diagnostics, preset: str = "quick") -> None:
        super().__init__(root, preset)
        self.keep = keep

    def at(self, preset: str) -> "_Restricted":
        if preset == self.preset:
            return self
        return self._presets.setdefault(preset, _Restricted(self.root, self.keep, preset))  # type: ignore[return-value]

    def json(self, rel: str):  # type: ignore[no-untyped-def]
        doc = super().json(rel)
        m = check._GEOMETRY.fullmatch(rel)
        if m is None or not isinstance(doc, dict):
            return doc
        keep = self.keep.get((m["preset"], m["column"], m["arch"]), set())
        names = {k for k in doc if k not in ("summary", "interpretation", "meta")}
        return {k: v for k, v in doc.items() if k not in names or k in keep} | {
            "summary": {k: v for k, v in doc["summary"].items() if k.partition(".")[0] in keep}}


@pytest.mark.slow
def test_what_a_check_analyses_is_everything_its_claims_read() -> None:
    """Each claim, assessed on the committed results with every geometry.json cut down to the diagnostics
    ``diagnostics_read`` finds it reads, comes to the same outcome and number as on the whole records: nothing a
    claim reads escapes the reader, so a check that analyses only those loses nothing."""
    read_any = 0
    for cid, claim in CLAIMS.items():
        if not any(n.analysed for n in claim.cells):
            continue
        keep = check.diagnostics_read([cid], RESULTS)
        whole, cut = claim.assess(check.Evidence(RESULTS)), claim.assess(_Restricted(RESULTS, keep))
        assert (cut.kind, cut.ours_text) == (whole.kind, whole.ours_text), cid
        read_any += bool(keep)
    assert read_any >= 20
    b1 = check.diagnostics_read(["B1"], RESULTS)
    assert b1[("quick", "main", "transformer")] == {"key_orthogonality"}
    assert b1[("paper", "main_paper_size", "transformer")] == {"key_orthogonality"}


@pytest.mark.slow
def test_a_check_analyses_what_its_claims_read_and_what_its_own_cells_lead_them_to(tmp_path: Path) -> None:
    """B7 (the value manifold of the bijection-with-replacement cell) checked on one seed trained 20 steps, told
    that its claim reads only key_orthogonality: its cell is analysed with that, the claim then reads value_manifold
    of the check's own cell, so a second round analyses that too — and nothing else — before the claim is judged."""
    cell = ("quick", "bijection_replacement", "transformer")
    scale = check.Scale(steps=20, seeds=1)
    planned = check.jobs(["B7"], "quick", scale, {cell: {"key_orthogonality"}})
    assert [j.diagnostics for j in planned["quick"]] == [("key_orthogonality",)]
    worked, (one,) = check.check(["B7"], tmp_path, "quick", scale, RESULTS, workers=1, threads=1,
                                 diagnostics={cell: {"key_orthogonality"}})
    assert worked == {"quick": ["bijection_replacement-transformer-s0"]}
    doc = json.loads((tmp_path / "quick" / "cells" / "bijection_replacement-transformer-s0" / "geometry.json").read_text())
    analysed = {k for k in doc if k not in ("summary", "interpretation", "meta")}
    assert analysed == {"key_orthogonality", "value_manifold"}
    assert one.claim == "B7" and one.word != "not measured" and one.committed_word


@pytest.mark.slow
def test_the_laptop_check_benchmark_times_a_real_check_and_keeps_its_verdicts(tmp_path: Path) -> None:
    """``benchmarks/check_laptop.py`` runs the check in a new folder and records its wall time, what it printed and
    each cell's own seconds; bad input is one line and exit 2."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import check_laptop

    record = tmp_path / "check.json"
    assert check_laptop.main(["--claims", "A3", "--steps", "20", "--workers", "1", "--record", str(record)]) == 0
    doc = json.loads(record.read_text())
    assert doc["command"] == "windtunnel check A3 --steps 20 --seeds 1 --out <new folder> --results results --workers 1"
    assert any(line.startswith("A3 at laptop scale: 20 steps a cell, 1 seed:") for line in doc["printed"])
    (cell,) = doc["cells"]
    assert cell == "quick/main-transformer-s0" and doc["cells"][cell]["train_s"] > 0
    assert doc["wall_s"] >= doc["cells"][cell]["train_s"] and doc["cores"] == os.cpu_count()
    (tmp_path / "file").write_text("")
    assert check_laptop.main(["--record", str(tmp_path / "file" / "x.json")]) == 2
