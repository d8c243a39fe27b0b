"""``windtunnel table --family sequel``: the model-selection sequel's table (arXiv 2607.19379) from one command —
its own files beside the primitives table's, per-seed values read from the cells' own evaluations, the Bayes oracle
and the context-blind optimum as rows, resume without retraining, committed cells taken, other columns refused."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from windtunnel.cli import main
from windtunnel.errors import InvalidValue
from windtunnel.orchestration.table import FAMILIES, out_of_step, run_table
from windtunnel.orchestration.table_families import SECOND_METRIC
from windtunnel.run import grid

# one class (no class posterior to read), then two; then the opaque arithmetic, whose header states a relabelling
COLUMNS = ["ms_involution_integer", "ms_arith_integer", "ms_arith_opaque"]
ARCHS = ["mlp"]
SEEDS = 2
STEPS = 2
EVAL_N = 16
KW: dict[str, Any] = dict(family="sequel", preset="quick", tasks=COLUMNS, archs=ARCHS, seeds=SEEDS, steps=STEPS,
                          eval_n=EVAL_N, workers=1)
PRIMITIVES_FILES = {"table.json": json.dumps({"meta": {}, "cells": []}), "table.md": "| a primitives table |\n",
                    "references.json": json.dumps({"hmm": {"key": {"eval_n": 1}}})}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One sequel table (two columns × mlp × two seeds, a few steps) in a folder that already holds the files of a
    primitives table, which the sequel table must leave as they are."""
    out = tmp_path_factory.mktemp("sequel") / "quick"
    out.mkdir()
    for name, text in PRIMITIVES_FILES.items():
        (out / name).write_text(text)
    run_table(out=out, **KW)
    return out


def _eval_value(out: Path, column: str, arch: str, seed: int, metric: str) -> float:
    return json.loads((out / "runs" / f"{column}-{arch}-s{seed}" / "eval.json").read_text())["metrics"][metric]["value"]


def _same(a: float | None, b: float | None) -> bool:
    """Equal, or both without a value (NaN in a cell's summary is ``null`` in its eval.json)."""
    def none(x: float | None) -> bool:
        return x is None or math.isnan(x)

    return a == b or (none(a) and none(b))


@pytest.mark.slow  # one real sequel table, trained and evaluated: its module fixture
def test_the_sequel_table_writes_its_own_files_and_leaves_the_primitives_table_alone(made: Path) -> None:
    for name in ("sequel_table.md", "sequel_table.html", "sequel_table.json", "sequel_references.json"):
        assert (made / name).is_file(), name
    for name, text in PRIMITIVES_FILES.items():  # neither written nor overwritten
        assert (made / name).read_text() == text, name
    assert not (made / "table.html").exists()
    table = json.loads((made / "sequel_table.json").read_text())
    assert table["meta"]["family"] == "sequel"
    assert table["meta"]["command"].startswith("windtunnel table --family sequel --preset quick --seeds 2")
    assert [(c["task"], c["arch"]) for c in table["cells"]] == [(c, a) for c in COLUMNS for a in ARCHS]
    page = (made / "sequel_table.html").read_text()
    assert "<title>windtunnel: sequel table</title>" in page and "inference-primitives" not in page
    assert "inference primitive" not in page.split("</h1>")[0]


@pytest.mark.slow  # one real sequel table, trained and evaluated: its module fixture
def test_per_seed_values_are_each_cells_own_evaluation(made: Path) -> None:
    table = json.loads((made / "sequel_table.json").read_text())
    md = (made / "sequel_table.md").read_text()
    for c in table["cells"]:
        assert c["seeds"] == list(range(SEEDS))
        for metric in (grid.experiment(c["task"]).metric, SECOND_METRIC):
            got = c["metrics"][metric]["values"]
            want = [_eval_value(made, c["task"], c["arch"], s, metric) for s in range(SEEDS)]
            assert all(_same(g, w) for g, w in zip(got, want, strict=True)), (c["task"], metric, got, want)
        kl = c["metrics"]["kl"]
        mean = statistics.fmean(kl["values"])
        assert kl["mean"] == pytest.approx(mean)
        shown = f"{mean:.2e}" if abs(mean) < 1e-2 else f"{mean:.3f}"
        row = next(line for line in md.splitlines() if line.startswith(f"| {c['arch']} |"))
        assert f"{shown} [" in row  # mean [95% interval across seeds]


@pytest.mark.slow  # one real sequel table, trained and evaluated: its module fixture
def test_reference_rows_and_the_class_posterior_block(made: Path) -> None:
    table = json.loads((made / "sequel_table.json").read_text())
    refs = json.loads((made / "sequel_references.json").read_text())
    assert json.dumps(refs, sort_keys=True) == json.dumps(table["references"], sort_keys=True)  # NaN-safe
    assert set(refs) == set(COLUMNS)
    for col in COLUMNS:
        assert refs[col]["key"] == {"eval_n": EVAL_N}
        assert abs(refs[col]["oracle"]["metrics"]["kl"]) < 1e-12  # the Bayes answer, 0 by construction
        blind = refs[col]["context_blind"]["metrics"]["kl"]
        assert math.isfinite(blind) and blind > refs[col]["oracle"]["metrics"]["kl"]
    # one class: nothing to select, no position identifies class weights; two classes: the oracle reads them exactly
    assert math.isnan(refs["ms_involution_integer"]["oracle"]["metrics"][SECOND_METRIC])
    assert abs(refs["ms_arith_integer"]["oracle"]["metrics"][SECOND_METRIC]) < 1e-9
    md = (made / "sequel_table.md").read_text()
    head = md.splitlines()[0]
    assert f"ms_arith_integer {SECOND_METRIC}" in head and f"ms_involution_integer {SECOND_METRIC}" not in head
    rows = [line.split(" | ")[0].strip("| ") for line in md.splitlines()[2:] if line.startswith("| ")]
    assert rows == [*ARCHS, "Bayes oracle", "context-blind optimum", "header-blind optimum"]
    # the header-blind optimum: only where the header states a relabelling, between Bayes and the context-blind floor
    assert [c for c in COLUMNS if "header_blind" in refs[c]] == ["ms_arith_opaque"]
    m = refs["ms_arith_opaque"]
    assert 0.1 < m["header_blind"]["metrics"]["kl"] < m["context_blind"]["metrics"]["kl"]
    blind_row = next(line for line in md.splitlines() if line.startswith("| header-blind optimum |")).split(" | ")
    assert blind_row[1:3] == ["0", "—"] and blind_row[3] == "—" and blind_row[4] != "—"  # shown in its column alone
    widths = {len(line.split(" | ")) for line in md.splitlines() if line.startswith("| ")}
    assert len(widths) == 1  # every row fills the head
    for words in ("bits against the exact posterior", "class_posterior_mae", "Training time of all cells",
                  "this invocation", "Command: `windtunnel table --family sequel"):
        assert words in md, words


@pytest.mark.slow  # one real sequel table, trained and evaluated: its module fixture
def test_a_second_invocation_reuses_the_cells_and_a_committed_cell_is_taken(
        made: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from windtunnel.orchestration import reproduce
    from windtunnel.run.runs import RunDir

    out = tmp_path / "quick"
    shutil.copytree(made, out)
    first = json.loads((out / "sequel_table.json").read_text())
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/eval.json")}
    assert len(stamps) == len(COLUMNS) * len(ARCHS) * SEEDS
    capsys.readouterr()
    run_table(out=out, **KW)
    said = capsys.readouterr().out
    n = len(stamps)
    assert f"resuming the table: {n} of {n} cells finished earlier are reused, 0 to work" in said
    assert "  done " not in said
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/eval.json")} == stamps  # nothing retrained
    again = json.loads((out / "sequel_table.json").read_text())
    assert again["meta"]["cells_reused"] == n
    assert json.dumps([c["metrics"] for c in again["cells"]]) == json.dumps([c["metrics"] for c in first["cells"]])

    # the run folders gone, the cells reproduce committed (same recipe, same evaluation) are taken in their place
    column, arch = COLUMNS[-1], ARCHS[0]
    refs = json.loads((out / "sequel_references.json").read_text())[column]
    cells = [grid.Cell("quick", column, arch, seed, None, STEPS) for seed in range(SEEDS)]
    for cell in cells:
        RunDir(out / "runs" / cell.folder).write_references({k: v for k, v in refs.items() if k != "key"})
        assert reproduce.export(reproduce.Job(cell, analyze=False), tmp_path) == out / "cells" / cell.folder
        shutil.rmtree(out / "runs" / cell.folder)
    run_table(out=out, **KW)
    assert not any((out / "runs" / cell.folder).exists() for cell in cells)  # not retrained
    taken = json.loads((out / "sequel_table.json").read_text())
    c = next(c for c in taken["cells"] if (c["task"], c["arch"]) == (column, arch))
    committed = out / "cells" / cells[0].folder
    assert c["run_dirs"] == [str(out / "cells" / cell.folder) for cell in cells]
    want = json.loads((committed / "eval.json").read_text())["metrics"]["kl"]["value"]
    assert c["metrics"]["kl"]["values"][0] == want
    assert taken["meta"]["cells_reused"] == taken["meta"]["cells"]
    assert out_of_step(out, "sequel_table.json") == []
    # a committed seed retrained since (its eval.json changed): the sequel table is out of step with it
    doc = json.loads((committed / "eval.json").read_text())
    doc["metrics"]["kl"]["value"] = want + 1.0
    (committed / "eval.json").write_text(json.dumps(doc))
    assert out_of_step(out, "sequel_table.json") == [cells[0].folder]
    assert out_of_step(out) == []  # the primitives table.json holds no such cell


def test_a_column_of_the_other_family_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "t"
    assert main(["table", "--family", "sequel", "--tasks", "hmm", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "'hmm'" in err and "--family primitives" in err
    assert main(["table", "--tasks", COLUMNS[0], "--out", str(out)]) == 2  # the default family is primitives
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and COLUMNS[0] in err and "--family sequel" in err
    assert not out.exists()  # refused before the folder is touched
    with pytest.raises(InvalidValue, match="unknown table family"):
        run_table(family="nope", out=out)
    with pytest.raises(InvalidValue, match="transformer alone"):
        run_table(family="sequel", tasks=["ms_arith_opaque_facts"], archs=["mlp"], out=out)


def test_force_protects_the_familys_own_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A finished primitives table.json does not stop the sequel table (it is refused here for its column, past the
    keep-result check); a finished sequel_table.json does, without --force."""
    (tmp_path / "table.json").write_text("{}")
    assert main(["table", "--family", "sequel", "--tasks", "recall", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already holds a finished result" not in err and "recall" in err
    (tmp_path / "sequel_table.json").write_text("{}")
    assert main(["table", "--family", "sequel", "--out", str(tmp_path)]) == 2
    assert "sequel_table.json already holds a finished result" in capsys.readouterr().err


def test_the_sequel_family_is_the_cells_reproduce_trains() -> None:
    from windtunnel.orchestration import reproduce

    fam = FAMILIES["sequel"]
    assert list(fam.columns) == list(grid.SEQUEL_COLUMNS) and fam.archs == grid.SEQUEL_ARCHS
    assert [(c, a) for c in fam.columns for a in fam.archs if fam.has_cell(c, a)] == list(reproduce.SEQUEL_CELLS)
    assert all(fam.columns[c]["metric"] == grid.experiment(c).metric for c in fam.columns)
    prim = FAMILIES["primitives"]
    assert list(prim.columns) == list(grid.TABLE_COLUMNS) and prim.archs == grid.TABLE_ARCHS
    assert not set(prim.columns) & set(fam.columns)
