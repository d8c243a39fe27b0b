"""Paper I's controls, in one place: the tables of control cells (the main job's size controls, the HMM column's
budget, data-regime, size and initialisation controls, the length controls, the binding ladder's and the regression's
controls), the papers' own cells at their size, whether a control learned its task, and the logic that judges a
claim against its controls — where a disagreement closes, persists, or has controls that cannot speak.  Paper II's
claims on the main job use the same machinery (:func:`with_size_controls`)."""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

from ...run import grid
from ...run.grid import SEEDS
from ..base import AGREE, DISAGREE, Control, Verdict, declared, missing
from ..evidence import Evidence, Measure, quantity_range
from ..rules import Rule
from .common import geometry_files, pct, with_files


# --- how a verdict names a control ------------------------------------------------------------------------------------

SCALE = "windtunnel reproduce scale --preset paper"
"""The command of the paper-preset cells the quick claims read as controls at the papers' size (a GPU's work)."""


def cells_control(ev: Evidence, column: str, file: str, arch: str = "transformer") -> str:
    """How a verdict names a control made of grid cells: the first seed's file, then the seeds and command."""
    name, _, preset = column.partition("@")
    at_scale = (preset or ev.preset) == "paper" and (name, arch) in declared(("I", "II", "III"), fixed="paper")
    command = SCALE if at_scale else f"windtunnel reproduce paper1 --preset {ev.preset}"
    return (f"{ev.folder(column, arch, SEEDS[0])}/{file} (and seeds "
            f"{', '.join(map(str, SEEDS[1:]))}; {command})")


# --- the papers' own cells at their size, and whether a control learned its task --------------------------------------

PAPER_CELL = "main_paper_size@paper"
"""The main job's column on the papers' own cell at the papers' size (bijection V=20, L=19, 2.67M parameters):
where it is committed, a claim about the main job is judged there, with the reduced-scale cells beside it."""
PAPER_SCALE = "the papers' size (2.67M parameters, V=20)"
PAPER_CELLS = {PAPER_CELL: PAPER_SCALE,
               "hmm_fixed@paper": "the papers' size (2.68M parameters; HMM on the authors' fixed set of 10,000)"}
"""The papers' own cells at their size, each with the scale a verdict judged on it is stated at: where one is among a
claim's controls and has learned its task, :func:`with_controls` judges the claim there."""
ON_PAPER_CELL = ("judged on the papers' own cell at their size (main_paper_size) where committed; else closes under the "
                 "head width or the task's size if that control agrees")
"""What a claim on the main job judged by :func:`with_size_controls` adds to its rule."""


def learned_task(ev: Evidence, column: str, arch: str, blind_to: str | None = None) -> bool:
    """Whether a control's cells learned their task — the column's headline error, pooled over seeds, at most
    halfway from its context-blind floor to the best attainable (each seed's ``references.json``), and on every
    seed below the filter that reads only the latest observation where the task has one — so that a rule it passes
    is not passed by a model that ignores its context (ablating a head cannot hurt a model that reads nothing).

    The best attainable is the exact posterior (error 0), so "learned" is below half the floor.  A claim that a
    model *fails* to use one part of its input (``blind_to="header"``: the sequel's opaque symbols) cannot ask its
    controls to succeed: there the best attainable is the exact predictive of a reader blind to that part
    (``header_blind``), and "learned" is at most halfway from the floor to it — the control reads its context as
    far as the claim says it can; a control without that reference learned nothing this can read.  Read from the
    trained models (``Evidence.trained``) whatever ``ev`` is: a null is judged on the cells the verdict is."""
    ev = ev.trained
    metric = grid.EXPERIMENTS[column.partition("@")[0]].metric
    m = ev.eval_metric(column, arch, SEEDS, metric)
    floor = ev.cell_stat(column, arch, SEEDS, "references.json", lambda r: r["context_blind"]["metrics"][metric])
    if m is None or floor is None or metric == "accuracy":
        return False  # a control whose learning cannot be read this way explains nothing
    attainable = 0.0
    if blind_to is not None:
        blind = ev.cell_stat(column, arch, SEEDS, "references.json", lambda r: r[f"{blind_to}_blind"]["metrics"][metric])
        if blind is None:
            return False
        attainable = blind.value
    if not m.value < 0.5 * (floor.value + attainable):
        return False
    # where the task has a filter that reads only the latest observation (HMM), every seed must beat it: a model at
    # that filter's level carries no belief through time, and a rule about how it does so cannot be read on it
    one_step = ev.cell_stat(column, arch, SEEDS, "references.json",
                            lambda r: r["window_1"]["metrics"][metric] if "window_1" in r else float("nan"))
    if one_step is None or not all(math.isfinite(v) for v in one_step.values):
        return True
    return all(v < w for v, w in zip(m.values, one_step.values))


# --- a claim judged against its controls: the main job's size controls, the budget, HMM geometry's --------------------

LONG_COLUMN = "main_long"
"""The main job's budget control: its recipe unchanged at ten times the steps (30,000 at the quick preset)."""


#: The main job's three size controls, each a step towards the papers' model: two heads of 32 (the papers'
#: head width; nothing else changed), the papers' task V=20, L=19 (trained 6000 steps against the main
#: job's 3000, the budget its recipe needs), and that task's recipe at the papers' model size (2.67M
#: parameters, 6 layers of 6 heads of 32).  (column, how a verdict names it, the cause, the factor it changes)
SIZE_CONTROLS = (("main_dh32", "at d_head 32", "the head width", "head width"),
                 ("main_v20", "at V=20", "the task's size (V=20, L=19, with the 6000 steps its recipe trains)", "task size"),
                 ("main_paper_size@paper", "at the papers' size", "the model's size (V=20 at 2.67M parameters, 6 layers of 6 "
                  "heads of 32, on the V=20 recipe)", "model size"))


#: The HMM column's budget controls: four times the steps on fresh episodes, and on the authors' fixed
#: set of 10,000 (the transformer only).  (column, how a verdict names it, the cause)
BUDGET_CONTROLS = (("hmm_long", "trained four times as long", "the budget", "budget"),
                   ("hmm_fixed", "four times as long on a fixed set of 10,000", "the budget on the authors' data regime",
                    "data regime"))


HMM_PAPER_CONTROL = (("hmm_fixed@paper", "on the papers' own HMM cell at their size (2.68M parameters, the authors' fixed "
                      "set)", "the papers' size", "size"),)


#: A rule on one column's cells: (whether it holds, our number, what it read), or None when not committed.
ColumnRule = Callable[[Evidence, str], "tuple[bool | str, Measure | str, str] | None"]


def with_size_controls(ev: Evidence, rule: ColumnRule, what: str) -> Verdict:
    """:func:`with_controls` on the main job and its :data:`SIZE_CONTROLS`."""
    return with_controls(ev, rule, what, "main", SIZE_CONTROLS)


def _rule_kind(ok: bool | str) -> str:
    """A column rule's outcome as a verdict: ``True``/``False`` or a verdict of its own (B1's three-way rule)."""
    return ok if isinstance(ok, str) else AGREE if ok else DISAGREE


def with_controls(ev: Evidence, rule: ColumnRule, what: str, column: str,
                   controls: tuple[tuple[str, str, str, str], ...], arch: str = "transformer") -> Verdict:
    """``rule`` judged where the papers made the claim, with every control consulted.

    Where one of the papers' own cells (:data:`PAPER_CELLS`) is among ``controls``, has learned its task and the rule
    reads it, the verdict is judged there and every other column (``column`` itself first) is reported beside it
    by the same rule (as controls at reduced scale, which cannot speak to a verdict at the papers' size).  Otherwise
    ``rule`` is judged on ``column``; where it fails, every control (one change from it: head width, task size, model
    size, budget, data regime) is read by the same rule and declared to the judge (``Verdict.consulted``), which
    decides whether one closes the disagreement or it persists.  Controls not committed are skipped."""
    main = rule(ev, column)
    if main is None:
        return missing(what)
    readings = []  # (control column, where, cause, variable, outcome, ours, said, learned)
    for control_column, where, cause, variable in controls:
        control = rule(ev, control_column)
        if control is not None:
            readings.append((control_column, where, cause, variable, _rule_kind(control[0]), control[1], control[2],
                             learned_task(ev, control_column, arch)))

    def shown(outcome: str, ours: Measure | str, said: str) -> str:
        text = ours.text() if isinstance(ours, Measure) else str(ours)
        return f"{text}; {said} ({outcome.split(' ')[0]} by the same rule"

    def cite(ours: Measure | str, columns: list[str]) -> tuple[Measure | str, tuple[str, ...]]:
        files = tuple(f for c in columns for f in geometry_files(ev, c, arch))
        if isinstance(ours, Measure):
            ours = Measure(ours.value, ours.ci, ours.seeds, ours.values, tuple(dict.fromkeys(ours.files + files)))
        return ours, files

    paper = next((r for r in readings if r[0] in PAPER_CELLS and r[7]), None)
    if paper is not None:  # the papers' own cell: the verdict is judged there, every reduced-scale cell beside it
        outcome, ours = paper[4], paper[5]
        value = ours.text() if isinstance(ours, Measure) else str(ours)
        said = f"judged {paper[1]}: {value}; {paper[6]}; at reduced scale: {shown(_rule_kind(main[0]), main[1], main[2])})"
        others = [r for r in readings if r is not paper]
        said += "".join(f"; {r[1]}: {shown(r[4], r[5], r[6])}" + ("" if r[7] else ", a control that has not learned "
                        "its task") + ")" for r in others)
        ours, files = cite(ours, [paper[0], column] + [r[0] for r in others])
        consulted = tuple(_control(ev, r, arch, at_scale=r[0] in PAPER_CELLS) for r in others)
        return Verdict(outcome, ours, said, files=files, scale=PAPER_CELLS[paper[0]],
                       consulted=consulted if outcome == DISAGREE else ())
    outcome, ours, said = _rule_kind(main[0]), main[1], main[2]
    if outcome == AGREE or not readings:
        ours, files = cite(ours, [column])
        return Verdict(outcome, ours, said, files=files)
    for control_column, where, cause, variable, okc, oc, saidc, learned in readings:
        said += f"; {where}: {shown(okc, oc, saidc)}" + ("" if learned else ", a control that has not learned its "
                                                          "task") + ")"
    ours, files = cite(ours, [column] + [r[0] for r in readings])
    return Verdict(outcome, ours, said, files=files,
                   consulted=tuple(_control(ev, r, arch) for r in readings) if outcome == DISAGREE else ())


def _control(ev: Evidence, reading: tuple, arch: str, at_scale: bool = True) -> Control:
    """A control reading of :func:`with_controls` as the judge is told of it."""
    column, _, _, variable, outcome, _, _, learned = reading
    return Control(variable, outcome, learned, at_scale, cells_control(ev, column, "geometry.json", arch))


# --- the HMM error claims' controls (A6–A9, A16) ----------------------------------------------------------------------

BUDGET_COLUMN = "hmm_long"
"""The HMM transformer trained four times as long as its column: the budget control of A6, A6b, A7, A11, A12."""
DATA_COLUMN = "hmm_fixed"
"""The same budget on one fixed set of 10,000 episodes revisited ≈51 times (the authors' data regime)."""
INIT_COLUMN = "hmm_torch_init"
"""The HMM column from PyTorch's default initialisation instead of GPT-2's N(0, 0.02), same recipe and budget."""
HMM_CONTROLS = ((BUDGET_COLUMN, None, "on fresh episodes", "budget", ("transformer", "mamba")),
                (DATA_COLUMN, None, "on a fixed set of 10,000 episodes", "data regime", ("transformer",)),
                (DATA_COLUMN, "paper", "on a fixed set of 10,000 episodes", "size", ("transformer",)),
                (INIT_COLUMN, None, "from PyTorch's default initialisation", "initialisation", ("transformer",)))
"""(column, preset, what it trains on or from, the variable it changes, the architectures it is trained for) of the
HMM controls: four times the claim's
budget on fresh episodes and on the authors' fixed set (``None``: the claim's own preset), the authors' regime at
the papers' size (the paper preset's ``hmm_fixed``, a GPU's work: ``windtunnel reproduce scale --preset paper``; a
control of the quick claims only), and the claim's own cell from another start — budget, data regime, capacity,
then initialisation."""


def _paper_size(column: str) -> str:
    """``"2.68M parameters, 9 layers"``: the paper preset's model for ``column``."""
    r = grid.EXPERIMENTS[column].recipes["paper"]
    return f"{r.params / 1e6:.3g}M parameters, {r.layers} layers"


class HmmControl(NamedTuple):
    """One HMM control as the HMM claims read it: its KL at K=20 over seeds, how a verdict names it, the control to
    cite, the variable it changes, its column (``hmm_fixed@paper`` for a paper-preset cell) and whether it learned
    its task (:func:`learned_task`)."""

    measure: Measure
    name: str
    control: str
    variable: str
    column: str
    learned: bool


def hmm_controls(ev: Evidence, arch: str = "transformer") -> list[HmmControl]:
    """An HMM cell's controls that are measured for ``arch`` (:data:`HMM_CONTROLS`)."""
    out = []
    for column, preset, data, variable, archs in HMM_CONTROLS:
        if (preset is not None and preset == ev.preset) or arch not in archs:
            continue  # the claim's own preset: its rows above are these cells already
        at = ev.at(preset or ev.preset)
        m = at.eval_metric(column, arch, SEEDS, "kl", 20)
        if m is not None:
            steps = grid.EXPERIMENTS[column].recipes[preset or ev.preset].steps
            size = f" at the papers' size ({_paper_size(column)})" if preset is not None else ""
            named = f"{column}@{preset}" if preset else column
            out.append(HmmControl(m, f"the {steps}-step control{size} {data} ({len(SEEDS)} seeds)",
                                  cells_control(at, column, "eval.json", arch), variable, named,
                                  learned_task(ev, named, arch)))
    return out


def quick_hmm_unlearned(ev: Evidence) -> Measure | None:
    """The quick HMM transformer cell's K=20 KL (citing the filter's files too) where it has not learned the task —
    some seed not below the filter that reads only the latest observation, on its own evaluation episodes (A12's
    bar) — else ``None``, also where that filter's row is not written (no evidence that it has not learned).  Where it
    has not, the HMM claims are judged on the papers' own cell at their size, if that cell has learned it.  Read from
    the trained models (``Evidence.trained``) whatever ``ev`` is."""
    ev = ev.trained
    own = {"kl@20": ev.eval_metric("hmm", "transformer", SEEDS, "kl", 20),
           "one_step": ev.cell_stat("hmm", "transformer", SEEDS, "references.json", one_step_kl)}
    if own["kl@20"] is None or own["one_step"] is None or control_learns(own):
        return None
    return with_files(own["kl@20"], own["one_step"])


def judged_cell(ctls: list[HmmControl], ev: Evidence,
                 arch: str = "transformer") -> tuple[HmmControl | None, Measure | None, list[HmmControl]]:
    """Where an HMM error claim is judged: the papers' own cell among ``ctls`` where it learned its task and the quick
    cell has not (with the quick cell's reading that says so, cited), else ``None``; and the other controls."""
    paper_cell = next((c for c in ctls if c.column in PAPER_CELLS and c.learned), None)
    unlearned = quick_hmm_unlearned(ev) if paper_cell is not None and arch == "transformer" else None
    own = paper_cell if unlearned is not None else None
    return own, unlearned, [c for c in ctls if c is not own]


def hmm_verdict(ev: Evidence, m: Measure, rule: Rule, why: str, paper: float | None,
                 arch: str = "transformer", mechanism: bool = False) -> Verdict:
    """A disagreeing HMM error judged against its controls.

    Where the quick cell has not learned the task and the papers' own cell at their size (:data:`PAPER_CELLS`) has,
    the claim is judged there, with the reduced reading and the other controls beside it (as A11 and A12 are).
    Otherwise the first control that learned its task and meets ``rule`` closes the disagreement.  The rule reads the
    error itself, so every control that fails it answers whether its factor closes the gap, learned or not: the
    disagreement persists under all of them.  Learning is asked only of a control that would close it (a control
    that meets the figure without having learned the task is counted for nothing, ``Verdict.unheard``).
    ``mechanism``: add which reference predictor each seed ends nearest (the claim whose cells declare geometry)."""
    ctls = hmm_controls(ev, arch)
    own, unlearned, others = judged_cell(ctls, ev, arch)

    def ratio(x: Measure) -> str:
        return f", {x.value / paper:.2g}× the papers' figure" if paper else ""

    def status(c: HmmControl) -> str:
        return "" if c.learned else " (it has not learned the task)"

    where = "; ".join(f"{c.name} is at {c.measure.text()}{ratio(c.measure)}{status(c)}" for c in others)
    # which reference predictor each seed ends nearest, and how far it follows an edited previous observation
    columns = ((f"{DATA_COLUMN}@paper",) if own is not None else ()) + ("hmm", BUDGET_COLUMN, DATA_COLUMN, INIT_COLUMN)
    filters = "; ".join(f for f in (_filter_note(ev, column, arch) for column in columns) if f) if mechanism else ""
    strategies = (f"; which strategy each seed ends nearest (the reference predictors; in brackets the share of the "
                  f"posterior's move the model makes when the previous observation is edited): {filters}" if filters else "")
    # the benchmark's one unfinished seed of the paper preset's own 50,000-step recipe: the longest budget measured
    # at the papers' size, beside the fixed-set control's 7,813 steps
    note = _paper_scale_note(ev, paper) if arch == "transformer" and ev.preset != "paper" else ""
    consulted = tuple(hmm_control(c, rule.kind(c.measure), own) for c in others)
    if own is not None:
        kind = rule.kind(own.measure)
        ours = with_files(own.measure, m, unlearned, *(c.measure for c in others))
        said = (f"judged on the papers' own cell at their size (the authors' fixed set of 10,000; it learned the task, "
                f"and the quick cell has not): {own.measure.text()}, {rule.reading(own.measure)}; at reduced scale "
                f"{m.text()}, {why}" + (f"; {where}" if where else ""))
        if kind == AGREE:
            return Verdict(AGREE, ours, said + note, scale=PAPER_CELLS[own.column])
        return Verdict(DISAGREE, ours, said + strategies + note, scale=PAPER_CELLS[own.column], consulted=consulted)
    return Verdict(DISAGREE, m, (f"{why}; {where}{strategies}" if ctls else why) + note, consulted=consulted)


def hmm_control(c: HmmControl, outcome: str, own: HmmControl | None) -> Control:
    """An HMM control as the judge is told of it: beside the papers' own cell (``own``), only another cell at the
    papers' size is at the verdict's scale."""
    at_scale = own is None or c.column in PAPER_CELLS
    return Control(c.variable, outcome, c.learned, at_scale, c.control)


def _paper_scale_note(ev: Evidence, paper: float | None) -> str:
    """Where the paper preset's own HMM cell (2.68M parameters, 50,000 steps on fresh episodes, one seed, trained
    on a GPU by ``benchmarks/paper_gpu.py cells``) stood when its time ran out: its last held-out KL (the training
    loop's evaluation on 512 episodes, no interval) — evidence on capacity and budget together, not a control that
    can explain the gap, since it is one unfinished seed."""
    doc = ev.json("../benchmarks/results/paper_gpu.json") or {}
    hmm = (doc.get("trained") or {}).get("hmm") or {}
    if not hmm.get("last_eval"):
        return ""
    kl = hmm["last_eval"]["kl"]
    ratio = f", {kl / paper:.2g}× the papers' figure" if paper else ""
    return (f"; at the papers' size on their recipe's {hmm['recipe_steps']:,} steps of fresh episodes (seed 0 only, "
            f"on a GPU; benchmarks/results/paper_gpu.json) the held-out KL was {kl:.2g}{ratio} at step "
            f"{hmm['last_eval_step']:,}, when its time ran out — one unfinished seed, so evidence, not a control")


def _filter_note(ev: Evidence, column: str, arch: str) -> str:
    """``"COLUMN a [s], b [s], c [s]"`` — the reference predictor each seed's model ends nearest
    (``reference_predictors`` in its ``geometry.json``; ``window_1`` is the filter that reads only the current
    observation) and, where analysed, the share ``s`` of the posterior's move the model makes one step after an
    edited observation (``counterfactual``); ``""`` where a seed has no reference record."""
    cells = ev.cells(column, arch, SEEDS)
    if cells is None:
        return ""
    nearest = []
    for rel, _ in cells:
        geometry = ev.json(f"{rel}/geometry.json") or {}
        summary = (geometry.get("reference_predictors") or {}).get("summary") or {}
        if "nearest_final" not in summary:
            return ""
        # the counterfactual's reach: how far the model moves, as a share of the posterior's move, one step after
        # an edited observation (a one-step filter does not move at all)
        share = ((geometry.get("counterfactual") or {}).get("summary") or {}).get("moved_share_nearest")
        nearest.append(str(summary["nearest_final"]) + (f" [{share:.2f}]" if share is not None else ""))
    return f"{column} {', '.join(nearest)}"


# --- the length controls (A11, A12) -----------------------------------------------------------------------------------

LENGTH_CONTROLS = {"rotary": ("hmm_rotary", None), "alibi": ("hmm_alibi", None), "none": ("hmm_none", None),
                   "learned, 4× steps": (BUDGET_COLUMN, None),
                   "learned, 4× steps on a fixed set": (DATA_COLUMN, None),
                   "rotary, 4× steps on a fixed set": ("hmm_fixed_rotary", None),
                   "learned, the papers' size on a fixed set": (DATA_COLUMN, "paper"),
                   "rotary, the papers' size on a fixed set": ("hmm_fixed_rotary", "paper"),
                   "learned, PyTorch's default initialisation": (INIT_COLUMN, None)}
"""The controls of length generalisation, by what they change in the HMM column (learned absolute positions,
2000 steps on fresh episodes from GPT-2's initialisation): the position encoding, the budget, the data regime, the
model's size (the paper preset's cells, ``windtunnel reproduce scale --preset paper``, controls of the quick claims
only), or the start; each is (column, preset), ``None`` meaning the claim's own preset."""
LENGTH_VARIABLES = {"rotary": "positions", "alibi": "positions", "none": "positions", "learned, 4× steps": "budget",
                    "learned, 4× steps on a fixed set": "data regime", "rotary, 4× steps on a fixed set": "positions",
                    "learned, the papers' size on a fixed set": "size", "rotary, the papers' size on a fixed set": "size",
                    "learned, PyTorch's default initialisation": "initialisation"}
"""The factor each length control changes (:data:`LENGTH_CONTROLS`)."""


PAPER_LENGTH_CELL = "learned, the papers' size on a fixed set"
"""The length control that is the papers' own model at their size: where the claim's own cell has not learned the
task, A12 is judged on it."""


def at_papers_size(label: str) -> bool:
    """Whether a length control is a cell at the papers' size (:data:`LENGTH_CONTROLS`)."""
    return LENGTH_CONTROLS[label][1] == "paper"


def length_variable(label: str, on_paper_cell: bool) -> str:
    """The factor a length control changes from the cell the claim is judged on: against the papers' own cell the
    rotary cell at their size changes the positions, not the size."""
    if on_paper_cell and label.endswith("the papers' size on a fixed set") and label != PAPER_LENGTH_CELL:
        return "positions"
    return LENGTH_VARIABLES[label]


def boundary_jump(doc: dict[str, Any]) -> float | None:
    """Per-position KL at K=50: mean over steps 21–25 / mean over steps 16–20 (the training boundary is K=20)."""
    kl = [x for x in doc["lengths"]["50"]["curves"]["kl"] if x is not None]
    if len(kl) < 25:
        return None
    return (sum(kl[20:25]) / 5) / max(sum(kl[15:20]) / 5, 1e-12)


def one_step_kl(refs: dict[str, Any]) -> float | None:
    """KL(posterior ‖ one-step filter) at the training length, from a cell's ``references.json``: the filter that
    answers from the current observation alone (``window_1``), on the cell's own evaluation episodes — the error
    below which a model must read more than its current token, so the bar a length control clears to count as
    having learned the task (``None`` in a file written before the windowed rows were)."""
    return ((refs.get("window_1") or {}).get("metrics") or {}).get("kl")


def length_controls(ev: Evidence) -> dict[str, dict[str, Measure]]:
    """Per control with committed cells: KL at K=20/30/50 and the boundary jump, over seeds."""
    out = {}
    for label, (column, preset) in LENGTH_CONTROLS.items():
        if preset is not None and preset == ev.preset:
            continue
        at = ev.at(preset or ev.preset)
        row = {f"kl@{k}": at.eval_metric(column, "transformer", SEEDS, "kl", k) for k in (20, 30, 50)}
        row["jump"] = at.cell_stat(column, "transformer", SEEDS, "eval.json", boundary_jump, quantity_range("jump"))
        if all(v is not None for v in row.values()):
            one_step = at.cell_stat(column, "transformer", SEEDS, "references.json", one_step_kl)
            if one_step is not None:  # read where written: A12's bar for learning the task
                row["one_step"] = one_step
            out[label] = row  # type: ignore[assignment]
    return out


def control_learns(row: dict[str, Measure]) -> bool:
    """Whether every seed of a length control beats the one-step filter on its own evaluation episodes: a filter of
    the current observation alone has no use for position and so no jump to show, and a seed at it, pooled with
    the others, would hide theirs.  A control without the filter's row learns nothing."""
    bar = row.get("one_step")
    return bar is not None and all(kl < b for kl, b in zip(row["kl@20"].values, bar.values))


def length_control(ev: Evidence, label: str) -> str:
    """The length control ``label`` named as a verdict cites it."""
    column, preset = LENGTH_CONTROLS[label]
    return cells_control(ev.at(preset or ev.preset), column, "eval.json")


def control_text(ctrl: dict[str, dict[str, Measure]]) -> str:
    """The length controls' KL at K=20/30/50 and boundary jump, as a verdict reports them."""
    return "; ".join(f"{label}: KL {r['kl@20'].value:.3g} / {r['kl@30'].value:.3g} / {r['kl@50'].value:.3g} at "
                     f"K=20/30/50, jump {r['jump'].value:.2f}" for label, r in ctrl.items())


# --- the binding ladder's controls (A19) and the regression's (A26) ---------------------------------------------------

RUNG16_CONTROLS = {
    ("recall_p16_state64", "mamba"): ("with a state four times as large per channel (d_state 64 instead of 16; same "
                                      "parameters, so a narrower model, and the same recipe) Mamba", "the state's size"),
    ("recall_p16_sched64", "mamba"): ("on the 64-pair rung's schedule (its steps and its 4- and 8-pair stages; the "
                                      "same store and keys) Mamba", "the schedule"),
    ("recall_p16_sched64", "lstm"): ("on the 64-pair rung's schedule the LSTM", "the schedule")}
"""Where binding breaks on the ladder's 16-pair rung: Mamba's cell with a state four times as large (capacity-matched)
— whether the state's size is where it breaks — and the cell on the 64-pair rung's schedule (16,000 steps, its 4- and
8-pair stages) for the two architectures at chance there — whether the budget is.  What each control changes,
naming its architecture, and the variable it tests."""


def rung16_note(ev: Evidence) -> tuple[str, tuple[Measure, ...]]:
    """Whether the state's size or the schedule is where binding breaks at 16 pairs: each control's accuracy
    beside the ladder's own 16-pair cell of the same architecture, and the measures read (a control is left out
    until all three seeds of it and of its base are committed).  A reading is drawn only from disjoint intervals."""
    text, read = [], []
    for column, arch in RUNG16_CONTROLS:
        what, variable = RUNG16_CONTROLS[column, arch]
        ctrl = ev.eval_metric(column, arch, SEEDS, "accuracy")
        base = ev.eval_metric("recall_p16", arch, SEEDS, "accuracy")
        if ctrl is None or base is None or not (ctrl.ci and base.ci):
            continue
        if ctrl.ci[0] > base.ci[1]:
            reading = f"it binds more, so {variable} is part of where binding breaks"
        elif ctrl.ci[1] < base.ci[0]:
            reading = "it binds less"
        else:
            reading = f"the intervals overlap, so these seeds show no effect of {variable}"
        text.append(f"; {what} reaches {pct(ctrl)} at 16 pairs against {pct(base)}: {reading}")
        read += [ctrl, base]
    return "".join(text), tuple(read)


#: A26's controls: (column, how a verdict names it, the cause it would name)
REGRESSION_CONTROLS = (("regression_long", "trained four times as long", "the budget"),
                       ("regression_curriculum", "behind a dimension curriculum (inputs grown 1 to 4 dimensions "
                        "over the first third)", "the optimisation (a curriculum)"),
                       ("regression_paired", "with each response on one token with its own input (the pairs "
                        "given, not assembled)", "the layout (pairs the network must assemble itself)"),
                       ("regression_paired_long", "paired and trained four times as long",
                        "the layout (pairs the network must assemble itself), with the budget"),
                       ("regression_torch_init", "from PyTorch's default initialisation (not N(0, 0.02))",
                        "the initialisation"),
                       ("regression_torch_init_long", "from PyTorch's default initialisation, four times as long",
                        "the initialisation, with the budget"),
                       ("regression_paired_torch_init", "paired, from PyTorch's default initialisation",
                        "the layout with the initialisation"))


REGRESSION_VARIABLES = {"regression_long": ("budget",), "regression_curriculum": ("curriculum",),
                        "regression_paired": ("layout",), "regression_paired_long": ("layout", "budget"),
                        "regression_torch_init": ("initialisation",),
                        "regression_torch_init_long": ("initialisation", "budget"),
                        "regression_paired_torch_init": ("layout", "initialisation")}
"""The factors each regression control changes (:data:`REGRESSION_CONTROLS`).  Only a control that changes one factor
can close a disagreement under it; one that changes two and meets the rule is reported beside (neither factor is
shown to close it alone)."""
