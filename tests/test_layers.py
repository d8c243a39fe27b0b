"""The package's layering, read from its imports: nothing imports a layer above it, no package reaches
into another's private module, and the top-level packages form no import cycle (one known exception
below).  The layers are those of the README's layout."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "windtunnel"
LAYERS = [("errors", "stats", "numerics"), ("tasks", "metrics"), ("models",), ("checkpoint", "runs"),
          ("training", "train_config", "streams", "optim", "evaluation"), ("geometry", "routing", "llm"),
          ("stages", "report", "grid", "table", "claims", "reproduce", "compare"), ("cli", "__main__", "__init__")]
LAYER = {name: i for i, group in enumerate(LAYERS) for name in group}
# geometry/routing_law.py (a diagnostic) reads routing.law, and routing/timescales.py (an experiment)
# reads geometry.dynamics: two analysis packages of one layer that still lean on each other
KNOWN_CYCLES = {frozenset({"geometry", "routing"})}


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports() -> list[tuple[str, str, str, int]]:
    """(importing module, its top-level package, imported module, line) for every windtunnel import."""
    out = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        mod = ".".join(rel.parts)
        pkg = mod[: -len(".__init__")] if mod.endswith(".__init__") else mod.rsplit(".", 1)[0]
        if mod.endswith(".__init__"):
            mod = pkg
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                targets = ([".".join(base + [node.module])] if node.module
                           else [".".join(base + [a.name]) for a in node.names])
            elif node.module and node.module.startswith("windtunnel"):
                targets = [node.module]
            else:
                continue
            for t in targets:
                out.append((mod, _top(mod) if mod != "windtunnel" else "__init__", t, node.lineno))
    return out


def test_no_module_imports_a_layer_above_its_own() -> None:
    up = [(m, t, line) for m, top, t, line in imports()
          if _top(t) in LAYER and top in LAYER and LAYER[_top(t)] > LAYER[top]]
    assert up == []


def test_every_top_level_module_has_a_layer() -> None:
    names = {p.stem if p.is_file() else p.name for p in SRC.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    assert names <= set(LAYER), sorted(names - set(LAYER))


def test_no_package_reaches_into_another_packages_private_module() -> None:
    private = [(m, t, line) for m, top, t, line in imports()
               if _top(t) != top and any(part.startswith("_") and part != "__init__" for part in t.split(".")[2:])]
    assert private == []


def test_the_top_level_packages_form_no_import_cycle() -> None:
    edges = {(top, _top(t)) for m, top, t, line in imports() if _top(t) != top and _top(t) in LAYER}
    cycles = {frozenset({a, b}) for a, b in edges if (b, a) in edges}
    assert cycles <= KNOWN_CYCLES, cycles - KNOWN_CYCLES
