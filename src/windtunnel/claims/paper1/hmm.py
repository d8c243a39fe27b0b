"""Paper I's HMM filtering behaviour (A6–A9, A15–A17): the transformer's, Mamba's, the LSTM's and the MLP's
error at K=20, each error claim judged against the HMM controls (:func:`~.controls.hmm_verdict`)."""

from __future__ import annotations

from dataclasses import replace

from ...run.grid import SEEDS
from ..base import AGREE, DISAGREE, Verdict, claim, missing, reads
from ..evidence import Evidence, Measure, quantity_range
from ..rules import AtLeast, AtMost
from .common import (BY_CONSTRUCTION, FAILS, FLOOR_FRACTION, MAMBA_BELOW, REPRO, TABLE, cited, error_rule, fails, lower,
                     with_files)
from .controls import (BUDGET_COLUMN, DATA_COLUMN, HmmControl, PAPER_CELLS, hmm_control, hmm_controls, hmm_verdict,
                       judged_cell)


A6_RULE = AtMost(7.5e-5)


@claim("A6", "I", "v1", "Table 1", "HMM filtering: the transformer's error at K=20", "7.5×10⁻⁵ bits (a KL)", "secondary",
       "kl (bits) at K=20, transformer, 3 seeds; controls: the same cell trained four times as long, on fresh "
       "episodes and on a fixed set of 10,000 (the authors' regime), the authors' regime at the papers' size "
       "(the paper preset's cells), and the cell from PyTorch's default initialisation; beside them, the error read as the entropy error instead of the KL",
       A6_RULE, f"{TABLE}; {REPRO}", rule_note="judged on the papers' own cell at their size (hmm_fixed@paper) where it "
       "learned the task and the quick cell has not (there, only a control at that size can close it); elsewhere a "
       "control that learned the task and reaches that level closes the gap; the gap persists under every control "
       "that does not reach it",
       doubt="no released result of the authors holds it, and their own later figure for the same model is 0.049 bits "
       "(A7), which Paper III restates as KL < 0.05 bits (A6b): 650× larger",
       cells=reads("hmm", "hmm_fixed", "hmm_long", "hmm_torch_init", "hmm_fixed@paper", geometry=True))
def _a6(ev: Evidence) -> Verdict:
    m = ev.table("hmm", "transformer", "kl")
    if m is None:
        return missing("table cell")
    ok, why = error_rule(m, 7.5e-5)
    if ok:
        return Verdict(AGREE, m, why)
    v = hmm_verdict(ev, m, A6_RULE, why, 7.5e-5, mechanism=True)
    if v.kind != DISAGREE:
        return v
    # a note, not a control: the figure is read as a KL (the authors' code computes KL), and the entropy error,
    # the weaker metric (near 0 with a wrong posterior of the right entropy), cannot explain a KL gap
    read = _entropy_error_reading(ev)
    if not read:
        return v
    closes = any(A6_RULE.kind(e) == AGREE for _, e in read)
    return replace(v, why=v.why + "; read as the entropy error instead of the KL (the papers' \"MAE\" may name either): "
                   + ", ".join(f"{name} {e.text()}, {e.value / 7.5e-5:.2g}× the papers' figure" for name, e in read)
                   + (" — that reading meets the figure" if closes else " — that reading does not meet it either"))


def _entropy_error_reading(ev: Evidence) -> list[tuple[str, Measure]]:
    """The HMM transformer's error read as the other metric the papers' HMM "MAE" may name: the entropy error
    ``entropy_mae_curve`` (|mean H(model) − mean H(posterior)| per position, averaged over positions) of the
    column and of the authors' regime at the papers' size, each ``(name, measure)``; the ones committed."""
    out = []
    for name, at, column in (("the column", ev, "hmm"), ("the papers' size", ev.at("paper"), DATA_COLUMN)):
        e = at.cell_stat(column, "transformer", SEEDS, "eval.json",
                         lambda d: float(d["metrics"]["entropy_mae_curve"]["value"]),
                         quantity_range("entropy_mae_curve"))
        if e is not None:
            out.append((name, e))
    return out


A6B_RULE = AtMost(0.05, factor=1.0, of="Paper III's")


@claim("A6b", "III", "v1", "§2", "Paper III's restatement: HMM posteriors matched with KL below 0.05 bits",
       "KL < 0.05 bits", "paper-p3", "kl (bits) at K=20, transformer, 3 seeds",
       A6B_RULE, f"{TABLE}; {REPRO}", derived="A6", rule_note="judged where A6 is; closes under a control that learned the task "
       "if its mean does", cells=reads("hmm", "hmm_fixed", "hmm_fixed@paper", "hmm_long", "hmm_torch_init"))
def _a6b(ev: Evidence) -> Verdict:
    m = ev.table("hmm", "transformer", "kl")
    if m is None:
        return missing("table cell")
    if A6B_RULE.kind(m) == AGREE:
        return Verdict(AGREE, m, "below 0.05 bits")
    return hmm_verdict(ev, m, A6B_RULE, "above 0.05 bits at 2000 steps", None)


@claim("A7", "I", "v3", "primitives table", "HMM transformer error in the primitives table", "0.049 bits",
       "secondary", "kl (bits) at K=20, transformer, 3 seeds",
       AtMost(0.049),
       f"{TABLE}; {REPRO}", derived="A6", rule_note="closes under a longer-run control if its mean reaches it")
def _a7(ev: Evidence) -> Verdict:
    m = ev.table("hmm", "transformer", "kl")
    if m is None:
        return missing("table cell")
    ok, why = error_rule(m, 0.049)
    if ok:
        return Verdict(AGREE, m, why)
    return hmm_verdict(ev, m, AtMost(0.049), why, 0.049)


PAPER_TABLE_SCALE = "the papers' size (the paper table's recipe: 2.69M parameters, 50,000 steps on fresh episodes)"


@claim("A8", "I", "v1 / v3", "Table 1", "The MLP fails HMM filtering", "≈ 0.409 / 0.40 bits", "secondary",
       "kl (bits), mlp_pointwise, 3 seeds: the paper table's HMM cell at the papers' size (2.69M parameters, 50,000 "
       "steps on fresh episodes) where committed, else the quick table's", FAILS, TABLE,
       asserts_failure=True,
       threshold="≥ 90% of the context-blind floor (the papers give 0.409 / 0.40 bits)",
       cells=reads("hmm@paper", arch="mlp_pointwise"), by_construction=BY_CONSTRUCTION)
def _a8(ev: Evidence) -> Verdict:
    v = fails(ev, "hmm", "mlp_pointwise", "kl")
    paper = ev.eval_metric("hmm@paper", "mlp_pointwise", SEEDS, "kl")
    floor = ev.cell_stat("hmm@paper", "mlp_pointwise", SEEDS, "references.json",
                         lambda r: r["context_blind"]["metrics"]["kl"])
    if paper is None or floor is None:
        return v
    # the floor of the cells' own evaluation episodes, so that the share compares like with like
    beside = (f"; at reduced scale (the quick table) {v.ours.text()}, {v.why}"
              if isinstance(v.ours, Measure) else "")
    ours = with_files(paper, floor, *((v.ours,) if isinstance(v.ours, Measure) else ()))
    return Verdict(FAILS.kind(paper, floor.value), ours,
                   f"on the paper table's cell: {paper.value / floor.value:.0%} of the context-blind floor "
                   f"{floor.value:.3f} on the same episodes (fails when ≥ {FLOOR_FRACTION:.0%}){beside}",
                   scale=PAPER_TABLE_SCALE)


A9_RULE = AtLeast(547, "our ratio")


@claim("A9", "I", "v1", "Table 1", "MLP / transformer separation on HMM", "≈ 5,467×", "secondary",
       "ratio of kl: mlp_pointwise / transformer (table); controls: A6's, each against the same MLP",
       A9_RULE, TABLE, derived="A6",
       cells=reads("hmm", "hmm_fixed", "hmm_long", "hmm_torch_init", "hmm_fixed@paper")
       + reads("hmm@paper", arch="mlp_pointwise"),
       doubt="the ratio of the MLP's 0.41 bits to A6's 7.5×10⁻⁵, which no released result of the authors holds (A6)",
       rule_note="547 is one decade below the papers' 5,467; judged where A6 is (on the papers' own cells, the paper "
       "table's MLP over hmm_fixed@paper, where the quick HMM cell has not learned the task)", threshold="at least 547×, a decade below the papers' figure")
def _a9(ev: Evidence) -> Verdict:
    mlp, tr = ev.table("hmm", "mlp_pointwise", "kl"), ev.table("hmm", "transformer", "kl")
    if mlp is None or tr is None:
        return missing("table cells")
    why = "follows from A6: the transformer's HMM error is the gap"
    # judged where A6 is: on the papers' own cell at their size where it learned the task and the quick cell has not
    ctls = hmm_controls(ev)
    own, unlearned, others = judged_cell(ctls, ev)
    scale = ""
    if own is not None:
        big = ev.eval_metric("hmm@paper", "mlp_pointwise", SEEDS, "kl")  # the paper table's MLP where committed
        top = big or mlp
        r = Measure(top.value / own.measure.value, None, own.measure.seeds, (),
                    cited(top, own.measure, mlp, tr, unlearned))
        why += (f"; judged on the papers' own cell at their size (it learned the task, and the quick cell has not): "
                f"the MLP's {top.value:.3f} bits" + (" (the paper table's cell: 2.69M parameters, 50,000 steps on "
                "fresh episodes; it sits at the context-blind floor whatever its recipe, A8)" if big else "")
                + f" over the transformer's {own.measure.value:.2g}; at reduced scale {mlp.value / tr.value:.0f}×")
        scale = PAPER_CELLS[own.column]
    else:
        r = Measure(mlp.value / tr.value, None, tr.seeds, (), cited(mlp, tr))
    if A9_RULE.kind(r) == AGREE:
        return Verdict(AGREE, r, why, scale=scale)

    def meets(c: HmmControl) -> bool:
        return A9_RULE.kind(Measure(mlp.value / c.measure.value)) == AGREE

    # A6's controls, read by this rule: the MLP's error over each control's (the MLP sits at the context-blind floor
    # whatever the budget or data regime, A8; a pointwise network has nothing more to learn)
    where = "; ".join(f"against {c.name} {mlp.value / c.measure.value:.0f}×"
                      + ("" if c.learned else " (it has not learned the task)") for c in others)
    consulted = tuple(hmm_control(c, AGREE if meets(c) else DISAGREE, own) for c in others)
    return Verdict(DISAGREE, r, f"{why}; the MLP's error over A6's controls' (the MLP sits at the context-blind floor "
                   f"in every regime, A8): {where}" if others else why, scale=scale, consulted=consulted)


@claim("A15", "I", "v3", "primitives table", "Mamba beats the transformer on HMM filtering", "0.024 vs 0.049 bits",
       "secondary", "kl (bits) at K=20, mamba vs transformer, 3 seeds",
       MAMBA_BELOW, TABLE, rule_note="the same comparison trained four times as long (hmm_long) reported beside it",
       cells=reads("hmm_long") + reads("hmm_long", arch="mamba"))
def _a15(ev: Evidence) -> Verdict:
    ma, tr = ev.table("hmm", "mamba", "kl"), ev.table("hmm", "transformer", "kl")
    if ma is None or tr is None:
        return missing("table cells")
    why = f"transformer {tr.text()}"
    ma4 = ev.eval_metric(BUDGET_COLUMN, "mamba", SEEDS, "kl", 20)
    tr4 = ev.eval_metric(BUDGET_COLUMN, "transformer", SEEDS, "kl", 20)
    if ma4 is not None and tr4 is not None:
        why += (f"; trained four times as long: Mamba {ma4.text()}, transformer {tr4.text()} "
                f"({lower(ma4, tr4).split(' ')[0]} by the same rule)")
        return Verdict(lower(ma, tr), with_files(ma, tr, ma4, tr4), why)
    return Verdict(lower(ma, tr), with_files(ma, tr), why)


@claim("A16", "I", "v3", "primitives table", "Mamba's HMM error", "0.024 bits", "secondary",
       "kl (bits), mamba, 3 seeds; control: the same cell trained four times as long",
       AtMost(0.024),
       f"{TABLE}; {REPRO}", rule_note="closes under the longer-run control if its mean reaches it",
       cells=reads("hmm_long", arch="mamba"))
def _a16(ev: Evidence) -> Verdict:
    m = ev.table("hmm", "mamba", "kl")
    if m is None:
        return missing("table cell")
    ok, why = error_rule(m, 0.024)
    if ok:
        return Verdict(AGREE, m, why)
    return hmm_verdict(ev, m, AtMost(0.024), why, 0.024, arch="mamba")


@claim("A17", "I", "v3", "abstract; primitives table", "The LSTM fails HMM filtering",
       "only accumulation (0.411 bits: secondary)", "paper",
       "kl (bits), lstm, 3 seeds", FAILS, TABLE,
       asserts_failure=True,
       threshold="≥ 90% of the context-blind floor (in place of 0.411 bits)")
def _a17(ev: Evidence) -> Verdict:
    return fails(ev, "hmm", "lstm", "kl")
