"""The trilogy's claims as data, each with its verdict read from committed artifacts.

``CLAIMS`` maps an id (``A1`` … ``D24``: A Paper I behaviour, B Paper I mechanism and geometry,
C Paper II, D Paper III; ``MS1`` … ``MS6`` the model-selection sequel) to a :class:`Claim`; :func:`assess_all` applies every claim's rule to the
results folder and :func:`render` writes ``results/CLAIMS.md`` (``windtunnel claims``).  Nothing in
that file is typed by hand: the papers' numbers and sources are in the claim modules, ours come from
the files each verdict names.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from . import paper1, paper2, paper3, sequel  # noqa: F401  (each registers its claims)
from . import pages as _render
from .base import (AGREE, AGREE_BY_CONSTRUCTION, CLAIMS, DISAGREE, DISAGREE_CLOSES, DISAGREE_PERSISTS,
                   DISAGREE_UNCONTROLLED, IDENTITY, INCONCLUSIVE, NOT_MEASURABLE, NOT_MEASURED, PROVENANCE, UNINFORMATIVE,
                   VERDICTS, Claim, Verdict, declared, ordered)
from .evidence import Evidence, Measure, NullEvidence
from .judge import Judgement, judge

__all__ = ["CLAIMS", "Claim", "Verdict", "Evidence", "NullEvidence", "Measure", "Judgement", "VERDICTS", "judge",
           "judge_all", "assess_all", "declared", "render", "render_details", "write", "ordered", "AGREE",
           "AGREE_BY_CONSTRUCTION", "IDENTITY", "INCONCLUSIVE",
           "DISAGREE_CLOSES", "DISAGREE_PERSISTS", "DISAGREE_UNCONTROLLED", "UNINFORMATIVE", "DISAGREE", "NOT_MEASURED",
           "NOT_MEASURABLE", "PROVENANCE"]

SECTIONS = _render.SECTIONS


def judge_all(results: str | Path = "results", preset: str = "quick") -> dict[str, Judgement]:
    """Each claim's judgement (:func:`~windtunnel.claims.judge.judge`) on the committed files under ``results``."""
    from .judge import null_evidence

    ev = Evidence(Path(results), preset)
    nulls = null_evidence(ev)
    return {c.id: judge(c, ev, nulls) for c in ordered()}


def assess_all(results: str | Path = "results", preset: str = "quick") -> dict[str, Verdict]:
    """Each claim's final verdict on the committed files under ``results``."""
    return {cid: j.verdict for cid, j in judge_all(results, preset).items()}


def render(judgements: dict[str, Judgement], details: str = _render.DETAILS) -> str:
    """``CLAIMS.md``, the front page (:mod:`windtunnel.claims.pages`), linking to the detail folder ``details``."""
    return _render.front_page(judgements, details)


def render_details(judgements: dict[str, Judgement]) -> dict[str, str]:
    """Each claim's detail file, by file name (``A1.md`` …), for the ``claims/`` folder beside ``CLAIMS.md``."""
    return {_render.slug(cid): _render.detail(j) for cid, j in judgements.items()}


DOCS_PRESET = "quick"
"""The preset whose verdicts ``results/CLAIMS.md`` holds and whose numbers README.md and the results READMEs quote
(the paper preset's cells enter them as controls and, where a claim's own cell is committed at the papers' size,
as the cell it is judged on)."""


def write(results: str | Path = "results", out: str | Path | None = None, preset: str = DOCS_PRESET) -> tuple[Path, dict[str, Any]]:
    """Judge every claim and write ``CLAIMS.md`` (default ``results/CLAIMS.md``) with its detail files in the
    folder beside it (:func:`~windtunnel.claims.pages.details_folder`; a detail no claim has is removed), and then the
    fact spans of README.md and the results READMEs (:mod:`windtunnel.claims.docs`); returns the path and the counts.
    A fact that reads nothing refuses the whole write (:class:`~windtunnel.errors.UserError`) before any file is
    touched.
    Under another preset the default is ``results/CLAIMS-{preset}.md``, and the documents are left alone: they quote
    :data:`DOCS_PRESET`'s numbers."""
    from ..io import write_text_atomic

    from . import docs

    results = Path(results)
    judgements = judge_all(results, preset)
    default = results / ("CLAIMS.md" if preset == DOCS_PRESET else f"CLAIMS-{preset}.md")
    path = Path(out) if out is not None else default
    folder = _render.details_folder(path)
    details = render_details(judgements)
    front = render(judgements, folder.name)
    verdicts = {cid: j.verdict for cid, j in judgements.items()}
    quotes_docs = out is None and preset == DOCS_PRESET
    if quotes_docs:  # a fact that reads nothing (a cell being rewritten) refuses before any page is written
        docs.refreshed(results.resolve().parent, Evidence(results, preset), verdicts)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in details.items():
        write_text_atomic(folder / name, text)
    for stale in folder.glob("*.md"):
        if stale.name not in details:
            stale.unlink()
    write_text_atomic(path, front)
    if quotes_docs:  # the numbers quoted in README.md and the results READMEs, from the same files
        docs.write_all(results.resolve().parent, Evidence(results, preset), verdicts)
    return path, dict(Counter(v.kind for v in verdicts.values()))
