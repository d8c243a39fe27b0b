"""The tracked tree stays light: every command on a lent GPU machine copies the whole working tree there (64 MiB
in all, with whatever else is carried), so the repository must stay well under that as committed cells accumulate.

The limit is checked on the files ``git ls-files`` names; the committed cells are checked to be in the light form
:meth:`windtunnel.run.runs.RunDir.export` writes (compact JSON tables, the training log gzip-compressed), which
keeps every number bit for bit; and the readers of a cell's training log are checked to read the packed form.
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from windtunnel.run.runs import RunDir, RunError, dump_record, lighten, read_jsonl, read_stored_text, stored

REPO = Path(__file__).parents[1]
LIMIT_MIB = 35
"""The most the tracked tree may weigh, in MiB: what a lent GPU machine receives with every command (64 MiB in
all) less room for a virtual environment or build folder carried beside it."""
LIGHTEN = ("python -c 'import sys; from windtunnel.run.runs import lighten; [lighten(d) for d in sys.argv[1:]]' "
           "results/quick/cells/FOLDER …")
"""The command that rewrites cell folders exported by an older windtunnel the light way (numbers untouched)."""


def _tracked(*pathspec: str) -> list[str]:
    """The paths ``git ls-files`` names under ``REPO`` (restricted to ``pathspec``); the test is skipped outside a
    git checkout (an unpacked sdist, a copy without ``.git``)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    done = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--", *pathspec], capture_output=True)
    if done.returncode != 0 or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    return [p for p in done.stdout.decode().split("\0") if p]


def _heaviest_folders(sizes: dict[str, int], depth: int = 3, top: int = 8) -> str:
    """The ``top`` folders (paths cut to ``depth`` parts) holding the most bytes of ``sizes``, as MiB."""
    by = Counter[str]()
    for path, size in sizes.items():
        parts = path.split("/")
        by["/".join(parts[:min(depth, len(parts) - 1)]) or "."] += size
    return ", ".join(f"{folder}/ {size / 2**20:.1f} MiB" for folder, size in by.most_common(top))


def test_the_tracked_tree_stays_under_its_limit() -> None:
    """The files git tracks (as they are in the working tree; one deleted there counts nothing) weigh at most
    :data:`LIMIT_MIB`."""
    sizes = {}
    for rel in _tracked():
        path = REPO / rel
        if path.is_file() or path.is_symlink():
            sizes[rel] = path.lstat().st_size
    total = sum(sizes.values())
    assert total <= LIMIT_MIB * 2**20, (
        f"the tracked tree weighs {total / 2**20:.1f} MiB, over its {LIMIT_MIB} MiB (it travels to the GPU machine "
        f"with every command); heaviest folders: {_heaviest_folders(sizes)}. Cells exported by an older windtunnel "
        f"are made light by {LIGHTEN}; a regenerable file need not be committed twice")


def test_the_committed_cells_are_light() -> None:
    """Every tracked cell folder holds its training log as ``metrics.jsonl.gz`` and its tables as compact JSON:
    what ``windtunnel reproduce`` exports, so a cell committed heavy (by an older exporter) is caught here."""
    tracked = _tracked("results/*/cells/*")
    if not tracked:
        pytest.skip("no committed cells")
    heavy = sorted({str(Path(p).parent) for p in tracked if Path(p).name == RunDir.METRICS and (REPO / p).is_file()})
    for rel in tracked:
        name = Path(rel).name
        if name in RunDir.TABLES and (REPO / rel).is_file():
            text = (REPO / rel).read_text()
            if text != dump_record(json.loads(text)):
                heavy.append(rel)
    assert not heavy, (f"{len(heavy)} committed cell files are not in the light form RunDir.export writes "
                       f"(first: {', '.join(heavy[:5])}); rewrite their folders with {LIGHTEN}")


# --- the light form keeps every number, and every reader reads it ----------------------------------------------
def _same(a: Any, b: Any, where: str = "") -> None:
    """``a`` and ``b`` are the same JSON value exactly: the same types, the same key order, each float the same
    64 bits (a NaN equal to a NaN, ``-0.0`` not equal to ``0.0``)."""
    assert type(a) is type(b), where
    if isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b), f"{where}: {a!r} != {b!r}"
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


# floats whose shortest repr is long, tiny, huge, negative zero, and a NaN (eval.json admits one); a big integer
AWKWARD = [0.1, 1 / 3, 2 / 3 * 1e-7, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -0.0, 123456789.0,
           0.033592769537730466, 2**63 + 1]
LOG = [{"step": 25, "loss": 3.3300323074921234, "bayes_gap": 0.9071901197912737, "lr": 0.00025, "time": 6.0970727},
       {"step": 50, "loss": 1 / 3, "bayes_gap": 5e-324, "lr": 1e-05, "time": 11.732025751989568},
       {"step": 50, "eval": {"accuracy": 0.22135416666666666, "kl": 0.008066434458497994}}]


def _old_run(folder: Path) -> RunDir:
    """A run folder as an older windtunnel wrote it: indented tables, a plain training log."""
    run = RunDir(folder)
    run.prepare()
    records = {
        RunDir.EVAL: {"metrics": {"kl": {"value": AWKWARD[1], "ci": [AWKWARD[2], math.nan]}}, "curves": {"kl": AWKWARD},
                      "n": 3},
        RunDir.GEOMETRY: {"summary": {"a.b": AWKWARD[0], "c": "[0.0845, 0.205]"}, "meta": {"step": 2}, "pts": AWKWARD[:-1]},
        RunDir.REFERENCES: {"window_1": {"metrics": {"kl": AWKWARD[4]}}},
        RunDir.CELL: {"task": "recall", "arch": "lstm", "seed": 0, "metrics": {"kl": AWKWARD[7]}},
    }
    for name, record in records.items():
        (folder / name).write_text(json.dumps(record, indent=1))
    (folder / RunDir.CONFIG).write_text(json.dumps({"train": {"lr": 0.001}}, indent=2))
    (folder / RunDir.TIMINGS).write_text(json.dumps({"train_s": 650.0340642219817}, indent=1))
    for row in LOG:
        run.append_metrics(row)
    return run


def _parsed(folder: Path) -> dict[str, Any]:
    """Every record of a run or cell folder, parsed (the log from whichever form is there)."""
    out = {n: json.loads((folder / n).read_text()) for n in RunDir.TABLES + (RunDir.CONFIG, RunDir.TIMINGS)}
    out[RunDir.METRICS] = read_jsonl(folder / RunDir.METRICS)
    return out


def test_export_writes_the_light_form_with_every_number_bit_for_bit(tmp_path: Path) -> None:
    run = _old_run(tmp_path / "run")
    before = _parsed(run.path)
    log = run.metrics_path.read_bytes()
    cell = tmp_path / "cell"
    (cell).mkdir()
    (cell / RunDir.METRICS).write_text("an older export's plain log\n")  # replaced, not kept beside the packed one
    names = RunDir.TABLES + (RunDir.CONFIG, RunDir.METRICS)
    assert run.export(cell, names) == cell
    assert not (cell / RunDir.METRICS).exists() and gzip.decompress((cell / RunDir.METRICS_PACKED).read_bytes()) == log
    for name in RunDir.TABLES:  # compact: what dump_record writes, and lighter than the indented original
        text = (cell / name).read_text()
        assert text == dump_record(json.loads(text)) and len(text) < len((run.path / name).read_text())
    for name in (RunDir.CONFIG, RunDir.TIMINGS):  # read by people: byte for byte
        assert (cell / name).read_bytes() == (run.path / name).read_bytes()
    _same(_parsed(cell), before)
    assert RunDir(cell).metrics() == run.metrics() and RunDir(cell).training_seconds() == run.training_seconds()
    assert RunDir(cell).log_path.name == RunDir.METRICS_PACKED
    light = {p.name: p.read_bytes() for p in cell.iterdir()}
    run.export(cell, names)  # the same run exported again: the same bytes (git sees no change)
    assert {p.name: p.read_bytes() for p in cell.iterdir()} == light
    assert sorted(lighten(cell)) == sorted(RunDir.TABLES + (RunDir.METRICS,))  # already light: unchanged
    assert {p.name: p.read_bytes() for p in cell.iterdir()} == light


def test_lighten_rewrites_an_old_cell_in_place_to_what_export_writes(tmp_path: Path) -> None:
    old = _old_run(tmp_path / "old")
    before = _parsed(old.path)
    exported = old.export(tmp_path / "exported", RunDir.TABLES + (RunDir.CONFIG, RunDir.METRICS))
    lighten(old.path)
    _same(_parsed(old.path), before)
    assert {p.name: p.read_bytes() for p in old.path.iterdir()} == {p.name: p.read_bytes() for p in exported.iterdir()}


def test_the_log_readers_take_the_packed_form(tmp_path: Path) -> None:
    """``stored``/``read_stored_text`` (and so ``read_jsonl``, ``RunDir.metrics``, the claims' ``Evidence.text`` and
    the docs' ``rows:`` facts) read ``metrics.jsonl.gz`` where ``metrics.jsonl`` is named; the plain file wins
    where both are there; a packed file that does not decompress is a one-line error."""
    from windtunnel.claims import docs
    from windtunnel.claims.evidence import Evidence

    folder = tmp_path / "quick" / "cells" / "recall-lstm-s0"
    _old_run(tmp_path / "run").export(folder, (RunDir.METRICS,))
    plain = folder / RunDir.METRICS
    assert stored(plain) == folder / RunDir.METRICS_PACKED and stored(tmp_path / "none.jsonl") is None
    text = read_stored_text(plain)
    assert [json.loads(x) for x in text.splitlines()] == LOG == read_jsonl(plain)
    assert Evidence(tmp_path).text("quick/cells/recall-lstm-s0/metrics.jsonl") == text
    assert Evidence(tmp_path).text("quick/cells/recall-lstm-s1/metrics.jsonl") is None
    assert docs.fact("first:rows:quick/cells/recall-lstm-s0/metrics.jsonl:eval.accuracy>0.2:step",
                     Evidence(tmp_path), {}) == "50"
    plain.write_text(json.dumps(LOG[0]) + "\n")
    assert read_jsonl(plain) == LOG[:1]  # an older exporter's plain log beside the packed one is the newer
    plain.unlink()
    (folder / RunDir.METRICS_PACKED).write_bytes(gzip.compress(text.encode())[:20])
    with pytest.raises(RunError, match="metrics.jsonl.gz is damaged"):
        read_jsonl(plain)
    with pytest.raises(FileNotFoundError):
        read_stored_text(tmp_path / "none.jsonl")


def test_reproduce_counts_a_packed_log_as_committed(tmp_path: Path) -> None:
    """A cell whose log is committed as ``metrics.jsonl.gz`` misses nothing; without any log it misses the log."""
    from windtunnel.orchestration import reproduce, table
    from windtunnel.run import grid

    job = reproduce.Job(grid.Cell("quick", "recall", "lstm", 0), analyze=False)
    folder = reproduce.cell_dir(tmp_path, job.cell)
    run = _old_run(tmp_path / "run")
    (run.path / RunDir.REFERENCES).write_text(json.dumps({r: {} for r in table.reference_rows("quick", "recall")}))
    run.export(folder, reproduce.ARTIFACTS)
    assert (folder / RunDir.METRICS_PACKED).is_file() and reproduce.missing(job, tmp_path) == []
    (folder / RunDir.METRICS_PACKED).unlink()
    assert reproduce.missing(job, tmp_path) == [RunDir.METRICS]
