"""Reading Paper III's language-model records for its claims: which files, each model judged on its own, and the
edits' readings (the entropy-axis cut against its no-op and random-axis nulls, the projection, the shift).

Two production models are obtainable offline, SmolLM2-135M-Instruct and Gemma-3-270M (both 4-bit).  A claim is
judged on each by the same rule; the second model is a **replicate**, not a control: it differs from the first in
size, training data, tokenizer and architecture at once, so a verdict shared by both is reported as replicated
(``Verdict.replicated``) and never counted as a control that changes one factor.
"""

from __future__ import annotations

from typing import Callable

from .base import Verdict, missing
from .evidence import Evidence, Measure
from .rules import Every, Rule, split_join

LLM = "llm/smollm2-135m-instruct-q4"
GEMMA = "llm/gemma-3-270m-q4"
SULA = "windtunnel llm sula SmolLM2-135M-Instruct.Q4_1.gguf --out results/" + LLM + "-sula.json"
SULA_BOTH = SULA + "; the same for gemma-3-270m-q4_k_m.gguf --out results/" + GEMMA + "-sula.json"
SULA_MODELS = (("SmolLM2", f"{LLM}-sula.json"), ("Gemma-3-270M", f"{GEMMA}-sula.json"))
"""The SULA runs a claim is judged on: SmolLM2 (shown) and Gemma-3-270M beside it when committed."""
CUT5 = f"{LLM}-sula-5layers.json"
CUT5_MODELS = (("SmolLM2", CUT5), ("Gemma-3-270M", f"{GEMMA}-sula-5layers.json"))
"""The five-layer cuts: Paper III's layers 8, 12, 16, 20, 23 of its 24 at the same relative depth of each model
(SmolLM2's 30 layers: 10, 15, 20, 25, 29; Gemma-3-270M's 18: 6, 9, 12, 15, 17)."""

PYTHIA_DOUBT = ("Paper III made its interventions on Pythia-410M, whose fused query-key-value projection the authors' "
                "code splits into three blocks where GPT-NeoX interleaves them head by head, so the edited 'values' are "
                "a mixture of queries, keys and values; and the entropy-axis file the edits read is written by no "
                "released script")
"""Why Paper III's intervention numbers are suspect (D19–D22)."""

PAPER_QUANTITY = ("ρ(z·u, model entropy), the paper's axis–entropy correlation, read where the edit has not fixed it: "
                  "at the values of the last layer downstream of the edited one (for the paper's layer 12, its other "
                  "Bayesian layer 23, the last), and at the readout (the final token's hidden state the output head "
                  "reads, against its own entropy axis) where the edited layer is the last; each edit made at every "
                  "position of the layer's values, λ = 1")
"""What the intervention claims read (the edited layer's own values have the axis removed by construction)."""


def each_model(rule: Rule) -> Every:
    """``rule`` on each model: SmolLM2 shown, Gemma-3-270M beside it as a replicate."""
    return Every(rule, "model", "SmolLM2 shown, Gemma-3-270M beside it", split=True)


def replicates(first: str, others: list[tuple[str, str]]) -> tuple[str, ...]:
    """The other models (``(name, raw kind)``) whose outcome is the first model's: reported, never a control."""
    return tuple(name for name, kind in others if kind == first)


def on_each(what: str, needs: str = "", models: tuple[tuple[str, str], ...] = SULA_MODELS
            ) -> Callable[[Callable[[dict, str], Verdict]], Callable[[Evidence], Verdict]]:
    """Judge a language-model claim on every committed model's file: ``judge(doc, file)`` gives one model's verdict;
    the claim agrees if every model does, disagrees if any does, and is inconclusive otherwise (the models joined as
    seeds are).  ``needs``: a key of the file without which a model is skipped; ``models``: (name, file) pairs, the
    first one shown; a record without what the claim reads counts as not committed.  The other models sharing the first
    one's outcome are named as replicates; no model is a control."""

    def wrap(judge: Callable[[dict, str], Verdict]) -> Callable[[Evidence], Verdict]:
        def assess(ev: Evidence) -> Verdict:
            runs = []
            for name, rel in models:
                d = ev.json(rel)
                if d is not None and (not needs or d.get(needs, {}).get("applicable", True)):
                    try:
                        runs.append((name, rel, judge(d, rel)))
                    except KeyError:  # a record without what the claim reads (an edit of the final token alone)
                        continue
            if not runs or runs[0][0] != models[0][0]:
                return missing(what)
            kind = split_join([v.kind for _, _, v in runs])
            first = runs[0][2]
            files = tuple(rel for _, rel, _ in runs)
            ours = (Measure(first.ours.value, first.ours.ci, None, (), files) if isinstance(first.ours, Measure)
                    else first.ours)
            why = first.why if len(runs) == 1 else f"{runs[0][0]} shown" + (f": {first.why}" if first.why else "")
            for name, _, v in runs[1:]:
                why += f"; {name} {v.ours_text} ({v.kind.split(' ')[0]})"
            return Verdict(kind, ours, why, files=files if not isinstance(ours, Measure) else (),
                           replicated=replicates(first.kind, [(n, v.kind) for n, _, v in runs[1:]]))
        return assess

    return wrap


def rho_measure(m: dict, rel: str) -> Measure:
    """A recorded correlation ``{"rho", "ci"}`` as a measure of ``rel``."""
    ci = m.get("ci") or [None, None]
    return Measure(m["rho"], tuple(ci) if None not in ci else None, None, (), (rel,))


def rho_read(x: float | None) -> float:
    """A correlation read back from JSON; ``None`` (a constant projection: the axis is wholly gone) reads 0."""
    return 0.0 if x is None else float(x)


def edited_layers(c: dict) -> str:
    """The edited layers, each with the Paper III layer it stands for where the run mapped the paper's layers
    (of its 24-layer model) to the same relative depth (``cut.layer_map``)."""
    m = c.get("layer_map")
    if not m:
        return "layers " + ", ".join(str(l) for l in c["layers"])
    return ("layers " + ", ".join(f"{v} (paper {k})" for k, v in m["layers"].items())
            + f" of {m['model_depth']} (the paper's of {m['paper_depth']}, at the same relative depth)")


def each_alone(section: dict) -> dict[str, dict]:
    """Each layer's geometry edit alone: ``one_at_a_time`` where several layers were edited; with one layer, the edit."""
    if "one_at_a_time" in section:
        return section["one_at_a_time"]
    (layer,) = section["layers"]
    return {str(layer): section}


def cut_alone(cut: dict, edit: str) -> dict[str, dict]:
    """Each layer cut alone by ``edit`` (``entropy_axis``, ``random_axis``, ``no_op``): the edit's ``alone`` readings
    where several layers were cut; with one layer, the edit itself.  A record whose cut was made on the final token
    alone (no ``no_op``) is refused (``KeyError``): it is not the paper's cut."""
    if "no_op" not in cut:
        raise KeyError("no_op")
    block = cut[edit]
    if "alone" in block:
        return block["alone"]
    (layer,) = cut["layers"]
    return {str(layer): block}


def where_read(r: dict) -> str:
    """Where an edit's paper quantity was read, short: ``L29 values`` or ``readout``."""
    at = r["paper_read_at"]
    return "readout" if at == "readout" else "L" + at.rsplit(" ", 1)[-1] + " values"

