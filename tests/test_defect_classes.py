"""Tests generated over each class of defect the bad-input corpus found one case of (issue 49, item 5), so that
the class stays closed rather than only the case:

* every integer parameter of every task (and ``tasks show --seed``) at its extremes;
* every command that reads a run folder, on a run whose training diverged;
* every JSON artifact of a run folder with a field of the wrong type or shape.

Each case either works (exit 0) or is refused in one line with exit status 2 — never a traceback (exit 1), a
hang or a huge allocation — and a refusal leaves what is on disk as it was.  The registries generate the
cases (tasks, their dataclass fields, the CLI's commands, the files a run folder holds), so a new task, field,
command or artifact is covered without an edit here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from windtunnel import tasks
from windtunnel.cli import COMMANDS, main, make_parser
from windtunnel.errors import InvalidValue
from windtunnel.run.runs import RunDir
from windtunnel.training.loop import TrainConfig

from contracts import diverged_training

CASE_SECONDS = 10.0
"""What one generated case may take at most: a legal extreme value that takes longer is a size the code
should refuse with a limit, not compute (a hang is caught here rather than by the CI's timeout)."""

ANALYZE_SECONDS = 90.0
"""The same bound for ``analyze``, which runs every registered diagnostic on the run (over twenty, some of them
fitting probes and lenses by layer): a generous bound that still tells a hang from a slow, contended machine."""


def one_line_or_works(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """Run the CLI: it must exit 0, or 2 with exactly one ``windtunnel: error:`` line on stderr, within
    :data:`CASE_SECONDS` (``analyze``: :data:`ANALYZE_SECONDS`); returns ``(code, stdout, stderr)``."""
    start = time.perf_counter()
    code = main(argv)
    took = time.perf_counter() - start
    out, err = capsys.readouterr()
    assert code in (0, 2), (argv, code, err[-2000:])
    assert "Traceback" not in err, (argv, err[-2000:])
    if code == 2:
        assert err.startswith("windtunnel: error:") and "\n" not in err.strip(), (argv, err)
    assert took < (ANALYZE_SECONDS if argv[:1] == ["analyze"] else CASE_SECONDS), (argv, f"{took:.1f} s")
    return code, out, err


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (the lock aside) by its content's hash."""
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != RunDir.LOCK}


# --- 1. every integer parameter of every task at its extremes ------------------------------------------
EXTREMES = (0, 1, -1, 2**31 - 1, 2**31, 2**63, 10**30)
"""The values every integer is tried at, besides one past its documented maximum."""

SEED_EXTREMES = (0, 1, -1, 2**31 - 1, 2**31, 2**63, 10**30)


def int_fields(name: str) -> list[dataclasses.Field]:
    """The integer fields of task ``name``'s dataclass (``int`` and ``int | None``)."""
    return [f for f in dataclasses.fields(tasks.get(name)) if re.fullmatch(r"int( \| None)?", str(f.type))]


def documented_maximum(name: str, field: str) -> int | None:
    """The largest value task ``name``'s own refusal of a huge ``field`` names (``[a, b]``, ``[a, 2^k]`` or
    ``[a, 2^k)``, the other parameters at their defaults); ``None`` where it names no number."""
    try:
        tasks.make(name, **{field: 10**30})
    except InvalidValue as exc:
        text = str(exc)
    else:
        return None
    found = re.findall(r"\[[^\[\]]*?, (\d+)\]|\[[^\[\]]*?, 2\^(\d+)([\])])", text)
    if not found:
        return None
    plain, power, bracket = found[-1]
    return int(plain) if plain else 2 ** int(power) - (1 if bracket == ")" else 0)


def task_extreme_cases() -> list[tuple[str, str, int]]:
    """``(task, field, value)``: every integer field of every task at :data:`EXTREMES` and one past its
    documented maximum."""
    out = []
    for name in tasks.names():
        for f in int_fields(name):
            top = documented_maximum(name, f.name)
            values = EXTREMES + ((top + 1,) if top is not None and top + 1 not in EXTREMES else ())
            out += [(name, f.name, v) for v in values]
    return out


def test_the_generator_finds_every_integer_field_and_its_maximum() -> None:
    """The cases reach every task and every integer field, and most fields' documented maxima are read (a
    refusal that stops naming its range would silently drop the just-past-the-maximum cases)."""
    fields = {(n, f.name) for n in tasks.names() for f in int_fields(n)}
    assert {(n, f) for n, f, _ in task_extreme_cases()} == fields
    assert {n for n, _ in fields} == {n for n in tasks.names() if int_fields(n)}
    with_max = [nf for nf in fields if documented_maximum(*nf) is not None]
    assert len(with_max) >= 0.8 * len(fields), sorted(fields - set(with_max))


@pytest.mark.parametrize("name,field,value", task_extreme_cases())
@pytest.mark.slow
def test_an_integer_task_parameter_at_an_extreme(name: str, field: str, value: int,
                                                 capsys: pytest.CaptureFixture) -> None:
    """``tasks show NAME --FIELD VALUE`` at an extreme works, or is refused in one line naming the field (or
    the parameter it is checked against): never a traceback, a hang or a huge allocation."""
    code, _, err = one_line_or_works(["tasks", "show", name, f"--{field}", str(value)], capsys)
    if code == 2:
        assert re.search(rf"\b{re.escape(field)}\b", err), (name, field, value, err)
    top = documented_maximum(name, field)
    if top is not None and value > top:
        assert code == 2, (name, field, value)  # past the documented maximum: always refused


@pytest.mark.parametrize("name", tasks.names())
@pytest.mark.parametrize("seed", SEED_EXTREMES)
def test_the_seed_of_tasks_show_at_an_extreme(name: str, seed: int, capsys: pytest.CaptureFixture) -> None:
    """``tasks show NAME --seed SEED``: a seed in [0, 2^31) works, any other is refused in one line naming the
    seed."""
    code, _, err = one_line_or_works(["tasks", "show", name, "--seed", str(seed)], capsys)
    assert code == (0 if 0 <= seed < 2**31 else 2), (name, seed, err)
    if code == 2:
        assert "seed" in err


# --- 2. every command on a diverged run ------------------------------------------------------------------
def command_paths() -> list[tuple[str, ...]]:
    """Every command of the CLI's own parser, by the words that name it (``("routing", "law")``): a command
    with actions counts as itself where its actions are optional (``tasks`` lists, ``tasks show`` shows)."""
    def walk(parser: argparse.ArgumentParser, prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or not subs[0].required:
            yield prefix
        for sub in subs:
            for word, child in sub.choices.items():
                yield from walk(child, prefix + (word,))

    return [p for p in walk(make_parser(), ()) if p]


ON_A_RUN: dict[tuple[str, ...], list[str]] = {
    ("train",): ["train", "--resume", "{run}", "--no-progress"],
    ("run",): ["run", "bijection", "--out", "{run}", "--no-progress", "--no-analyze"],
    ("eval",): ["eval", "{run}", "--n", "8"],
    ("report",): ["report", "{run}"],
    ("analyze",): ["analyze", "{run}", "--n", "8"],
    ("routing", "law"): ["routing", "law", "{run}", "--n", "4"],
    ("runs",): ["runs", "{parent}"],
    ("compare",): ["compare", "{run}", "{run}", "--out", "{parent}/compare.png"],
}
"""The commands that read a run folder, each with a command line on the run ``{run}`` (in ``{parent}``)."""

NOT_ON_A_RUN: dict[tuple[str, ...], str] = {
    ("tasks",): "lists the tasks",
    ("tasks", "show"): "samples a task",
    ("table",): "trains its own cells",
    ("routing", "em"): "trains its own arms",
    ("routing", "timescales"): "trains its own runs",
    ("reproduce",): "reads a results folder, not a run",
    ("claims",): "reads a results folder, not a run",
    ("diversity",): "reads a results folder, not a run",
    ("status",): "reads a results folder, not a run",
    ("check",): "trains the named claims' cells in a folder of its own",
    ("llm", "signatures"): "reads a Hugging Face model",
    ("llm", "sula"): "reads a Hugging Face model",
    ("llm", "global"): "reads Hugging Face models",
    ("llm", "matched"): "trains its own language models",
}
"""The commands that take no run folder, with what they read instead."""

RUN_ARGUMENTS = {"run", "runs", "folder", "--resume"}
"""The positional arguments and options that name a run folder (``windtunnel run`` takes one as ``--out``;
``llm matched --runs`` is its own training folder, not a run's)."""


def test_every_command_is_classified_by_whether_it_reads_a_run() -> None:
    """Every command of the parser (the modules of ``COMMANDS``) is either run on the diverged run below or
    named as taking no run folder; one with an argument that names a run folder is run on it."""
    paths = command_paths()
    assert len(COMMANDS) >= 9 and len(paths) == len(set(paths))
    assert set(paths) == set(ON_A_RUN) | set(NOT_ON_A_RUN), (
        "classify: " + ", ".join(" ".join(p) for p in sorted(set(paths) ^ (set(ON_A_RUN) | set(NOT_ON_A_RUN)))))
    assert not set(ON_A_RUN) & set(NOT_ON_A_RUN)

    def parser_of(path: tuple[str, ...]) -> argparse.ArgumentParser:
        parser = make_parser()
        for word in path:
            parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
        return parser

    for path in NOT_ON_A_RUN:
        names = {a.dest for a in parser_of(path)._actions if not a.option_strings}
        names |= {o for a in parser_of(path)._actions for o in a.option_strings}
        assert not names & RUN_ARGUMENTS, (path, names & RUN_ARGUMENTS)


def tiny_config(steps: int) -> TrainConfig:
    """A one-layer transformer on a small bijection (it has attention heads, so ``routing law`` applies)."""
    return TrainConfig(task="bijection", task_params={"V": 4, "L": 3}, arch="transformer", params=5_000,
                       model={"n_layers": 1, "n_heads": 2}, steps=steps, eval_every=3, ckpt_every=3, eval_n=8,
                       progress=False)


@pytest.fixture(scope="module")
def diverged_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run whose loss turned NaN at step 4 of 8: training stopped, kept its step-3 checkpoint and
    recorded ``diverged.json`` (as ``test_a_diverged_run_is_told_from_a_killed_one`` builds one)."""
    return diverged_training(tiny_config(8), tmp_path_factory.mktemp("diverged") / "run")


@pytest.fixture(scope="module")
def diverged_evaluated_run(diverged_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The diverged run with its last good checkpoint evaluated (what ``compare`` and ``report`` read)."""
    run = tmp_path_factory.mktemp("diverged_evaluated") / "run"
    shutil.copytree(diverged_run, run)
    assert main(["eval", str(run), "--n", "8"]) == 0
    return run


@pytest.mark.parametrize("evaluated", [False, True], ids=["trained", "evaluated"])
@pytest.mark.parametrize("command", list(ON_A_RUN), ids=" ".join)
@pytest.mark.slow
def test_every_command_on_a_diverged_run(command: tuple[str, ...], evaluated: bool, diverged_run: Path,
                                         diverged_evaluated_run: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture) -> None:
    """Each command that reads a run folder, on a diverged run (evaluated or not): exit 0 or a one-line
    refusal; where it works, it says the run diverged; a refusal leaves the run as it was."""
    run = tmp_path / "run"
    shutil.copytree(diverged_evaluated_run if evaluated else diverged_run, run)
    before = snapshot(run)
    argv = [a.format(run=run, parent=tmp_path) for a in ON_A_RUN[command]]
    code, out, err = one_line_or_works(argv, capsys)
    if code == 0:
        assert "diverged" in out + err, (command, out, err)
    else:
        assert snapshot(run) == before


# --- 3. every artifact with a field of the wrong type or shape ------------------------------------------
@pytest.fixture(scope="module")
def full_run(diverged_evaluated_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder holding every JSON artifact the package writes: the diverged run evaluated, analysed and
    reported (config, eval, references where the evaluation writes them, geometry, timings, metrics,
    diverged), with a table cell beside."""
    run = tmp_path_factory.mktemp("full") / "run"
    shutil.copytree(diverged_evaluated_run, run)
    assert main(["analyze", str(run), "--n", "8"]) == 0
    assert main(["report", str(run)]) == 0
    rd = RunDir(run)
    if not (run / RunDir.CELL).is_file():
        rd.write_cell({"task": "bijection", "arch": "transformer", "seed": 0, "metrics": rd.read_eval()["metrics"]})
    return run


Mutation = tuple[str, tuple[str, ...], str]
"""``(artifact, field path, kind)``: the file, the field (``("*", key)``: that key of every line of a JSON-lines
file) and which wrong value it gets (:data:`WRONG`)."""

WRONG: dict[str, Callable[[Any], Any]] = {
    "null": lambda v: None,
    "string": lambda v: "x",
    "number": lambda v: 3,
    "list": lambda v: [1, "x"],
    "dict": lambda v: {"x": 1},
    "longer list": lambda v: list(v) + (list(v[-1:]) or [0]),
    "shorter list": lambda v: list(v)[:-1],
}
"""The wrong values a field is given: another type, or a list of the wrong length."""

NESTED_PER_TABLE = 6
"""How many fields of each nested table are mutated (the first, in order: enough for the class, few enough to be fast)."""


def wrong_kinds(value: Any) -> list[str]:
    """The :data:`WRONG` kinds that are wrong for ``value``: null, and each other type; a list also too long or
    too short (an empty list only too long)."""
    kinds = ["null"]
    if isinstance(value, bool) or isinstance(value, (int, float)):
        kinds += ["string", "dict"]
    elif isinstance(value, str):
        kinds += ["number", "list"]
    elif isinstance(value, dict):
        kinds += ["list", "string"]
    elif isinstance(value, list):
        kinds += ["dict", "longer list"] + (["shorter list"] if value else [])
    return [k for k in kinds if value is not None or k != "null"]


def read_artifact(path: Path) -> Any:
    """A JSON file's object, or a JSON-lines file's list of objects."""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def write_artifact(path: Path, doc: Any) -> None:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(line) + "\n" for line in doc))
    else:
        path.write_text(json.dumps(doc, indent=1))


def artifacts(run: Path) -> list[str]:
    """The JSON artifacts of the layout (:attr:`RunDir.FILES`) the run folder holds."""
    return [name for name in RunDir.FILES if name.endswith((".json", ".jsonl")) and (run / name).is_file()]


def mutations(run: Path) -> list[Mutation]:
    """Every top-level field of every JSON artifact of ``run`` with each of its wrong kinds, and the first
    :data:`NESTED_PER_TABLE` fields of each table one level down with one wrong kind each (taken in turn, so
    every kind is used); in a JSON-lines file, a key of every line."""
    out: list[Mutation] = []
    for name in artifacts(run):
        doc = read_artifact(run / name)
        if name.endswith(".jsonl"):  # the union of the lines' keys, each changed in every line that has it
            keys = list(dict.fromkeys(k for line in doc for k in line))
            out += [(name, ("*", k), kind) for k in keys
                    for kind in wrong_kinds(next(line[k] for line in doc if k in line))]
            continue
        turn = 0
        for key, value in doc.items():
            out += [(name, (key,), kind) for kind in wrong_kinds(value)]
            if isinstance(value, dict):
                for sub in list(value)[:NESTED_PER_TABLE]:
                    kinds = wrong_kinds(value[sub])
                    out.append((name, (key, sub), kinds[turn % len(kinds)]))
                    turn += 1
    return out


def mutate(run: Path, mutation: Mutation) -> None:
    """Apply ``mutation`` to the run folder ``run`` in place."""
    name, path, kind = mutation
    doc = read_artifact(run / name)
    tables = [line for line in doc if path[1] in line] if path[0] == "*" else [doc]
    for table in tables:
        for key in path[1 if path[0] == "*" else 0:-1]:
            table = table[key]
        table[path[-1]] = WRONG[kind](table[path[-1]])
    write_artifact(run / name, doc)


ARTIFACTS = [name for name in RunDir.FILES if name.endswith((".json", ".jsonl")) and name != RunDir.REFERENCES]
"""The JSON artifacts of a run folder (``references.json`` aside: a table cell's, read by ``claims`` and
``reproduce`` from a results folder, by none of the run readers below)."""

READERS: dict[str, list[str]] = {
    "runs": ["runs", "{parent}"],
    "report": ["report", "{run}"],
    "compare": ["compare", "{run}", "--out", "{parent}/compare.png"],
    "eval": ["eval", "{run}", "--n", "8"],
    "analyze": ["analyze", "{run}", "--n", "8"],
}
"""The commands that read a run folder's artifacts, each with its command line."""

READS: dict[str, set[str]] = {
    "runs": set(ARTIFACTS), "report": set(ARTIFACTS),
    "compare": {RunDir.CONFIG, RunDir.EVAL, RunDir.DIVERGED},
    "eval": {RunDir.CONFIG, RunDir.EVAL, RunDir.DIVERGED},
    # analyze writes the report after the diagnostics, so it reads what the report reads
    "analyze": {RunDir.CONFIG, RunDir.EVAL, RunDir.GEOMETRY, RunDir.TIMINGS, RunDir.METRICS, RunDir.DIVERGED},
}
"""Which artifacts each reader reads: those pairs run by default; every other pair, and ``analyze`` (seconds
a case), only with ``-m slow``."""

READ_TABLES: dict[tuple[str, str], set[str]] = {("analyze", RunDir.GEOMETRY): {"meta", "summary"}}
"""Where a reader reads only some tables of an artifact it reads: ``analyze`` reads the ``meta`` and ``summary`` of the
``geometry.json`` it replaces (which checkpoint, on how many episodes) and writes every diagnostic's table anew,
so the report it then writes reads the new file, not the mutated one."""


def reader_mutations(run: Path, name: str, reader: str) -> list[Mutation]:
    """The mutations of the artifact ``name`` the reader is run on: every top-level one (each wrong kind of each
    field), and a field one level down only where the reader reads the artifact (:data:`READS`) and that table of
    it (:data:`READ_TABLES`) — a reader that never opens a table cannot tell its fields' values apart, and a case
    of ``analyze`` costs seconds."""
    def kept(mutation: Mutation) -> bool:
        path = mutation[1]
        if len(path) == 1 or path[0] == "*":
            return True
        return name in READS[reader] and path[0] in READ_TABLES.get((reader, name), {path[0]})

    return [m for m in mutations(run) if m[0] == name and kept(m)]


def reader_cases() -> list[Any]:
    """``(artifact, reader)`` for every artifact and reader; the slow pairs marked (:data:`READS`)."""
    return [pytest.param(name, reader, id=f"{name}-{reader}",
                         marks=[pytest.mark.slow] if reader == "analyze" or name not in READS[reader] else [])
            for name in ARTIFACTS for reader in READERS]


@pytest.mark.slow
def test_the_full_run_holds_every_artifact_and_each_gets_mutations(full_run: Path) -> None:
    """The run the mutations start from holds every JSON artifact of the layout (so a new one is mutated
    without an edit here), and every field of each gets at least one wrong value."""
    assert set(artifacts(full_run)) >= set(ARTIFACTS)
    found = mutations(full_run)
    assert {m[0] for m in found} == set(artifacts(full_run))
    for name in ARTIFACTS:
        doc = read_artifact(full_run / name)
        keys = {k for line in doc for k in line} if name.endswith(".jsonl") else set(doc)
        assert keys == {m[1][-1] for m in found if m[0] == name and len(m[1]) == (2 if name.endswith(".jsonl") else 1)}


@pytest.mark.parametrize("name,reader", reader_cases())
@pytest.mark.slow
def test_a_field_of_the_wrong_type_or_shape_is_read_or_refused(name: str, reader: str, full_run: Path,
                                                               tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Every mutation of the artifact the reader is run on (:func:`reader_mutations`: each field null, of another
    type, or a list of the wrong length), read by the reader: it works, or refuses in one line and leaves the folder
    as it was — never a traceback."""
    failures = []
    cases = reader_mutations(full_run, name, reader)
    assert cases
    for i, mutation in enumerate(cases):
        parent = tmp_path / str(i)
        run = parent / "run"
        shutil.copytree(full_run, run)
        mutate(run, mutation)
        before = snapshot(run)
        argv = [a.format(run=run, parent=parent) for a in READERS[reader]]
        try:
            code, _, err = one_line_or_works(argv, capsys)
            if code == 2 and snapshot(run) != before:
                failures.append(f"{mutation}: refused ({err.strip()}) but changed the folder")
        except AssertionError as exc:
            failures.append(f"{mutation}: {str(exc)[:300]}")
        except Exception as exc:  # a traceback: the bug the case exists to find
            failures.append(f"{mutation}: {type(exc).__name__}: {exc}"[:300])
        shutil.rmtree(parent)
    assert not failures, f"{len(failures)} of {len(cases)} mutations:\n" + "\n".join(failures)
