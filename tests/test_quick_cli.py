"""``import windtunnel`` and the answers of the command line that do no work — ``--help``, every command's
``--help``, ``windtunnel tasks``, the refusal of a bad argument — import no torch; the package's public names
resolve from their one home each; and what the command line reads without torch (:mod:`windtunnel.cli.names`: the
tasks and architectures read from the package's source, the plain copies of a few constants) equals the registries
and constants it stands for.

Each command runs in a fresh interpreter (``python -m windtunnel``, through :func:`runpy.run_module`) that
records, as it exits, whether torch was imported: in this process torch is loaded already."""

from __future__ import annotations

import argparse
import ast
import importlib
import pprint
import re
import subprocess
import sys
from pathlib import Path

import pytest

import windtunnel
from windtunnel.cli import make_parser, names

ROOT = Path(__file__).parents[1]

DRIVER = """
import runpy, sys
marker, sys.argv = sys.argv[1], ["windtunnel", *sys.argv[2:]]
status = 0
try:
    runpy.run_module("windtunnel", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
finally:
    with open(marker, "w") as f:
        f.write(str("torch" in sys.modules))
sys.exit(status)
"""
"""``python -m windtunnel ARGS`` with, written to the file named first, whether torch was imported on the way."""


def windtunnel_command(args: list[str], tmp_path: Path) -> tuple[int, str, str, bool]:
    """``python -m windtunnel ARGS`` in a fresh interpreter: (exit status, stdout, stderr, torch imported)."""
    marker = tmp_path / "torch-imported"
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(marker), *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert marker.is_file(), proc.stderr
    return proc.returncode, proc.stdout, proc.stderr, marker.read_text() == "True"


def command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and action of the parser (``("routing", "law")``), as the words that name it."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [(*path, name), *command_paths(sub, (*path, name))]
    return out


COMMANDS = command_paths(make_parser())


def test_import_windtunnel_imports_no_torch() -> None:
    proc = subprocess.run([sys.executable, "-c", "import windtunnel, sys; print('torch' in sys.modules)"],
                          capture_output=True, text=True, check=True, timeout=300)
    assert proc.stdout.strip() == "False"


def test_help_answers_without_torch(tmp_path: Path) -> None:
    status, out, err, torch_imported = windtunnel_command(["--help"], tmp_path)
    assert (status, err, torch_imported) == (0, "", False)
    assert out.startswith("usage: windtunnel")


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_commands_help_answers_without_torch(command: tuple[str, ...], tmp_path: Path) -> None:
    status, out, err, torch_imported = windtunnel_command([*command, "--help"], tmp_path)
    assert (status, err, torch_imported) == (0, "", False)
    assert out.startswith(f"usage: windtunnel {' '.join(command)}")


def test_tasks_lists_without_torch(tmp_path: Path) -> None:
    status, out, err, torch_imported = windtunnel_command(["tasks"], tmp_path)
    assert (status, err, torch_imported) == (0, "", False)
    assert [line.split()[0] for line in out.splitlines()[::2]] == list(names.read_tasks())


@pytest.mark.parametrize("args", [["nosuch"], ["train", "--steps", "0"], ["run", "--preset", "huge"],
                                  ["tasks", "show"], ["status", "--target", "paper9"]], ids=" ".join)
def test_a_bad_argument_is_refused_in_one_line_without_torch(args: list[str], tmp_path: Path) -> None:
    status, out, err, torch_imported = windtunnel_command(args, tmp_path)
    assert (status, out, torch_imported) == (2, "", False), err
    assert err.startswith("windtunnel: error: ") and err.count("\n") == 1 and "Traceback" not in err, err


REGISTRIES = """
from windtunnel import models, tasks
from windtunnel.evaluation.evaluate import EVAL_SEED
from windtunnel.orchestration.reproduce import TARGETS
from windtunnel.run.config import TrainConfig

defaults = TrainConfig()
print(repr({
    "architectures": tuple(sorted(models.names())),
    "TRAIN_DEFAULTS": {"steps": defaults.steps, "batch_size": defaults.batch_size, "lr": defaults.lr},
    "EVAL_SEED": EVAL_SEED,
    "REPRODUCE_TARGETS": tuple(TARGETS),
    "read_tasks": {name: (tasks.get(name).summary, tasks.defaults(name)) for name in tasks.names()},
}))
"""
"""The registries and constants :mod:`windtunnel.cli.names` reads or copies, read in a fresh interpreter (where no
test has registered a throwaway task or architecture), written as Python literals; each under the name of what
stands for it there (a function for a reading, a constant for a copy)."""


def test_the_command_lines_names_equal_the_registries() -> None:
    """The tasks (with their summaries and defaults) and the architectures read from the package's source equal
    the registries — so every task module of the package is read without torch (docs/extending.md says what it
    writes as literals) — and the copied constants equal theirs."""
    proc = subprocess.run([sys.executable, "-c", REGISTRIES], capture_output=True, text=True, check=True, timeout=300)
    real = ast.literal_eval(proc.stdout)
    for name, value in real.items():
        read = getattr(names, name)
        read = read() if callable(read) else read
        # as written (order, tuples, float or int): what the command line prints is each value's repr
        assert repr(read) == repr(value), (
            f"windtunnel/cli/names.py's {name} differs from what it stands for:\n"
            f"{pprint.pformat(read, width=110, sort_dicts=False)}\nwhere the registry has\n"
            f"{pprint.pformat(value, width=110, sort_dicts=False)}")


def test_every_public_name_resolves_from_its_one_home() -> None:
    """Each name of ``__all__`` is listed once, has one home (the table the lazy lookup reads), and is the very
    object found there; in a fresh interpreter it resolves on first use, and ``dir`` lists it."""
    assert len(windtunnel.__all__) == len(set(windtunnel.__all__))
    assert set(windtunnel.__all__) == {*windtunnel._HOMES, "__version__"}
    for name, (module, attribute) in windtunnel._HOMES.items():
        home = importlib.import_module(module)
        assert getattr(windtunnel, name) is (home if attribute is None else getattr(home, attribute)), name
    fresh = ("import windtunnel\nassert set(windtunnel.__all__) <= set(dir(windtunnel))\n"
             "star = {}\nexec('from windtunnel import *', star)\nprint(sorted(k for k in star if k != '__builtins__'))")
    proc = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True, check=True, timeout=300)
    assert ast.literal_eval(proc.stdout) == sorted(windtunnel.__all__)
    with pytest.raises(AttributeError):
        windtunnel.no_such_name  # noqa: B018 - the lookup is what is tested


def test_every_name_the_docs_import_from_windtunnel_is_public() -> None:
    """``from windtunnel import …`` and ``wt.NAME`` (``import windtunnel as wt``) in the README and docs/ name only
    public names, so each imports the way the docs show it."""
    shown = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs").glob("*.ipynb"))]:
        text = path.read_text()
        for names_ in re.findall(r"from windtunnel import \(?([\w, ]+)", text):
            shown |= {n.strip() for n in names_.split(",") if n.strip()}
        if "import windtunnel as wt" in text:
            shown |= set(re.findall(r"\bwt\.(\w+)", text))
        assert not re.findall(r"^\s*\"?import windtunnel\.(?:stages|table|runs|metrics)\b", text, re.M), path
    assert shown and shown <= set(windtunnel.__all__), sorted(shown - set(windtunnel.__all__))
