"""The notebooks in docs/ run top to bottom (their code cells, in order, in one namespace) on tiny
settings, so they cannot rot."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[1] / "docs"


@pytest.mark.parametrize("notebook", sorted(p.name for p in DOCS.glob("*.ipynb")))
@pytest.mark.slow
def test_notebook_runs(notebook: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = json.loads((DOCS / notebook).read_text())
    assert nb["nbformat"] == 4
    monkeypatch.chdir(tmp_path)  # what a notebook writes (its run folders) stays out of the tree
    monkeypatch.setenv("WINDTUNNEL_TOUR_STEPS", "40")
    namespace: dict = {"__name__": "__main__"}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{notebook} cell {i} is committed with outputs"
            exec(compile("".join(cell["source"]), f"{notebook}[{i}]", "exec"), namespace)
