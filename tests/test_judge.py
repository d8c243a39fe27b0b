"""One judge, one vocabulary: every verdict word at its boundaries on synthetic evidence, the conventions of the rules
at theirs, and every committed verdict re-derived through the definitions."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from windtunnel import claims
from windtunnel.claims import verdicts
from windtunnel.claims.base import JUDGES_WORDS, RULE_WORDS, Claim, Verdict
from windtunnel.claims.evidence import Measure, pooled, quantity_range
from windtunnel.claims.judge import NullReading, decide
from windtunnel.claims.rules import BelowNulls, EachSeed, Every, EverySeed, IntervalAbove, IntervalBelow, Ordered, AtMost

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
A, I, D = verdicts.AGREE, verdicts.INCONCLUSIVE, verdicts.DISAGREE


@pytest.fixture(scope="module")
def judgements() -> dict[str, claims.Judgement]:
    return claims.judge_all(RESULTS)


def _claim(**kw) -> Claim:
    return Claim("Z1", "I", "v1", "—", "a test claim", "—", "paper", "kl", "a rule", "—", lambda ev: None, **kw)


def _m(*values: float, ci: tuple[float, float] | None = None) -> Measure:
    m = pooled(values)
    return Measure(m.value, ci if ci is not None else m.ci, m.seeds, m.values)


# --- the vocabulary ---------------------------------------------------------------------------------

def test_every_word_is_defined_once_and_the_conventions_are_stated() -> None:
    assert set(verdicts.DEFINITIONS) == set(verdicts.VERDICTS)
    assert set(RULE_WORDS) | set(JUDGES_WORDS) == set(verdicts.RAW)
    assert not set(RULE_WORDS) & set(JUDGES_WORDS)
    for topic in ("a number", "a range", "an order of magnitude", "seeds that split", "controls", "replicates"):
        assert verdicts.CONVENTIONS[topic]
    # the docs print the same definitions, word for word
    docs = (REPO / "docs" / "papers.md").read_text()
    for word, text in verdicts.DEFINITIONS.items():
        assert f"*{word}* — {text}" in docs, word


def test_a_claims_code_cannot_give_the_judges_words() -> None:
    """Only the judge gives *persists*, *uncontrolled*, *uninformative*, *identity* and *agree by construction*."""
    for word in JUDGES_WORDS:
        with pytest.raises(ValueError, match="the judge's word"):
            Verdict(word, "x", "")
    for word in (A, I, D, verdicts.NOT_MEASURED):
        Verdict(word, "x", "")


def test_leaning_needs_a_strict_majority_and_the_estimate() -> None:
    assert verdicts.leans([True, True, False]) and verdicts.leans([True, True, False], True)
    assert not verdicts.leans([True, True, False], False)  # the estimate points the other way
    assert not verdicts.leans([True, False])  # a tie is no majority
    assert not verdicts.leans([True, False, False], True)


# --- the rules' conventions at their boundaries ------------------------------------------------------

def test_an_interval_that_holds_the_bound_is_inconclusive_only_where_it_leans_the_papers_way() -> None:
    rule = IntervalBelow(0.01)
    assert rule.kind(_m(0.004, 0.005, 0.006)) == A
    assert rule.kind(Measure(0.02, (0.01, 0.03), 3, (0.015, 0.02, 0.025))) == D  # lower end at the bound: disagree
    assert rule.kind(Measure(0.008, (0.0, 0.016), 3, (0.002, 0.007, 0.015))) == I  # mean and 2 of 3 seeds below
    assert rule.kind(Measure(0.012, (0.0, 0.024), 3, (0.002, 0.016, 0.018))) == D  # mean above: points against
    assert rule.kind(Measure(0.009, (0.0, 0.02), 3, (0.0, 0.013, 0.014))) == D  # mean below, but 1 seed of 3
    above = IntervalAbove(0.5)
    assert above.kind(Measure(0.6, (0.45, 0.75), 3, (0.55, 0.6, 0.65))) == I
    assert above.kind(Measure(0.4, (0.25, 0.55), 3, (0.3, 0.4, 0.5))) == D


def test_seeds_that_split_are_inconclusive_only_where_most_meet_the_rule() -> None:
    rule = EverySeed(0.9, "≥")
    assert rule.kind(_m(0.95, 0.96, 0.97)) == A
    assert rule.kind(_m(0.95, 0.96, 0.1)) == D  # 2 of 3 meet it, but the mean (0.67) does not
    assert rule.kind(_m(0.95, 0.96, 0.85)) == I
    assert rule.kind(_m(0.95, 0.1, 0.1)) == D
    assert rule.kind(_m(0.1, 0.2, 0.3)) == D
    each = EachSeed("the head is in layer 0")
    assert each.kind([True, True, False]) == I and each.kind([True, False, False]) == D
    assert each.kind([True, True]) == A and each.kind([True, False]) == D
    nulls = BelowNulls()
    assert nulls.kind([0.1, 0.1, 0.5], [(0.3, 0.4)] * 3) == I and nulls.kind([0.1, 0.5, 0.5], [(0.3, 0.4)] * 3) == D


def test_overlapping_pairs_are_inconclusive_only_where_the_means_and_seeds_are_ordered_so() -> None:
    rule = Ordered("Mamba", "the transformer")
    assert rule.kind(Measure(1.0, (0.9, 1.1)), Measure(2.0, (1.9, 2.1))) == A
    assert rule.kind(Measure(2.0, (1.9, 2.1)), Measure(1.0, (0.9, 1.1))) == D
    assert rule.kind(Measure(1.0, (0.0, 2.0), 3, (0.5, 1.0, 1.5)), Measure(1.2, (0.0, 2.4), 3, (0.6, 1.1, 1.9))) == I
    # overlapping with the means reversed — the Mamba-beats-the-transformer reading of a worse Mamba — disagrees
    assert rule.kind(Measure(1.2, (0.0, 2.4), 3, (0.6, 1.1, 1.9)), Measure(1.0, (0.0, 2.0), 3, (0.5, 1.0, 1.5))) == D
    # the means ordered so, but only one seed of three paired the same way
    assert rule.kind(Measure(1.0, (0.0, 2.0), 3, (0.1, 1.4, 1.5)), Measure(1.1, (0.0, 2.2), 3, (1.9, 0.6, 0.8))) == D


def test_items_that_split_are_no_majority() -> None:
    every = Every(AtMost(0.5), "model", split=True)
    assert every.kind([_m(0.1), _m(0.2)]) == A
    assert every.kind([_m(0.1), _m(0.9)]) == D  # one model of two
    assert every.kind([_m(0.1), _m(0.2), _m(0.9)]) == I


def test_a_range_is_met_at_its_upper_end_with_the_error_tolerance() -> None:
    a1 = claims.CLAIMS["A1"]
    assert a1.rule_object.kind(Measure(0.0015)) == A
    assert a1.rule_object.kind(Measure(0.0016)) == D
    assert a1.rule_object.kind(Measure(0.0023)) == D  # the main job's committed figure of the last reading: 2.3×


def test_intervals_are_cut_to_what_their_quantity_can_take() -> None:
    acc = pooled([1.0, 1.0, 0.0129], bounds=quantity_range("accuracy"))
    assert acc.ci[0] == 0.0 and acc.ci[1] == 1.0 and acc.value == pytest.approx(0.6710, abs=1e-4)
    raw = pooled([1.0, 1.0, 0.0129])
    assert raw.ci[0] < 0 and raw.ci[1] > 1  # what the cut prevents: [-74%, 209%]
    kl = pooled([0.039, 0.194, 0.054], bounds=quantity_range("kl"))
    assert kl.ci[0] == 0.0 and kl.ci[1] == pytest.approx(raw_upper := pooled([0.039, 0.194, 0.054]).ci[1]) and raw_upper > 0
    assert quantity_range("value_manifold.final_resid_spearman_pc1_entropy") == (-1.0, 1.0)
    assert quantity_range("value_manifold.final_attn_out_spearman_abs_pc1_entropy") == (0.0, 1.0)
    assert quantity_range("probes.final_entropy_r2") == (-math.inf, 1.0)
    assert quantity_range("routing_law.max_score_rel_error") == (0.0, math.inf)
    assert quantity_range("qk_alignment.alignment_by_layer") == (-math.inf, math.inf)
    assert quantity_range("train_s") == (0.0, math.inf)  # a time in seconds
    # an element of a statistic's list, or its extreme, is the statistic: a KL by layer is a KL
    assert quantity_range("state_patching.summary.at_t_patched_kl_by_layer.0") == (0.0, math.inf)
    assert quantity_range("attention_focusing.summary.entropy_by_layer.min") == (0.0, math.inf)
    assert quantity_range("belief_geometry.layers.0.r2") == (-math.inf, 1.0)
    assert quantity_range("qk_alignment.alignment_by_layer.2") == (-math.inf, math.inf)


def test_no_committed_fact_or_page_prints_an_interval_outside_its_quantity() -> None:
    """Every ``cells:`` fact span of the documents (README, docs, results) prints its interval inside the range of
    the quantity it reads — a KL, a time, an accuracy never below 0 — and no page prints a percentage as ``-0%``."""
    from windtunnel.claims.docs import FACT, documents

    number = r"-?[\d.]+(?:e[-+]?\d+)?"
    checked = 0
    for doc in documents(REPO):
        text = doc.read_text()
        assert "-0%" not in text, doc
        for m in FACT.finditer(text):
            key, said = m.group(1), m.group(2)
            if not key.startswith("cells:"):
                continue
            lo_hi = re.fullmatch(rf"{number} \[({number}), ({number})\]", said.strip())
            if lo_hi is None:
                continue
            low, high = quantity_range(key.rsplit(":", 1)[1].removesuffix(".value"))
            assert low <= float(lo_hi[1]) and float(lo_hi[2]) <= high, (doc.name, key, said)
            checked += 1
    assert checked >= 20


# --- the judge at every boundary ---------------------------------------------------------------------

def _null(name: str, kind: str) -> NullReading:
    return NullReading(name, kind, "n")


def test_the_judge_gives_every_word_at_its_boundary() -> None:
    agree = Verdict(A, "x", "")
    assert decide(_claim(), agree, ()).kind == A
    assert decide(_claim(), agree, (_null("context_blind", D), _null("untrained", D))).kind == A
    assert decide(_claim(), agree, (_null("context_blind", A),)).kind == verdicts.UNINFORMATIVE
    assert decide(_claim(), agree, (_null("oracle", A),)).kind == A  # the oracle meeting a rule is no objection
    assert decide(_claim(identity=True), agree, ()).kind == verdicts.IDENTITY
    built = decide(_claim(by_construction="it cannot see the context"), agree, ())
    assert built.kind == verdicts.AGREE_BY_CONSTRUCTION and "cannot see the context" in built.why
    failing = _claim(asserts_failure=True)
    assert decide(failing, agree, (_null("context_blind", A), _null("oracle", D))).kind == A
    assert decide(failing, agree, (_null("oracle", A),)).kind == verdicts.UNINFORMATIVE
    from windtunnel.claims.base import Control

    failed, met = Control("budget", D, cite="c/eval.json"), Control("budget", A, cite="c/eval.json")
    assert decide(_claim(), Verdict(D, "x", "", consulted=(failed,)), ()).kind == verdicts.DISAGREE_PERSISTS
    assert decide(_claim(), Verdict(D, "x", ""), ()).kind == verdicts.DISAGREE_UNCONTROLLED
    unlearned = Control("budget", D, learned=False, cite="c/eval.json")
    assert decide(_claim(), Verdict(D, "x", "", consulted=(unlearned,)), ()).kind == verdicts.DISAGREE_UNCONTROLLED
    assert decide(_claim(), Verdict(D, "x", ""), (_null("bayes_state", D),)).kind == verdicts.UNINFORMATIVE
    closes = Verdict(D, "x", "", consulted=(met,))
    assert decide(_claim(), closes, ()).kind == verdicts.DISAGREE_CLOSES
    assert decide(_claim(), closes, (_null("untrained", A),)).kind == verdicts.UNINFORMATIVE
    assert decide(_claim(), Verdict(I, "x", ""), (_null("untrained", A),)).kind == I
    for kind in (verdicts.NOT_MEASURED, verdicts.NOT_MEASURABLE):
        assert decide(_claim(), Verdict(kind, None, ""), ()).kind == kind
    # a replicate is reported, never a control: a disagreement replicated on another model is still uncontrolled
    assert decide(_claim(), Verdict(D, "x", "", replicated=("Gemma-3-270M",)), ()).kind == verdicts.DISAGREE_UNCONTROLLED


# --- every committed verdict, through the definitions ------------------------------------------------

def test_every_committed_verdict_is_rederived_from_its_evidence(judgements) -> None:
    """Each claim's word follows from its raw outcome and its nulls by the judge alone, and the committed page says
    that word."""
    for cid, j in judgements.items():
        assert j.verdict.judged and j.verdict.kind in verdicts.VERDICTS
        assert decide(j.claim, j.raw, j.nulls).kind == j.kind
        if j.kind == verdicts.DISAGREE_CLOSES:  # the control is itself a committed file, and its factor is named
            assert (RESULTS / j.verdict.control.split(" ")[0]).is_file() and j.verdict.closed_by in j.verdict.controls
        page = (RESULTS / "claims" / f"{cid}.md").read_text()
        assert re.search(rf"- \*\*Verdict\*\*: {re.escape(j.kind)}", page), cid


def test_no_committed_inconclusive_leans_against_the_papers(judgements) -> None:
    """Where an inconclusive verdict's number is a measure whose rule reads it alone, the rule's own reading leans the
    papers' way: the glossary's definition holds on every such row."""
    for cid, j in judgements.items():
        rule, ours = j.claim.rule_object, j.verdict.ours
        if j.kind == I and isinstance(rule, (IntervalBelow, EverySeed)) and isinstance(ours, Measure):
            assert rule.kind(ours) == I, cid


def test_no_page_prints_an_interval_outside_its_quantitys_range(judgements) -> None:
    """Percentages in [0, 100] and |ρ| in [0, 1] on every page."""
    texts = [(RESULTS / "CLAIMS.md").read_text()] + [p.read_text() for p in (RESULTS / "claims").glob("*.md")]
    pct = re.compile(r"(?<![↓↑+\-−\w])(\d+(?:\.\d+)?)% \[(-?\d+(?:\.\d+)?)%, (-?\d+(?:\.\d+)?)%\]")
    rho = re.compile(r"\|ρ\| (\d\.\d+) \[(-?\d+(?:\.\d+)?), (-?\d+(?:\.\d+)?)\]")
    # a jump, a ratio or an accuracy cannot go below zero
    nonneg = re.compile(r"(?:jump|ratio to runner-up|accuracy|responsibility|the papers' size) (\d+(?:\.\d+)?) \[(-\d[^,]*),")
    for text in texts:
        assert not nonneg.search(text), nonneg.search(text).group(0)
        for m in pct.finditer(text):
            assert 0 <= float(m.group(2)) and float(m.group(3)) <= 100, m.group(0)
        for m in rho.finditer(text):
            assert 0 <= float(m.group(2)) and float(m.group(3)) <= 1, m.group(0)


def test_the_front_pages_counts_add_up(judgements) -> None:
    page = (RESULTS / "CLAIMS.md").read_text()
    total = int(re.search(r"\*\*(\d+) claims of the papers are judged\*\*", page).group(1))
    scale = next(line for line in page.splitlines() if line.startswith("- **Scale**"))
    assert sum(int(n) for n in re.findall(r"(\d+) (?:judged at|not measured)", scale)) == total
    assert f"({total} in all)" in scale
    counted = [j for j in judgements.values() if j.claim.counted]
    assert len(counted) == total
    # a claim never measured carries no scale in its row
    for j in counted:
        if j.kind in (verdicts.NOT_MEASURED, verdicts.NOT_MEASURABLE):
            row = next(line for line in page.splitlines() if line.startswith(f"| [{j.claim.id}]"))
            assert row.rstrip(" |").endswith("—"), row


def test_one_rule_decides_which_controls_speak_for_closing_and_for_persisting() -> None:
    """A control speaks when it learned its task, is at the verdict's scale and is settled by the rule: the same
    test for a control that would close the disagreement and one that would make it persist."""
    from windtunnel.claims.base import Control

    def judged(*controls: Control) -> Verdict:
        return decide(_claim(), Verdict(D, "x", "", consulted=controls), ())

    meets = Control("budget", A, cite="quick/cells/c-s0/eval.json (and seeds 1, 2)")
    v = judged(meets, Control("size", D))
    assert v.kind == verdicts.DISAGREE_CLOSES and v.closed_by == "budget" and v.control == meets.cite
    assert v.controls == ("budget", "size")
    for silent in (Control("budget", A, learned=False, cite="c"), Control("budget", A, at_scale=False, cite="c"),
                   Control("budget", I, cite="c")):
        alone = judged(silent)
        assert alone.kind == verdicts.DISAGREE_UNCONTROLLED and alone.unheard == ("budget",), silent
        beside = judged(silent, Control("size", D))
        assert beside.kind == verdicts.DISAGREE_PERSISTS and beside.controls == ("size",)
        assert beside.unheard == ("budget",) and "the budget control" in beside.why
    # a reduced-scale control can neither close a papers'-size verdict nor make it persist
    assert judged(Control("head width", D, at_scale=False)).kind == verdicts.DISAGREE_UNCONTROLLED
    assert judged(Control("head width", D, learned=False)).kind == verdicts.DISAGREE_UNCONTROLLED
    with pytest.raises(ValueError, match="outcome"):
        Control("budget", verdicts.DISAGREE_PERSISTS)
    with pytest.raises(ValueError, match="unknown control variable"):
        Control("luck", D)
    # several silent for one reason read as one line, not once each
    many = judged(Control("positions", D, learned=False, cite="a"), Control("positions", D, learned=False, cite="b"),
                  Control("size", D))
    assert many.why.count("positions control") == 1 and "the positions controls have not learned their task" in many.why


def test_a_claim_cannot_name_what_its_controls_decide() -> None:
    """Closing, persisting and silence are the judge's words: a verdict a claim builds that sets the control that
    closes it, the factors that persist or the unheard ones is refused, as is the word *closes* itself."""
    for kwargs in ({"controls": ("budget",)}, {"unheard": ("budget",)}, {"control": "c/eval.json"},
                   {"closed_by": "budget"}):
        with pytest.raises(ValueError, match="judge"):
            Verdict(D, "x", "", **kwargs)
    with pytest.raises(ValueError, match="judge"):
        Verdict(verdicts.DISAGREE_CLOSES, "x", "", control="c/eval.json", closed_by="budget")
    assert verdicts.DISAGREE_CLOSES not in RULE_WORDS and "model" not in verdicts.CONTROL_VARIABLES


def test_a_null_is_scored_on_the_cell_the_verdict_is_judged_on(judgements) -> None:
    """Which cell a verdict is judged on is a fact of the trained models: B1, judged on the papers' own cell at their
    size, has its untrained null read there too (the mean of that cell's untrained layer-0 |cos| over its seeds), not
    at the reduced scale whose untrained keys differ."""
    import json

    j = judgements["B1"]
    files = [RESULTS / "paper" / "cells" / f"main_paper_size-transformer-s{s}" / "geometry.json" for s in (0, 1, 2)]
    if not j.scale.startswith("the papers' size") or not all(f.is_file() for f in files):
        pytest.skip("B1 is not judged at the papers' size in the committed results")
    untrained = [json.loads(f.read_text())["key_orthogonality"]["summary"]["layer0_untrained"] for f in files]
    reading = next(r for r in j.nulls if r.null == "untrained")
    assert float(reading.ours.split(" ")[0]) == pytest.approx(sum(untrained) / 3, rel=5e-3)
