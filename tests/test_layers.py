"""The package's layering, read from its imports: nothing imports a layer above it, no package reaches
into another's private module, and neither the top-level packages nor the modules form an import
cycle.  The layers are those of the README's layout."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "windtunnel"
LAYERS = [("errors", "io"), ("tasks",), ("models", "evaluation"), ("run",), ("geometry", "routing", "llm"),
          ("report", "claims"), ("training",), ("orchestration",), ("cli", "__main__", "__init__")]
"""Bottom to top: foundations (errors, atomic file writes); the tasks; the models and the evaluation
with its measures; what a run is and where it lives (config, the experiment grid, the run folder,
checkpoints, trackers, a cell's claim); the analyses (which read a trained model and never train
one); the report and the claims (which read the analyses and the committed artifacts, and never
train); the training loop; the orchestration (what trains, evaluates, analyses and writes results);
the command line.  Each layer is a package, except the two foundation modules."""
TOP_MODULES = {"errors", "io", "__init__", "__main__"}
"""The only modules at the top of the package: every other module lives in the package of its layer."""
LAYER = {name: i for i, group in enumerate(LAYERS) for name in group}


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


def test_the_top_level_holds_packages_and_only_the_foundation_modules() -> None:
    loose = {p.stem for p in SRC.glob("*.py")}
    assert loose == TOP_MODULES, sorted(loose ^ TOP_MODULES)
    assert all((p / "__init__.py").is_file() for p in SRC.iterdir() if p.is_dir() and p.name != "__pycache__")


def test_no_package_reaches_into_another_packages_private_module() -> None:
    private = [(m, t, line) for m, top, t, line in imports()
               if _top(t) != top and any(part.startswith("_") and part != "__init__" for part in t.split(".")[2:])]
    assert private == []


def test_the_top_level_packages_form_no_import_cycle() -> None:
    edges = {(top, _top(t)) for m, top, t, line in imports() if _top(t) != top and _top(t) in LAYER}
    assert {frozenset({a, b}) for a, b in edges if (b, a) in edges} == set()


def _module_graph() -> dict[str, set[str]]:
    """Module → the windtunnel modules it imports (at the top of the file or inside a function)."""
    known = {".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
             for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for m, _, t, _ in imports():
        while t not in known and "." in t:  # ``from .pkg import name``: name may be an attribute, not a module
            t = t.rsplit(".", 1)[0]
        if t != m and t in known and not m.startswith(t + "."):  # a package's own __init__ is its parent
            graph.setdefault(m, set()).add(t)
    return graph


def test_no_module_import_cycle() -> None:
    """No module reaches itself through the imports of others (a package importing its own submodules
    from ``__init__`` is not counted: that is how a package exports)."""
    graph = _module_graph()
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start and len(path) > 1 and not any(p == start.rsplit(".", 1)[0] for p in path):
                    cycles.append(path)
                elif nxt not in seen and not start.startswith(nxt + "."):
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    assert cycles == []
