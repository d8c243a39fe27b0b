"""The header probe (``windtunnel.geometry.header_probe``): what it reads, its nulls, and where it declines."""

from __future__ import annotations

import torch

from windtunnel import geometry, models, tasks
from windtunnel.geometry import header_probe as hp
from windtunnel.models import catalog


def _task(symbols: str, **kw):
    return tasks.make("model_selection", n=7, classes="rotation,multiplication", L=6, query_zero=False,
                      symbols=symbols, **kw)


def _model(task, seed: int):
    torch.manual_seed(seed)
    return models.make("transformer", task, **catalog.get("transformer").tiny).eval()


def test_body_values_are_the_values_the_task_reads_from_its_own_header() -> None:
    """Every body symbol's value is π⁻¹(symbol): the query points and shown images the task itself reads back (its
    exact posterior's input), and the drawn function's images; nothing off the body."""
    for symbols in ("integer", "opaque", "fixed"):
        for facts in (False, True):
            t = _task(symbols, facts_in_context=facts)
            ep = t.sample(40, 3)
            mask, values = hp.body_values(t, ep)
            assert not mask[:, : t.body_start].any() and mask[:, t.body_start :].all()
            _, xs, ys, ok = t.read(ep.tokens)
            assert ok.all()
            assert torch.equal(values[:, t.body_start :: 2], xs)
            assert torch.equal(values[:, t.body_start + 1 :: 2], ys)
            assert torch.equal(ys, ep.latent["f"].gather(1, ep.latent["x"])[:, : ys.shape[1]])
            assert (values[:, : t.body_start] == -1).all()


def test_the_token_alone_reads_a_fixed_meaning_and_not_a_per_episode_one() -> None:
    """The token-only null is exact where the symbols' meaning is fixed (integers, one relabelling) and near chance
    where it is drawn per episode; the probe of an untrained network reads the integers (its embedding is the token)
    but not the opaque symbols' values beyond the token."""
    out = {}
    for symbols in ("integer", "opaque", "fixed"):
        t = _task(symbols)
        out[symbols] = hp.header_probe(_model(t, 0), t, untrained=_model(t, 1), n=300)["summary"]
    for symbols in ("integer", "fixed"):
        assert out[symbols]["token_only_accuracy"] == 1.0
        assert out[symbols]["best_accuracy"] >= 0.95
    s = out["opaque"]
    assert s["token_only_accuracy"] <= s["chance_accuracy"] + 0.1
    assert s["chance_accuracy"] < 0.3  # six values asked (0 never is): ≈ 1/6
    assert s["best_accuracy"] < s["token_only_accuracy"] + hp.MARGIN  # an untrained network has not parsed the header
    assert hp.reads_header(s) is False
    # the reading: undecided where the token alone gives the value (nothing to parse), else the rule's
    readings = {k: hp._interpret({"summary": v})[0] for k, v in out.items()}
    assert readings["integer"].consistent is None and readings["integer"].flags
    assert readings["fixed"].consistent is None and readings["opaque"].consistent is False
    parsed = {**s, "best_accuracy": max(s["token_only_accuracy"], s["best_accuracy_untrained"]) + hp.MARGIN + 0.01}
    assert hp.reads_header(parsed) is True and hp._interpret({"summary": parsed})[0].consistent is True


def test_the_probe_reads_a_value_written_in_the_stream_and_not_noise() -> None:
    """The probe's accuracy is 1 where the stream carries the value linearly, chance where it carries noise."""
    g = torch.Generator().manual_seed(0)
    n, N = 7, 2000
    v = torch.randint(0, n, (N,), generator=g)
    seq = torch.arange(N) // 10
    train, test = seq < 140, seq >= 140
    signal = torch.nn.functional.one_hot(v, n).double() @ torch.randn(n, 16, generator=g, dtype=torch.float64)
    noise = torch.randn(N, 16, generator=g, dtype=torch.float64)
    assert hp._probe(signal + 0.05 * noise, v, n, seq, train, test) == 1.0
    assert hp._probe(noise, v, n, seq, train, test) < 0.3


def test_it_declines_a_task_without_a_header_and_speaks_to_ms5() -> None:
    t = tasks.make("bijection", V=6, L=5)
    r = hp.header_probe(_model(t, 0), t, n=16)
    assert r["applicable"] is False and r["reason"].startswith("task")
    d = geometry.DIAGNOSTICS["header_probe"]
    assert d.claims == ("MS5",) and d.untrained and d.requires == ("blocks.{l}.hook_resid_post",)
