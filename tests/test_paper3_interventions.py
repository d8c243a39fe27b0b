"""Paper III's interventions as its claims read them (D19, D20): the paper's own axis–entropy correlation where the
edit has not fixed it, against the no-op and the random-axis cut; and a second language model reported as a
replicate, never as a control."""

import dataclasses
import json
from pathlib import Path

import pytest

from windtunnel import claims
from windtunnel.claims.base import Verdict
from windtunnel.claims.evidence import Evidence
from windtunnel.claims.judge import judge
from windtunnel.claims.llm_readers import SULA_MODELS, on_each

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _split(met: list[bool]) -> str:
    """The models joined as seeds are, two of them: both → agree, otherwise disagree."""
    return claims.AGREE if all(met) else claims.DISAGREE


def _docs(names: tuple[str, ...]) -> list[dict]:
    files = [RESULTS / "llm" / n for n in names]
    return [json.loads(f.read_text()) for f in files if f.is_file()]


def test_d19_and_d20_read_the_papers_quantity_against_the_no_op_and_the_random_axis() -> None:
    """D19 recomputed by hand on every committed SULA record: for each Bayesian layer cut alone (at every position),
    the paper's ρ after the cut below 0.1 and the random-axis cut within 0.05 of the no-op; D20 on the five-layer
    records: the paper's ρ (at the readout: the last layer is cut) at most 0.1 and the entropy error within 5% of the
    no-op's."""
    docs = _docs(tuple(f.rsplit("/", 1)[-1] for _, f in SULA_MODELS))
    if not docs or "no_op" not in docs[0]["cut"]:
        pytest.skip("no SULA run with the paper's cut committed")
    ev = Evidence(RESULTS)
    met = []
    for d in docs:
        c = d["cut"]
        assert c["lambda"] == 1.0 and "every position" in c["positions"]
        ent, rnd, noop = (c[e]["alone"] for e in ("entropy_axis", "random_axis", "no_op"))
        for k in ent:  # the no-op reproduces the uncut reading through the same code path
            assert noop[k]["rho_paper_after"] == pytest.approx(noop[k]["rho_paper_before"], abs=1e-3)
            assert noop[k]["behaviour"]["entropy_mae"] == pytest.approx(d["conditions"]["normal"]["entropy_mae"], abs=1e-4)
        met.append(all(abs(ent[k]["rho_paper_after"] or 0.0) < 0.1
                       and abs((rnd[k]["rho_paper_after"] or 0.0) - (noop[k]["rho_paper_after"] or 0.0)) <= 0.05
                       for k in ent))
        last = max(ent, key=int)
        assert ent[last]["paper_read_at"] == "readout"  # nothing but the readout lies downstream of the last layer
        assert all(ent[k]["paper_read_at"] == f"values of layer {last}" for k in ent if k != last)
    d19 = claims.CLAIMS["D19"].assess(ev)
    assert d19.kind == _split(met) and not d19.controls
    cuts = _docs(("smollm2-135m-instruct-q4-sula-5layers.json", "gemma-3-270m-q4-sula-5layers.json"))
    if cuts and all("no_op" in d["cut"] for d in cuts):
        holds = []
        for d in cuts:
            c = d["cut"]
            mae0, mae1 = c["no_op"]["behaviour"]["entropy_mae"], c["entropy_axis"]["behaviour"]["entropy_mae"]
            holds.append(abs(c["entropy_axis"]["rho_paper_after"] or 0.0) <= 0.1 and abs(mae1 - mae0) / mae0 <= 0.05)
        d20 = claims.CLAIMS["D20"].assess(ev)
        assert d20.kind == _split(holds) and not d20.controls


def test_a_second_language_model_is_a_replicate_not_a_control(tmp_path: Path) -> None:
    """Two models failing the same rule: the claim's rule names no control, so the judge calls the disagreement
    uncontrolled, and the second model is reported as replicating it; where the models differ nothing is replicated."""
    for name, rel in SULA_MODELS:
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"x": 0.2 if name == "SmolLM2" else 0.9}))

    def rule(threshold: float):
        @on_each("a test record")
        def assess(d: dict, rel: str) -> Verdict:
            return Verdict(claims.AGREE if d["x"] >= threshold else claims.DISAGREE, f"{d['x']:.1f}", "")
        return assess

    ev = Evidence(tmp_path)
    both_fail = rule(1.0)(ev)
    assert both_fail.kind == claims.DISAGREE and both_fail.controls == () and both_fail.replicated == ("Gemma-3-270M",)
    split = rule(0.5)(ev)
    assert split.replicated == ()
    claim = claims.CLAIMS["D19"]
    judged = judge(dataclasses.replace(claim, assess=rule(1.0)), ev)
    assert judged.kind == claims.DISAGREE_UNCONTROLLED and judged.verdict.replicated == ("Gemma-3-270M",)


def test_no_language_model_claim_names_the_other_model_as_its_control() -> None:
    """On the committed records no Paper III claim counts a model as a control."""
    ev = Evidence(RESULTS)
    for cid, c in claims.CLAIMS.items():
        if cid.startswith("D"):
            assert "model" not in c.assess(ev).controls, cid
