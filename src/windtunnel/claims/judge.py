"""From a claim's rule to its verdict: the nulls, the controls and the scale.

A claim's ``assess`` applies its rule to our number and returns a raw :class:`Verdict` (*agree*, *inconclusive*,
*disagree* …).  :func:`judge` makes it a verdict a reader can trust:

1. **The rule must be able to fail.**  The same rule is applied to the committed results as each null of
   :data:`~windtunnel.claims.evidence.NULLS` would have produced them (:class:`NullEvidence`): the context-blind
   optimum, the untrained model, an always-certain or always-uniform answer, and the Bayes oracle.  A claim that
   agrees while a trivial null meets its rule too is *uninformative*: the rule cannot tell a model that does what
   the papers say from one that does nothing (for a language model, also the same model on prompts whose labels carry
   no evidence: a rule it meets there is not about evidence).  The same holds of a disagreement that *closes under a
   control*: a control meeting a rule that a trivial null meets too settles nothing.  A claim that a model *fails*
   (``Claim.asserts_failure``) is meant to be met by a trivial null; its rule must instead be failed by the oracle.
2. **A disagreement says what controls it.**  A control that can speak (it changes one factor, learned its task, is
   at the verdict's scale and the rule settles it) and meets the rule where the claim's own cell does not makes the
   disagreement *close under a control*; one that can speak and fails it makes it *persist under controls*; with no
   control that can speak it is *uncontrolled*.
   A claim never names the outcome of its controls itself: it declares them (``Verdict.consulted``) and
   :func:`with_controls_decided` reads them all by one rule.
   A disagreement with a rule that exact inference fails too (:data:`EXACT_NULLS`: the exact posterior taken as a
   language model's state) is *uninformative* as well: the rule asks for something exact inference does not do, so
   failing it says nothing about inference.
3. **The scale is stated**: the papers' size where the verdict was judged on a paper-size cell, the production
   language models for Paper III's, reduced scale otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from ..errors import UserError
from .base import (AGREE, AGREE_BY_CONSTRUCTION, DISAGREE, DISAGREE_CLOSES, DISAGREE_PERSISTS, DISAGREE_UNCONTROLLED,
                   IDENTITY, NOT_MEASURABLE, NOT_MEASURED, UNINFORMATIVE, Claim, Control, Verdict)
from .evidence import NULLS, Evidence, NullEvidence

REDUCED_SCALE = "reduced scale (≈200k-parameter models; bijection at V=10 unless the claim names V=20)"
SCALES = {"paper/": "the papers' size (the paper preset's 2.68M-parameter cells)",
          "llm/matched/": "small language models trained here (Llama layout, 4 layers, width 128)",
          "llm/": "production language models (SmolLM2-135M, Gemma-3-270M; 4-bit)",
          "routing/": "Paper II's own small models"}
"""The scale a verdict is judged at, by where its number's files live (the first match; else :data:`REDUCED_SCALE`)."""

NULL_NAMES = {"context_blind": "the context-blind optimum", "oracle": "the Bayes oracle",
              "window_1": "the posterior given only the latest observation (no belief carried along the sequence)",
              "untrained": "the untrained model", "always_certain": "an always-certain answer",
              "always_uniform": "an always-uniform answer",
              "no_evidence": "the same model on prompts whose labels carry no evidence",
              "permuted": "the same values with each dimension shuffled across prompts (no shared structure)",
              "random_axis": "the same cut along a random axis instead of the entropy axis",
              "k_only": "a representation that knows only how many examples the prompt shows",
              "bayes_state": "the exact posterior as the model's state (what exact inference would show)"}


EXACT_NULLS = ("bayes_state",)
"""The nulls that stand for exact inference itself rather than a trivial predictor: a rule one of them fails (where
the claim does not say a model fails) does not test inference.  (The Bayes oracle of a cell is not among them: it
replaces every model of a comparison at once, so a ratio or an ablation of it says nothing.)"""


@dataclass(frozen=True)
class NullReading:
    """The claim's rule applied to one null: its raw verdict and the null's number."""

    null: str
    kind: str
    ours: str

    @property
    def meets(self) -> bool:
        return self.kind == AGREE


@dataclass(frozen=True)
class Judgement:
    """A claim's final verdict with what it was judged against: the raw verdict of its rule, the readings of
    every null the rule applies to, and the scale."""

    claim: Claim
    verdict: Verdict
    raw: Verdict
    nulls: tuple[NullReading, ...]
    scale: str

    @property
    def kind(self) -> str:
        return self.verdict.kind


def null_evidence(ev: Evidence) -> dict[str, NullEvidence]:
    """One :class:`NullEvidence` per null over ``ev``'s results folder (built once, shared by every claim)."""
    return {n: NullEvidence(ev.root, ev.preset, **ev.scope(), null=n) for n in NULLS}


def scale_of(v: Verdict) -> str:
    """The scale ``v`` was judged at: its own where its rule set one, else read from its number's first file."""
    if v.scale:
        return v.scale
    files = v.cited
    for prefix, scale in SCALES.items():
        if files and files[0].startswith(prefix):
            return scale
    return REDUCED_SCALE


def read_nulls(claim: Claim, nulls: Mapping[str, Evidence], ours: Verdict | None = None) -> tuple[NullReading, ...]:
    """``claim``'s rule on every null it applies to.  A null does not apply where the rule reads nothing a null
    rewrites (its number is ours to the digit: a fact of the setup, not of the model) or reads something no null has
    (the rule is not measured on it, or raises on the null's values)."""
    out = []
    for name, evidence in nulls.items():
        try:
            v = claim.assess(evidence)
        except (UserError, KeyError, TypeError, ValueError, IndexError, ZeroDivisionError, AttributeError):
            continue
        if v.kind in (NOT_MEASURED, NOT_MEASURABLE):
            continue
        if ours is not None and v.ours_text == ours.ours_text:
            continue
        out.append(NullReading(name, v.kind, v.ours_text))
    return tuple(out)


def judge(claim: Claim, ev: Evidence, nulls: Mapping[str, Evidence] | None = None) -> Judgement:
    """``claim``'s final verdict on ``ev`` (see the module docstring): the one place a verdict gets its final word
    (:mod:`~windtunnel.claims.verdicts` defines them)."""
    raw = claim.assess(ev)
    if raw.judged:
        raise ValueError(f"claim {claim.id}: its assess returned a judged verdict; it must return its rule's outcome")
    readings = () if raw.kind in (NOT_MEASURED, NOT_MEASURABLE) else read_nulls(claim, nulls or null_evidence(ev), raw)
    return Judgement(claim, decide(claim, raw, readings), raw, readings, scale_of(raw))


def with_controls_decided(raw: Verdict) -> Verdict:
    """A disagreement's controls read by the one rule (:data:`~windtunnel.claims.verdicts.CONVENTIONS`, "controls"):
    only a control that changes one factor, learned its task, is at the verdict's scale and is settled by the rule
    speaks; the first that speaks and meets the rule closes the disagreement, and one that speaks and fails it makes
    the disagreement persist under its factor; the others are named as unable to speak.  A verdict that declares no
    controls (``Verdict.consulted``) keeps the factors it names."""
    if raw.kind != DISAGREE or not raw.consulted:
        return raw
    speaking = [c for c in raw.consulted if c.speaks]
    closing = next((c for c in speaking if c.outcome == AGREE), None)
    factors = tuple(dict.fromkeys(c.factor for c in raw.consulted))
    if closing is not None:
        return replace(raw, kind=DISAGREE_CLOSES, control=closing.cite, closed_by=closing.factor, controls=factors,
                       unheard=(), judged=True, why=f"{raw.why}; the {closing.factor} control meets the rule and can speak: it "
                                       "closes the disagreement")
    failed = tuple(dict.fromkeys(c.factor for c in speaking if c.outcome == DISAGREE))
    silent = [c for c in raw.consulted if not c.speaks and c.factor not in failed]
    # one line per factor and reason: four position controls that did not learn read as one
    said = "; ".join(dict.fromkeys(f"the {c.factor} control{'s' if _many(silent, c) else ''} "
                                   f"{_plural(c.why_silent) if _many(silent, c) else c.why_silent}" for c in silent))
    return replace(raw, controls=failed, unheard=tuple(dict.fromkeys(c.factor for c in silent)), judged=True,
                   why=raw.why + (f"; unable to speak: {said}" if said else ""))


def _many(controls: list[Control], c: Control) -> bool:
    """Whether more than one of ``controls`` changes ``c``'s factor and is silent for ``c``'s reason."""
    return sum(x.factor == c.factor and x.why_silent == c.why_silent for x in controls) > 1


def _plural(reason: str) -> str:
    """A control's reason for silence, said of several: "has not learned" → "have not learned", "is" → "are"."""
    return reason.replace("has not", "have not").replace("is not", "are not").replace("its task", "their task")


def decide(claim: Claim, raw: Verdict, readings: tuple[NullReading, ...]) -> Verdict:
    """The final word from a rule's raw outcome and the nulls' readings of the same rule:

    * a rule met (by ours, or by the closing control) that a trivial null meets too → *uninformative* (for a claim
      that a model fails: that the Bayes oracle meets too);
    * a rule failed that exact inference fails too → *uninformative*;
    * a rule failed → *persists* where a control that can speak failed it too (``raw.controls``), else
      *uncontrolled*;
    * a rule met → *identity* for an identity, *agree by construction* for a rule no training could fail, else
      *agree*;
    * *inconclusive*, *not measured* and *not measurable here* stand as the rule gave them."""
    raw = with_controls_decided(raw)

    def final(kind: str, why: str = "") -> Verdict:
        return replace(raw, kind=kind, why=f"{raw.why}; {why}" if raw.why and why else (why or raw.why), judged=True)

    exact_fails = not claim.asserts_failure and any(r.null in EXACT_NULLS and r.kind == DISAGREE for r in readings)
    if raw.kind == DISAGREE and exact_fails:  # a rule exact inference fails does not test inference
        return final(UNINFORMATIVE, "the exact posterior taken as the model's state fails the rule too: it does not "
                                    "ask for what exact inference does")
    if raw.kind == DISAGREE:
        return final(DISAGREE_PERSISTS if raw.controls else DISAGREE_UNCONTROLLED)
    if raw.kind in (AGREE, DISAGREE_CLOSES):  # a rule met (by ours, or by the closing control) must be able to fail
        if claim.asserts_failure:
            able = [r for r in readings if r.null in ("oracle",) + EXACT_NULLS]
        else:
            able = [r for r in readings if r.null not in ("oracle",) + EXACT_NULLS]
        met = [r for r in able if r.meets]
        if met:
            who = "; ".join(f"{NULL_NAMES[r.null]} {r.ours}" for r in met)
            why = ("the Bayes oracle meets this failure rule too" if claim.asserts_failure
                   else f"a trivial predictor meets the rule too: {who}")
            if raw.kind == DISAGREE_CLOSES:
                why = f"the control that meets the rule ({raw.control}) does not settle it: {why}"
            return final(UNINFORMATIVE, why)
    if raw.kind == AGREE and claim.identity:
        return final(IDENTITY)
    if raw.kind == AGREE and claim.by_construction:
        return final(AGREE_BY_CONSTRUCTION, claim.by_construction)
    return final(raw.kind)
