"""The command line as a package of commands: every command ``windtunnel --help`` lists is added by exactly
one module of :mod:`windtunnel.cli`, and runs a function of that module; and no module of the package grows
past 600 lines unless its docstring says why."""

from __future__ import annotations

import argparse
import ast
import pkgutil
import re
from pathlib import Path

import windtunnel.cli as cli
from windtunnel.cli import make_parser

SRC = Path(__file__).parents[1] / "src" / "windtunnel"
LIMIT = 600

LONG = {
    # the papers' claims as data (one long list of claim records, each with its source, reading and rule), kept
    # whole so that a paper's claims read in its order; claims/ is edited apart from the command line
    "claims/paper3.py",  # Paper III's claims: near the limit, and growing with its claims
}
"""Modules over the limit whose docstring does not (yet) say why, each with its reason here."""


def _listed() -> list[str]:
    """The commands as ``windtunnel --help`` lists them, in its order."""
    m = re.search(r"\{([a-z,_-]+)\}", make_parser().format_help())
    assert m, "windtunnel --help lists no commands"
    return m.group(1).split(",")


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def test_every_command_comes_from_exactly_one_module() -> None:
    owners: dict[str, list[str]] = {}
    for module in cli.COMMANDS:
        sub = argparse.ArgumentParser().add_subparsers()
        module.register(sub)
        for name in sub.choices:
            owners.setdefault(name, []).append(module.__name__)
    assert list(owners) == _listed()  # the same commands, in the order --help lists them
    assert {name: mods for name, mods in owners.items() if len(mods) != 1} == {}
    # the function a command runs (each action's, for a group such as routing) lives in the module that adds it
    for name, parser in _subparsers(make_parser()).choices.items():
        nested = _subparsers(parser)
        parsers = list(nested.choices.values()) if nested is not None and parser.get_default("func") is None else [parser]
        for p in parsers:
            assert p.get_default("func").__module__ == owners[name][0], (name, p.prog)


def test_every_module_with_register_is_a_listed_command_module() -> None:
    """A module of the package that adds commands is one ``make_parser`` asks (none is forgotten or orphaned)."""
    registering = set()
    for info in pkgutil.iter_modules(cli.__path__):
        tree = ast.parse((Path(cli.__path__[0]) / f"{info.name}.py").read_text())
        if any(isinstance(n, ast.FunctionDef) and n.name == "register" for n in tree.body):
            registering.add(f"windtunnel.cli.{info.name}")
    assert registering == {m.__name__ for m in cli.COMMANDS}


def test_no_module_over_600_lines_without_saying_why() -> None:
    over = {}
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        lines = len(text.splitlines())
        rel = path.relative_to(SRC).as_posix()
        if lines <= LIMIT or rel in LONG:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if f"{LIMIT} lines" not in doc:  # e.g. "longer than 600 lines because …"
            over[rel] = lines
    assert over == {}, f"modules over {LIMIT} lines: split them, or say why in the module docstring"


def test_the_cli_modules_stay_small() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in (SRC / "cli").glob("*.py")}
    assert max(sizes.values()) <= LIMIT, sizes
    assert sizes["__init__.py"] <= 150, sizes["__init__.py"]
