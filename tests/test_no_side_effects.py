"""Nothing before the refusal: every command pointed at a folder that is not what it needs (an empty folder, a
missing one, a file) refuses in one line with exit status 2 and leaves the tree exactly as it was — no ``.lock``,
no created folder, no figure in the current folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from windtunnel.cli import main

COMMANDS = (
    ["eval", "{d}"], ["analyze", "{d}"], ["report", "{d}"], ["compare", "{d}", "{d}"], ["train", "--resume", "{d}"],
    ["routing", "law", "{d}"], ["diversity", "--results", "{d}"], ["claims", "--results", "{d}/nothing"],
    ["llm", "signatures", "{d}"], ["llm", "sula", "{d}"],
)


def _tree(root: Path) -> set[tuple[str, bool]]:
    return {(str(p.relative_to(root)), p.is_dir()) for p in root.rglob("*")}


@pytest.mark.parametrize("kind", ["empty", "missing", "file"])
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_refused_command_leaves_the_tree_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture, argv: list[str], kind: str) -> None:
    if argv[0] == "llm":
        pytest.importorskip("transformers")
    cwd, d = tmp_path / "cwd", tmp_path / "target"
    cwd.mkdir()
    if kind == "empty":
        d.mkdir()
    elif kind == "file":
        d.write_text("not a run\n")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = _tree(tmp_path)
    code = main([a.format(d=d) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("windtunnel: error: ") and err.count("\n") == 1, err
    assert _tree(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="permissions do not bind the superuser")
def test_a_read_only_run_folder_is_refused_without_writing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        assert main(["eval", str(d)]) == 2
        assert list(d.iterdir()) == []
    finally:
        d.chmod(0o755)
