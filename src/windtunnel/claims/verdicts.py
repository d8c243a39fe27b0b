"""The verdict vocabulary: every word a claim's verdict can carry, defined once, with the conventions by which a
number meets a rule and the rule that decides which controls can speak.

A claim's code computes numbers and applies its rule (:mod:`~windtunnel.claims.rules`, where the conventions below
are implemented); :func:`windtunnel.claims.judge.judge` alone turns that raw outcome, the nulls and the controls into
one of these words.  :data:`DEFINITIONS` is what the front page's glossary and the docs print, word for word.
"""

from __future__ import annotations

AGREE = "agree"
AGREE_BY_CONSTRUCTION = "agree by construction"
IDENTITY = "identity"
INCONCLUSIVE = "inconclusive"
DISAGREE_CLOSES = "disagree — closes under a control"
DISAGREE_PERSISTS = "disagree — persists under controls"
DISAGREE_UNCONTROLLED = "disagree — uncontrolled"
UNINFORMATIVE = "uninformative"
NOT_MEASURED = "not measured"
NOT_MEASURABLE = "not measurable here"

VERDICTS = (AGREE, AGREE_BY_CONSTRUCTION, IDENTITY, INCONCLUSIVE, DISAGREE_CLOSES, DISAGREE_PERSISTS,
            DISAGREE_UNCONTROLLED, UNINFORMATIVE, NOT_MEASURED, NOT_MEASURABLE)
"""Every final verdict, in the order the front page counts them."""

DISAGREE = "disagree"
"""The raw outcome of a rule our number fails: the judge makes it *closes*, *persists*, *uncontrolled* or
*uninformative*; it is never a final verdict."""
RAW = VERDICTS + (DISAGREE,)

REPLICATED = "replicated"
"""Not a verdict but a note beside one: another model (a second language model, another architecture) shows the same
outcome.  It is reported, and never counted as a control — a replicate differs in many factors at once."""

DEFINITIONS: dict[str, str] = {
    AGREE: "our number meets the claim's rule, and no trivial predictor does",
    AGREE_BY_CONSTRUCTION: "the rule is met, but it would be met whatever training did (a model that cannot see the "
                           "context sits at the context-blind floor by its design): listed apart from the "
                           "reproductions",
    IDENTITY: "a mathematical fact that holds for any weights, verified on ours: a check of the derivation and of our "
              "code, not a finding about what training does; listed apart from the reproductions",
    INCONCLUSIVE: "the estimate and the majority of seeds point the papers' way, but the spread does not settle it "
                  "(an interval that holds the bound, or seeds that split); where the estimate or most seeds point "
                  "the other way, it is a disagreement",
    DISAGREE_CLOSES: "our number fails the rule, and a committed control that changes one named factor, has learned "
                     "its task and is judged at the verdict's scale meets it",
    DISAGREE_PERSISTS: "our number fails the rule, and every control that can speak (one factor changed, task "
                       "learned, at the verdict's scale) fails it too; each factor is named",
    DISAGREE_UNCONTROLLED: "our number fails the rule, and no control can speak to it: none was run, or none of those "
                           "run changes one factor, learned its task and is settled by the rule at the verdict's "
                           "scale (those run are named)",
    UNINFORMATIVE: "the rule is met (by our number, or by the control that would close a disagreement) but a trivial "
                   "predictor meets it too; or the rule is failed and exact inference fails it too: either way it does "
                   "not test inference",
    NOT_MEASURED: "no committed artifact yet",
    NOT_MEASURABLE: "impossible with the models and machines available here",
}
"""What each verdict word means: the one definition the front page, the claim pages and the docs print."""

CONVENTIONS: dict[str, str] = {
    "a number": "where the papers give an error figure, our mean meets it when it is at most 1.5× the figure",
    "a range": "a range such as 10⁻³–10⁻⁴ is met at its upper end, with the same 1.5× (0.0015 bits for that one)",
    "an order of magnitude": "'orders of magnitude' is met by a ratio of at least 100; 'an order of magnitude' by 10",
    "a bound on an interval": "agree when the 95% interval over seeds lies wholly on the claimed side of the bound, "
                              "disagree when it lies wholly on the other; when it holds the bound, inconclusive only "
                              "if the mean and most seeds are on the claimed side, else disagree",
    "seeds that split": "agree when every seed meets the rule, disagree when none does; when they split, "
                        "inconclusive only if most seeds (more than half) meet it, else disagree; a mean never "
                        "decides a claim its seeds split on",
    "two quantities": "agree when one's interval lies wholly below the other's, disagree when above; when they "
                      "overlap, inconclusive only if the means are ordered the papers' way, else disagree",
    "controls": "a control speaks to a verdict when it changes one factor from the cell the verdict is judged on, has "
                "learned its task (below half its context-blind floor, and below the one-step filter where the task "
                "has one; for a claim that a model fails to use one part of its input, the sequel's opaque header, at "
                "most halfway from that floor to the exact predictive of a reader blind to that part, since such a "
                "claim cannot ask its controls to succeed) and is judged at that cell's scale; the same rule decides "
                "closing and persisting, and a control that cannot speak is reported beside the verdict and counts "
                "for nothing",
    "replicates": "another model that shows the same outcome is reported as replicated, never as a control",
    "intervals": "a 95% interval is Student's t over seeds, cut to the range its quantity can take (an accuracy to "
                 "[0, 1], a KL to [0, ∞), a correlation to [−1, 1])",
}
"""How a number, a range, an order of magnitude, seeds, pairs and controls are read: stated once, here."""

CONTROL_VARIABLES = ("budget", "data regime", "size", "model size", "task size", "head width", "initialisation",
                     "positions", "layout", "curriculum", "schedule", "state size", "architecture", "mechanism",
                     "step size", "learning rate")
"""The one factor a control changes, as verdicts name it."""


def leans(met: list[bool], estimate_meets: bool | None = None) -> bool:
    """Whether an unsettled reading points the papers' way: more than half of ``met`` (each seed's, or each item's,
    outcome) meet the rule and, where there is one, the estimate (``estimate_meets``) does too.  What separates
    *inconclusive* from a disagreement."""
    majority = sum(met) * 2 > len(met)
    return majority and (estimate_meets is None or estimate_meets)
