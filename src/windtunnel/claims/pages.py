"""``results/CLAIMS.md`` (the front page) and ``results/claims/ID.md`` (one claim each), from the judgements.

The front page opens with the headline — what reproduces, what persists against controls, what closes under one,
what no control can speak to, what a trivial predictor would pass, at which scale — then the counts by verdict and by
the source of the papers' number, then one compact table per paper: id (linking to its detail), the claim, the
papers' number and its source, ours, the verdict and the scale.  A claim that re-reads another's measurement
(``Claim.derived``) is listed but counted once, under the claim it re-reads.  Everything is generated.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Iterable

from .base import (AGREE, AGREE_BY_CONSTRUCTION, DISAGREE_CLOSES, DISAGREE_PERSISTS, DISAGREE_UNCONTROLLED, IDENTITY,
                   INCONCLUSIVE, NOT_CLAIMS, NOT_MEASURABLE, NOT_MEASURED, PROVENANCE, UNINFORMATIVE, VERDICTS, Verdict)
from .verdicts import CONVENTIONS, DEFINITIONS
from .evidence import Measure, _g
from .judge import EXACT_NULLS, NULL_NAMES, REDUCED_SCALE, SCALES, Judgement

SECTIONS = {"A": "Paper I — behaviour", "B": "Paper I — mechanism and geometry", "C": "Paper II — gradient dynamics",
            "D": "Paper III — production language models",
            "M": "The sequel — Bayesian model selection (arXiv 2607.19379)"}
DETAILS = "claims"
"""The folder beside ``CLAIMS.md`` that holds one detail file per claim."""
STATEMENT_CHARS = 80
OURS_CHARS = 60
SHORT_SCALE = {REDUCED_SCALE: "reduced", SCALES["paper/"]: "papers' size", SCALES["llm/"]: "LLMs",
               SCALES["llm/matched/"]: "small LMs", SCALES["routing/"]: "Paper II models"}
SHORT_VERDICT = {DISAGREE_CLOSES: "disagree — closes", DISAGREE_PERSISTS: "disagree — persists",
                 DISAGREE_UNCONTROLLED: "disagree — uncontrolled"}


def short_scale(scale: str) -> str:
    """A scale in a word or two, for the tables."""
    return "papers' size" if scale.startswith("the papers' size") else SHORT_SCALE.get(scale, scale)


def section(cid: str) -> str:
    return cid[0]


def _shorten(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, with an ellipsis where cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:(")
    return cut + "…"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def ours_text(ours: Measure | str | None) -> str:
    """Our number for a table: per-seed values where seeds are few or the interval leaves the quantity's range (a
    t-interval over three seeds often does), else the mean with its interval."""
    if not isinstance(ours, Measure):
        return _shorten(str(ours or "—"), OURS_CHARS)
    if ours.values and len(ours.values) <= 5:
        return f"{_g(ours.value)} (seeds {', '.join(_g(v) for v in ours.values)})"
    return ours.text()


def _controls_text(j: Judgement) -> str:
    """The factors of the controls a persisting disagreement was tried under (each one that can speak: at the
    verdict's own scale)."""
    return ", ".join(j.verdict.controls)


def _unheard_text(j: Judgement) -> str:
    """The factors of the controls run beside a disagreement that could not speak to it."""
    said = "controls run, none that can speak: " + ", ".join(j.verdict.unheard) if j.verdict.unheard else "none run"
    return said + (f"; {_replicate_text(j.verdict)}" if j.verdict.replicated else "")


def verdict_text(j: Judgement, short: bool = False) -> str:
    """The verdict with what it was judged against: the closing control's factor, or every factor tried."""
    v = j.verdict
    text = SHORT_VERDICT.get(v.kind, v.kind) if short else v.kind
    if v.kind == DISAGREE_CLOSES:
        text += f" ({v.closed_by})"
    elif v.kind == DISAGREE_PERSISTS and v.controls:
        text += f" ({_controls_text(j)})"
    if v.replicated:
        text += f"; {_replicate_text(v)}"
    return text


def _replicate_text(v: Verdict) -> str:
    """A replicate as a row names it: the same outcome on another model, which is no control."""
    return f"the same on {', '.join(v.replicated)} (a replicate, not a control)"


def _listed(judgements: dict[str, Judgement]) -> list[Judgement]:
    """Every row that is not a re-reading of another's measurement (the counts table's rows)."""
    return [j for j in judgements.values() if j.claim.derived is None]


def _counted(judgements: dict[str, Judgement]) -> list[Judgement]:
    """The claims counted on the front page: every claim of the papers but those that re-read another's
    measurement (a row whose number is not a claim of the papers is judged apart, :data:`NOT_CLAIMS`)."""
    return [j for j in judgements.values() if j.claim.counted]


def _doubted(j: Judgement) -> str:
    """``" ‡"`` where the papers' number is suspect (``Claim.doubt``)."""
    return " ‡" if j.claim.doubt else ""


def details_folder(page: Path) -> Path:
    """The folder of the detail files beside the front page ``page``: ``claims/`` beside ``CLAIMS.md``, else
    ``STEM-details/`` (``CLAIMS-paper-details/`` beside ``CLAIMS-paper.md``)."""
    return page.parent / (DETAILS if page.name == "CLAIMS.md" else f"{page.stem}-details")


def _link(cid: str, details: str) -> str:
    return f"[{cid}]({details}/{cid}.md)"


def _named(j: Judgement, details: str) -> str:
    return _link(j.claim.id, details) + _doubted(j)


def _ids(js: Iterable[Judgement], details: str) -> str:
    return ", ".join(_named(j, details) for j in js) or "none"


def headline(judgements: dict[str, Judgement], details: str = DETAILS) -> list[str]:
    """The front page's opening: the verdicts in sentences, each naming its claims."""
    counted = _counted(judgements)
    by = {k: [j for j in counted if j.kind == k] for k in VERDICTS}
    at_paper = [j for j in by[AGREE] if j.scale.startswith("the papers' size")]
    apart = [j for j in _listed(judgements) if j.claim.provenance in NOT_CLAIMS]
    derived = len(judgements) - len(_listed(judgements))
    doubted = [j for j in counted if j.claim.doubt]
    identities, found, built = by[IDENTITY], by[AGREE], by[AGREE_BY_CONSTRUCTION]
    unmeasured = [j for j in counted if j.kind in (NOT_MEASURED, NOT_MEASURABLE)]
    persists_sure = [j for j in by[DISAGREE_PERSISTS] if not j.claim.doubt]
    lines = [
        f"**{len(counted)} claims of the papers are judged** ({derived} more re-read another claim's measurement and "
        f"are listed, not counted; {len(apart)} rows whose number is not a claim of the papers are judged apart).",
        "",
        f"- **Reproduced — {len(found)}**: {_ids(found, details)}"
        + (f"; at the papers' size: {_ids(at_paper, details)}." if at_paper else ".")
        + (f" **Identities verified — {len(identities)}**: {_ids(identities, details)} (mathematical facts that hold "
           "whatever the training: a check of the derivation and of our code, not a finding about what training does)." if identities else "")
        + (f" **Agree by construction — {len(built)}**: {_ids(built, details)} (the rule would hold whatever training "
           "did: a model that cannot see the context sits at the context-blind floor by its design)." if built else ""),
        f"- **Disagree, and the disagreement persists under controls — {len(by[DISAGREE_PERSISTS])}** "
        f"({len(persists_sure)} of them against a papers' number nothing is known against; the others' number is "
        "suspect, ‡): "
        + "; ".join(f"{_named(j, details)} ({_controls_text(j)})" for j in by[DISAGREE_PERSISTS]) + ".",
        f"- **Disagree, but a control that changes one factor meets the papers' rule — {len(by[DISAGREE_CLOSES])}**: "
        + ("; ".join(f"{_named(j, details)} (closes under {j.verdict.closed_by})" for j in by[DISAGREE_CLOSES])
           or "none") + ".",
        f"- **Disagree, and no control can speak to it — {len(by[DISAGREE_UNCONTROLLED])}**: "
        + ("; ".join(f"{_named(j, details)} ({_unheard_text(j)})" for j in by[DISAGREE_UNCONTROLLED]) or "none") + ".",
        f"- **Uninformative: a trivial predictor meets the rule too, or exact inference fails it too — "
        f"{len(by[UNINFORMATIVE])}**: "
        f"{_ids(by[UNINFORMATIVE], details)}.",
        f"- **Inconclusive — {len(by[INCONCLUSIVE])}**: {_ids(by[INCONCLUSIVE], details)}. **Not measurable here — "
        f"{len(by[NOT_MEASURABLE])}**: {_ids(by[NOT_MEASURABLE], details)}."
        + (f" **Not measured — {len(by[NOT_MEASURED])}**: {_ids(by[NOT_MEASURED], details)}." if by[NOT_MEASURED] else ""),
        "- **Scale**: " + "; ".join(f"{n} judged at {s}" for s, n in Counter(
            j.scale for j in counted if j.kind not in (NOT_MEASURED, NOT_MEASURABLE)).most_common())
        + (f"; {len(unmeasured)} not measured, so at no scale" if unmeasured else "") + f" ({len(counted)} in all).",
        f"- **The papers' number is suspect (‡) — {len(doubted)}**: it comes from a defect of the authors' code, or "
        "the authors' own later figure contradicts it (each detail says which); a disagreement with it is not a "
        "failure of the papers' claim: " + ", ".join(f"{_link(j.claim.id, details)} ({verdict_text(j, short=True)})"
                                                  for j in doubted) + ".",
        f"- **Judged apart, not claims of the papers — {len(apart)}**: "
        + ", ".join(f"{_link(j.claim.id, details)} ({j.claim.provenance}: {verdict_text(j, short=True)})"
                    for j in apart) + ".",
        f"- **Thresholds of ours** (marked †): {sum(bool(j.claim.threshold) for j in counted)} rules apply a threshold "
        "the papers do not state — where they give no number, or one the rule replaces; each detail names it.",
    ]
    return lines


def glossary() -> str:
    """The verdict words and the conventions, as :mod:`~windtunnel.claims.verdicts` defines them, in one paragraph."""
    words = "; ".join(f"*{k}* — {v}" for k, v in DEFINITIONS.items())
    rules = "; ".join(f"{k} — {v}" for k, v in CONVENTIONS.items())
    terms = "; ".join(f"*{k}* — {v}" for k, v in TERMS.items())
    return (f"Verdicts: {words}. Conventions: {rules}. Ours: the mean with each training seed's value, or the value "
            f"with its 95% interval; a rule whose threshold is ours, not the papers', is marked †. Terms: {terms}.")


TERMS = {
    "context-blind floor": "the error of the best answer that ignores the context (the prior at each position)",
    "one-step filter": "the exact posterior given only the latest observation, carrying no belief along the sequence",
    "per-position (pointwise) MLP": "the papers' MLP control, which sees one token at a time; a windowed MLP sees "
                                    "its recent prefix",
    "frame head": "the attention head whose removal hurts most",
    "SULA": "Paper III's two-label in-context task, whose exact posterior is known",
    "re-reads": "a row that judges another claim's measurement again, counted once under that claim",
    "secondary": "a number found in summaries of the papers, not in their text",
}
"""The words of the tables a reader of the papers may not know, said in a line below the glossary."""


def counts_table(judgements: dict[str, Judgement]) -> list[str]:
    """Verdict × source of the papers' number, derived claims left out."""
    counted = _listed(judgements)
    sources = list(PROVENANCE)
    grid = Counter((j.kind, j.claim.provenance) for j in counted)
    lines = ["| verdict | " + " | ".join(sources) + " | total |", "|---|" + "---|" * (len(sources) + 1)]
    for k in VERDICTS:
        row = [grid[(k, s)] for s in sources]
        if sum(row):
            lines.append(f"| {k} | " + " | ".join(str(n) for n in row) + f" | {sum(row)} |")
    totals = [sum(grid[(k, s)] for k in VERDICTS) for s in sources]
    lines.append("| **total** | " + " | ".join(str(n) for n in totals) + f" | {sum(totals)} |")
    return lines


def front_page(judgements: dict[str, Judgement], details: str = DETAILS) -> str:
    """``CLAIMS.md``, linking each claim to its file in the folder ``details`` beside it."""
    lines = [
        "# The papers' claims and windtunnel's verdicts",
        "",
        "Generated by `windtunnel claims` from the committed artifacts under `results/`. Each id links to its "
        f"detail in [`{details}/`]({details}/): the rule, our number and the files it is read from, the nulls the "
        "rule was tried on, the controls consulted, and the command that regenerates them.",
        "",
        *headline(judgements, details),
        "",
        "## Verdicts by the source of the papers' number",
        "",
        "Sources: " + "; ".join(f"**{k}** — {v}" for k, v in PROVENANCE.items()) + ".",
        "",
        f"Every judged row is counted here: the {sum(j.claim.counted for j in judgements.values())} claims of the "
        "papers and the rows judged apart (the not-a-claim and unsourced columns); the rows that re-read another "
        "claim's measurement are counted with it, not here.",
        "",
        *counts_table(judgements),
        "",
        glossary(),
    ]
    for s, title in SECTIONS.items():
        lines += ["", f"## {s}. {title}", "",
                  "| id | claim | papers' number (source) | ours | verdict | scale |", "|---|---|---|---|---|---|"]
        for j in judgements.values():
            if section(j.claim.id) != s:
                continue
            c = j.claim
            cid = _link(c.id, details) + (f" (re-reads {c.derived})" if c.derived else "")
            lines.append("| " + " | ".join(_cell(x) for x in (
                cid, _shorten(c.statement, STATEMENT_CHARS), f"{_shorten(c.number, 40)} ({c.provenance}{_doubted(j)})",
                ours_text(j.verdict.ours), verdict_text(j, short=True) + (" †" if c.threshold else ""),
                "—" if j.kind in (NOT_MEASURED, NOT_MEASURABLE) else short_scale(j.scale))) + " |")
    return "\n".join(lines) + "\n"


def detail(j: Judgement) -> str:
    """``claims/ID.md``: one claim in full."""
    c, v = j.claim, j.verdict
    lines = [
        f"# {c.id}: {c.statement}",
        "",
        f"[All claims](../CLAIMS.md) · Paper {c.paper} {c.version}, {c.section}",
        "",
        f"- **The papers' number**: {c.number} — source: {c.provenance} ({PROVENANCE[c.provenance]})",
        *([f"- **Why that number is suspect** (‡): {c.doubt}"] if c.doubt else []),
        *(["- **An identity**: a mathematical fact that holds whatever the training; agreement checks the derivation "
           "and our code, and is not a finding about what training does"] if c.identity else []),
        f"- **What we measure**: {c.metric}",
        f"- **Rule**: {c.rule}",
        f"- **Threshold**: ours, not the papers' — {c.threshold}" if c.threshold else
        "- **Threshold**: the papers' own number (or the rule's reading of their words)",
        f"- **Ours**: {v.ours_text}" + (f" — {v.ours.seeds} seeds: {', '.join(_g(x) for x in v.ours.values)}"
                                 if isinstance(v.ours, Measure) and v.ours.values else ""),
        f"- **Verdict**: {verdict_text(j)}",
        f"- **Judged at**: {'no scale (not measured)' if v.kind in (NOT_MEASURED, NOT_MEASURABLE) else j.scale}",
    ]
    if c.derived:
        lines.append(f"- **Derived**: re-reads the measurement of [{c.derived}]({c.derived}.md); counted once, there")
    if v.why:
        why = v.why[0].upper() + v.why[1:]
        lines += ["", "## Why", "", why + ("" if why.endswith(".") else ".")]
    lines += ["", "## Nulls", ""]
    if j.nulls:
        lines += ["The same rule applied to the committed results as each null would have produced them:", "",
                  "| null | its number | the rule says |", "|---|---|---|"]
        lines += [f"| {NULL_NAMES[r.null]} | {_cell(r.ours)} | {r.kind} |" for r in j.nulls]
        need = ("the Bayes oracle must fail it (this claim says a model fails)" if c.asserts_failure
                else "no trivial predictor may meet it")
        lines += ["", f"For the rule to be able to fail, {need}."]
        if not c.asserts_failure and any(r.null in EXACT_NULLS for r in j.nulls):
            lines.append("For it to test inference, exact inference (the exact posterior as the state) must meet it.")
    elif v.kind in (NOT_MEASURED, NOT_MEASURABLE):
        lines.append("Not applied: there is no measurement of ours to compare with.")
    else:
        lines.append("No null applies: none of the nulls has the quantity this rule reads (an ablation, a training "
                     "curve, a language model's internals, an optimiser's arms), so whether a trivial predictor would "
                     "meet it is not measured.")
    lines += ["", "## Controls", ""]
    if v.controls:
        lines.append("Factors changed by the controls consulted: " + ", ".join(v.controls) + ".")
    else:
        lines.append("None that can speak to it." if v.unheard else "None consulted.")
    if v.unheard:
        lines.append("Run but unable to speak to the disagreement (each read under Why: it has not learned its task, "
                     "is at another scale than the verdict, or the rule cannot settle it), so counted for nothing: " + ", ".join(v.unheard) + ".")
    if v.control:
        lines.append(f"The control that closes it ({v.closed_by}): `{v.control}`.")
    if v.replicated:
        lines.append("Replicated (the same outcome on another model; reported, not a control): "
                     + ", ".join(v.replicated) + ".")
    files = v.cited
    lines += ["", "## Files and command", "", f"Command: `{c.command}`" if c.command != "—" else "Command: —"]
    at_paper = sorted({f"{n.name}-{n.arch}" for n in c.cells if n.preset == "paper"})
    if at_paper and "--preset paper" not in c.command:  # those cells are the scale target's, not the claim's command's
        lines[-1] += (f"; the papers'-size cells it reads ({', '.join(at_paper)}, under `paper/cells/`): "
                      "`windtunnel reproduce scale --preset paper`")
    if files:
        lines += [""] + [f"- `{f}`" for f in files]
    return "\n".join(lines) + "\n"


def slug(cid: str) -> str:
    if not re.fullmatch(r"[A-Z]+\d+\w*", cid):
        raise ValueError(f"claim id {cid!r} is not a file name")
    return f"{cid}.md"
