"""What the parser and ``windtunnel tasks`` say about the package, without importing torch.

The tasks and the architectures are read from the package's own source files, which are parsed, never imported
(:mod:`ast`): each task module's registered classes — ``name``, ``summary`` and the parameters with their
defaults — and presets, and each model module's ``register_arch`` names.  A new task or architecture is one file
that these readings find as it is, with no edit here (docs/extending.md says what a task file writes as literals
for it).  A task module they cannot read is still listed: ``windtunnel tasks`` then asks the registry, which
imports torch.

The training defaults the help quotes, the evaluation seed and the reproduction targets are plain copies of
constants that live below torch.  ``tests/test_quick_cli.py`` holds the readings and the copies equal to the
registries and constants they stand for.
"""

from __future__ import annotations

import ast
import functools
from typing import Any

from ..io import module_sources

TRAIN_DEFAULTS: dict[str, Any] = {"steps": 2000, "batch_size": 64, "lr": 1e-3}
"""The fields of ``TrainConfig()`` (:mod:`windtunnel.run.config`) that the help of ``train`` quotes."""

EVAL_SEED = 12345
"""``windtunnel.evaluation.evaluate.EVAL_SEED``: the seed of every run's evaluation episodes."""

REPRODUCE_TARGETS: tuple[str, ...] = ("paper1", "paper2", "paper3", "sequel", "beyond", "scale", "all")
"""``windtunnel.orchestration.reproduce.TARGETS``: whose cells ``reproduce`` and ``status`` work or follow."""


class Unreadable(Exception):
    """A task module's declarations are not all literals that :func:`read_tasks` can read without running it."""


def _top_level_calls(tree: ast.Module, function: str) -> list[ast.Call]:
    """The calls of ``function`` (by name, or as ``module.function``) in the module's own code, outside functions
    and classes."""
    calls, stack = [], list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.Call):
            f = node.func
            if (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None) == function:
                calls.append(node)
        stack.extend(child for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)))
    return calls


@functools.lru_cache(maxsize=None)
def architectures() -> tuple[str, ...]:
    """The architectures the package's model modules register (the literal first argument of each top-level
    ``register_arch`` call), sorted by name (read once a process: the parser asks for them twice)."""
    out = set()
    for _, source in module_sources("windtunnel.models"):
        if source is None or "register_arch" not in source:
            continue
        for call in _top_level_calls(ast.parse(source), "register_arch"):
            if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
                out.add(call.args[0].value)
    return tuple(sorted(out))


def _literal(node: ast.AST | None, what: str) -> Any:
    if node is None:
        raise Unreadable(f"{what} has no value")
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise Unreadable(f"{what} is not a literal: {ast.unparse(node)}") from None


def _is_classvar(annotation: ast.AST) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.startswith(("ClassVar", "typing.ClassVar"))
    target = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return (target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)) == "ClassVar"


def _register_aliases(tree: ast.Module) -> set[str]:
    """The names under which the module imports the task registry's ``register`` decorator."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if (node.level and module in ("", "base")) or module in ("windtunnel.tasks", "windtunnel.tasks.base"):
                out |= {a.asname or a.name for a in node.names if a.name == "register"}
    return out


class _TaskClass:
    """One class of a task module as written: its bases, class attributes and dataclass fields (unevaluated)."""

    def __init__(self, node: ast.ClassDef, registered: bool) -> None:
        self.name, self.registered = node.name, registered
        self.bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "?") for b in node.bases]
        self.attributes: dict[str, ast.AST | None] = {}
        self.fields: dict[str, ast.AST | None] = {}
        for stmt in node.body:
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        self.attributes[target.id] = stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                kind = self.attributes if _is_classvar(stmt.annotation) else self.fields
                kind[stmt.target.id] = stmt.value


def _default(value: ast.AST | None, what: str) -> Any:
    """A dataclass field's default: its literal value, or the literal ``default=`` of ``field(...)``."""
    if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", None)) == "field":
        value = next((k.value for k in value.keywords if k.arg == "default"), None)
    return _literal(value, what)


def read_tasks() -> dict[str, tuple[str, dict[str, Any]]]:
    """Each task of the package and each preset, in the order of ``windtunnel.tasks.names()`` (the tasks, then the
    presets, each sorted) → its summary and default parameters, read from the task modules' source:
    :class:`Unreadable` where a registered task's ``name``, ``summary`` or a parameter's default is not a literal,
    or where it derives from a class that is not in the package's task modules."""
    classes: dict[str, _TaskClass] = {}
    presets: dict[str, tuple[str, dict[str, Any]]] = {}
    for module, source in module_sources("windtunnel.tasks"):
        if source is None:
            raise Unreadable(f"the source of windtunnel.tasks.{module} cannot be read")
        tree = ast.parse(source)
        register = _register_aliases(tree)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                decorated = {d.id if isinstance(d, ast.Name) else getattr(d, "attr", None) for d in node.decorator_list}
                if node.name in classes:
                    raise Unreadable(f"two task modules define a class {node.name}")
                classes[node.name] = _TaskClass(node, bool(decorated & (register | {"register"})))
        for call in _top_level_calls(tree, "register_preset"):
            preset, task = (_literal(a, f"register_preset's argument in {module}") for a in call.args[:2])
            presets[preset] = (task, {k.arg: _literal(k.value, f"preset {preset}'s {k.arg}") for k in call.keywords
                                      if k.arg is not None})

    def lookup(cls: _TaskClass, attribute: str) -> Any:
        if attribute in cls.attributes:
            return _literal(cls.attributes[attribute], f"{cls.name}.{attribute}")
        for base in cls.bases:
            if base in classes:
                found = lookup(classes[base], attribute)
                if found is not None:
                    return found
        return None

    def parameters(cls: _TaskClass) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for base in reversed(cls.bases):  # a dataclass's fields: its bases' (in reverse order), then its own
            if base not in classes:
                raise Unreadable(f"task class {cls.name} derives from {base}, which no task module defines")
            out.update(parameters(classes[base]))
        out.update({name: _default(value, f"{cls.name}.{name}") for name, value in cls.fields.items()})
        return out

    tasks = {}
    for cls in classes.values():
        if cls.registered:
            name = lookup(cls, "name")
            if not isinstance(name, str) or not name:
                raise Unreadable(f"task class {cls.name} names no task")
            tasks[name] = (lookup(cls, "summary") or "", parameters(cls))
    listing = {name: tasks[name] for name in sorted(tasks)}
    for preset in sorted(presets):
        task, params = presets[preset]
        if task not in tasks:
            raise Unreadable(f"preset {preset} names task {task!r}, which no task module registers")
        listing[preset] = (tasks[task][0], {**tasks[task][1], **params})
    return listing


def task_listing() -> dict[str, tuple[str, dict[str, Any]]]:
    """What ``windtunnel tasks`` lists: :func:`read_tasks`, or — where a task module cannot be read that way — the
    same from the registry (which imports torch)."""
    try:
        return read_tasks()
    except Unreadable:
        from .. import tasks

        return {name: (tasks.get(name).summary, tasks.defaults(name)) for name in tasks.names()}
