"""The model-selection wind tunnel (windtunnel.tasks.model_selection): its exact posteriors against brute-force
enumeration of every function of every class, a case worked by hand, the closed-form counts, the layout of the
three symbol regimes, and the sampler."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest
import torch

from windtunnel import tasks
from windtunnel.errors import InvalidValue
from windtunnel.tasks.model_selection import class_size, count_consistent, draw_functions


# --- brute force: every function of a class, by its definition -------------------------------------------------
def enumerate_class(name: str, n: int) -> list[tuple[int, ...]]:
    """Every function of class ``name`` on ``Z_n`` as a tuple of images, straight from the definitions: the
    permutations with ``f∘f = id`` and no fixed point; those with ``f∘f∘f = id`` and no fixed point (every cycle
    has length 3); ``x + c`` for ``c ≠ 0``; ``c·x`` for ``c ∉ {0, 1}``."""
    if name in ("involution", "three_cycle"):
        k = 2 if name == "involution" else 3
        out = []
        for f in itertools.permutations(range(n)):
            def power(x: int) -> int:
                for _ in range(k):
                    x = f[x]
                return x
            if all(power(x) == x and f[x] != x for x in range(n)):
                out.append(f)
        return out
    if name == "rotation":
        return [tuple((x + c) % n for x in range(n)) for c in range(1, n)]
    if name == "multiplication":
        return [tuple((c * x) % n for x in range(n)) for c in range(2, n)]
    raise ValueError(name)


_ENUM: dict[tuple[str, int], list[tuple[int, ...]]] = {}


def functions(name: str, n: int) -> list[tuple[int, ...]]:
    if (name, n) not in _ENUM:
        _ENUM[name, n] = enumerate_class(name, n)
    return _ENUM[name, n]


def brute(classes: tuple[str, ...], n: int, pairs: list[tuple[int, int]], x: int | None) -> tuple[list[Fraction], list[Fraction] | None]:
    """The exact class posterior and predictive of ``f(x)`` (``None`` without ``x``) given ``pairs``, by summing
    the prior mass ``P(C)/|C|`` of every (class, function) hypothesis that agrees with every pair."""
    cls = [Fraction(0)] * len(classes)
    pred = [Fraction(0)] * n
    for k, name in enumerate(classes):
        fs = functions(name, n)
        weight = Fraction(1, len(classes) * len(fs))
        for f in fs:
            if all(f[a] == b for a, b in pairs):
                cls[k] += weight
                if x is not None:
                    pred[f[x]] += weight
    total = sum(cls)
    assert total > 0
    return [c / total for c in cls], (None if x is None else [p / total for p in pred])


def check_against_enumeration(task: tasks.Task, n_episodes: int, seed: int) -> None:
    """At every position of sampled episodes: the predictive (over symbols, through the episode's true ``π``) and
    the class posterior equal enumeration to 1e-12."""
    ep = task.sample(n_episodes, seed)
    post, cpost = ep.posterior, task.class_posterior(ep.tokens)
    names, N, start = task.class_names, task.n, task.body_start
    for b in range(n_episodes):
        relabel = ep.latent["relabel"][b].tolist()
        xs = ep.latent["x"][b].tolist()
        f = ep.latent["f"][b].tolist()
        for t, x in enumerate(xs):
            pairs = [(a, f[a]) for a in xs[:t]]
            want_cls, want_pred = brute(names, N, pairs, x)
            pos = start + 2 * t
            got = post[b, pos]
            for v in range(N):  # the symbol of value v is π(v)
                assert abs(float(got[relabel[v]]) - float(want_pred[v])) <= 1e-12, (b, t, v)
            assert torch.allclose(cpost[b, pos], torch.tensor([float(c) for c in want_cls], dtype=torch.float64),
                                  rtol=0, atol=1e-12)
            if pos + 1 < task.seq_len:  # at the shown image: the posterior after this pair too
                after, _ = brute(names, N, pairs + [(x, f[x])], None)
                assert torch.allclose(cpost[b, pos + 1], torch.tensor([float(c) for c in after], dtype=torch.float64),
                                      rtol=0, atol=1e-12)
        assert torch.allclose(cpost[b, :start], torch.full((start, len(names)), 1 / len(names), dtype=torch.float64))


CASES = [
    dict(n=6, classes="involution,three_cycle,rotation", L=6, symbols="opaque"),
    dict(n=6, classes="involution,three_cycle", L=9, symbols="integer", replacement=True),
    dict(n=6, classes="involution", L=5, symbols="fixed"),
    dict(n=7, classes="rotation,multiplication", L=6, symbols="fixed"),
    dict(n=7, classes="rotation,multiplication", L=6, symbols="opaque", query_zero=False),
    dict(n=3, classes="three_cycle,rotation,multiplication", L=3, symbols="opaque"),
    dict(n=6, classes="three_cycle,rotation,involution", L=6, symbols="integer"),
    dict(n=5, classes="rotation,multiplication", L=4, symbols="opaque", query_zero=False, facts_in_context=True),
    dict(n=6, classes="involution,rotation", L=5, symbols="fixed", facts_in_context=True),
]


@pytest.mark.parametrize("params", CASES, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_posterior_and_class_posterior_equal_enumeration(params: dict) -> None:
    check_against_enumeration(tasks.make("model_selection", **params), 60, 7)


def test_three_cycles_on_nine_points_equal_enumeration() -> None:
    """Nine points hold up to three open chains at once (the counting's ``s`` and ``r`` reach past six points)."""
    check_against_enumeration(tasks.make("model_selection", n=9, classes="three_cycle,rotation", L=8), 25, 3)


# --- the closed-form counts --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,n", [("involution", 6), ("involution", 4), ("three_cycle", 6), ("three_cycle", 9),
                                    ("rotation", 6), ("rotation", 7), ("multiplication", 7), ("multiplication", 5)])
def test_counts_equal_enumeration(name: str, n: int) -> None:
    """``count_consistent`` equals the number of enumerated functions agreeing with the pairs, on pairs taken from
    a function of another class (often consistent), on random pairs (often not), and with repeated points;
    ``class_size`` is the number of functions."""
    fs = functions(name, n)
    assert class_size(name, n) == len(fs) == count_consistent(name, n, [])
    rng = random.Random(f"{name}{n}")
    pool = [f for c in ("involution", "three_cycle", "rotation", "multiplication")
            for f in (functions(c, n) if class_size(c, n) else [])]
    for trial in range(300):
        m = rng.randint(1, n)
        xs = [rng.randrange(n) for _ in range(m)] if trial % 3 == 0 else rng.sample(range(n), m)
        if trial % 2:
            g = rng.choice(pool)
            pairs = [(x, g[x]) for x in xs]
        else:
            pairs = [(x, rng.randrange(n)) for x in xs]
        want = sum(all(f[a] == b for a, b in pairs) for f in fs)
        assert count_consistent(name, n, pairs) == want, (name, n, pairs)


def test_the_filter_equals_the_counting_formula_beyond_enumeration() -> None:
    """At twelve points (too many to enumerate the 3-cycles), the class posterior and the predictive equal
    ``P(C)·N_C(D)/|C|`` and ``Σ_C P(C|D)·N_C(D ∪ {x↦v})/N_C(D)`` from the exact integer counts."""
    task = tasks.make("model_selection", n=12, classes="involution,three_cycle,rotation", L=12, symbols="opaque")
    ep = task.sample(12, 5)
    cpost = task.class_posterior(ep.tokens)
    for b in range(12):
        relabel, xs, f = (ep.latent[k][b].tolist() for k in ("relabel", "x", "f"))
        for t, x in enumerate(xs):
            pairs = [(a, f[a]) for a in xs[:t]]
            mass = [Fraction(count_consistent(c, 12, pairs), class_size(c, 12)) for c in task.class_names]
            total = sum(mass)
            pos = task.body_start + 2 * t
            assert [abs(float(m / total) - float(p)) <= 1e-12 for m, p in zip(mass, cpost[b, pos])] == [True] * 3
            for v in range(12):
                joint = sum(Fraction(count_consistent(c, 12, pairs + [(x, v)]), class_size(c, 12))
                            for c in task.class_names)
                assert abs(float(joint / total) - float(ep.posterior[b, pos, relabel[v]])) <= 1e-12


# --- a case by hand --------------------------------------------------------------------------------------------
def test_class_posterior_and_predictive_by_hand() -> None:
    """Six points, involutions against 3-cycles, the pairs 0↦1 and 2↦3 shown.

    Class sizes: |I| = 5!! = 15 involutions, |T| = 6!/(3²·2!) = 40 permutations of two 3-cycles.

    After 0↦1 alone: involutions completing it pair up {2,3,4,5}: 3!! = 3 of 15 = 1/5; 3-cycles: the open chain
    0→1 closes through one of the 4 free points, the other 3 form a 3-cycle in 2 ways: 4·2 = 8 of 40 = 1/5.  Equal
    evidence: P(I) = P(T) = 1/2.  Predicting f(2): an involution sends 2 to 3, 4 or 5 (1/3 each); a 3-cycle sends 2
    to a free point (3, 4, 5: 2 of the 8 completions each, 1/4) or into the chain's head 0 (2→0 closes 2→0→1→2:
    2 completions, 1/4).  P(f(2)=0) = ½·¼ = 1/8, P(f(2)=3) = P(4) = P(5) = ½·⅓ + ½·¼ = 7/24.

    After 0↦1 and 2↦3: involutions: only {4,5} is left to pair, 1 of 15; 3-cycles: the chains 0→1 and 2→3 close
    through 4 and 5 in either order, 2 of 40.  P(I) = (1/15)/(1/15 + 1/20) = 4/7, P(T) = 3/7.
    Asking f(1): an involution sends 1 to 0; a 3-cycle sends it to 4 or 5 (½ each): P(0) = 4/7, P(4) = P(5) = 3/14.
    Asking f(4) instead: an involution sends 4 to 5; the 3-cycles are (0 1 4)(2 3 5) and (0 1 5)(2 3 4), sending 4
    to 0 or 2: P(5) = 4/7, P(0) = P(2) = 3/14.
    """
    task = tasks.make("model_selection", n=6, classes="involution,three_cycle", L=3, symbols="integer")
    head = [task.ORD, 0, 1, 2, 3, 4, 5, task.SEP]
    tokens = torch.tensor([head + [0, 1, 2, 3, 1], head + [0, 1, 2, 3, 4]])
    post, cpost = task.posterior(tokens), task.class_posterior(tokens)
    q1, q2, q3 = 8, 10, 12

    def row(d: dict[int, float], size: int = 6) -> torch.Tensor:
        return torch.tensor([d.get(i, 0.0) for i in range(size)], dtype=torch.float64)

    assert torch.allclose(cpost[:, q1], row({0: 1 / 2, 1: 1 / 2}, 2), rtol=0, atol=1e-15)
    assert torch.allclose(cpost[:, q2], row({0: 1 / 2, 1: 1 / 2}, 2), rtol=0, atol=1e-15)
    assert torch.allclose(post[:, q2], row({0: 1 / 8, 3: 7 / 24, 4: 7 / 24, 5: 7 / 24}), rtol=0, atol=1e-15)
    assert torch.allclose(cpost[:, q3], row({0: 4 / 7, 1: 3 / 7}, 2), rtol=0, atol=1e-15)
    assert torch.allclose(cpost[:, q3 - 1], row({0: 4 / 7, 1: 3 / 7}, 2), rtol=0, atol=1e-15)  # at the image 3
    assert torch.allclose(post[0, q3], row({0: 4 / 7, 4: 3 / 14, 5: 3 / 14}), rtol=0, atol=1e-15)
    assert torch.allclose(post[1, q3], row({5: 4 / 7, 0: 3 / 14, 2: 3 / 14}), rtol=0, atol=1e-15)
    # the first query: nothing shown, each class sends 0 uniformly to the other five points
    assert torch.allclose(post[:, q1], row({v: 1 / 5 for v in range(1, 6)}), rtol=0, atol=1e-15)

    # the same episode with opaque symbols: the header says value i is symbol π(i); the posterior moves with π
    opaque = task.replace(symbols="opaque")
    pi = [3, 1, 5, 0, 4, 2]
    otokens = torch.tensor([[opaque.ORD, *pi, opaque.SEP] + [6 + pi[v] for v in (0, 1, 2, 3, 1)]])
    opost = opaque.posterior(otokens)
    assert torch.allclose(opost[0, q3], row({pi[0]: 4 / 7, pi[4]: 3 / 14, pi[5]: 3 / 14}), rtol=0, atol=1e-15)
    assert torch.allclose(opaque.class_posterior(otokens)[0, q3], row({0: 4 / 7, 1: 3 / 7}, 2), rtol=0, atol=1e-15)


def test_arithmetic_by_hand() -> None:
    """Z_7, rotations (6) against multiplications (5), 0 never asked.  After 3↦6: the rotation by 3 and the
    multiplication by 2 agree, one function each: P(rotation) ∝ 1/6, P(multiplication) ∝ 1/5, so 5/11 and 6/11.
    Asking f(5): x+3 gives 1, 2x gives 3: P(1) = 5/11, P(3) = 6/11 — the answer needs the arithmetic."""
    task = tasks.make("model_selection", n=7, classes="rotation,multiplication", L=2, query_zero=False)
    tokens = torch.tensor([[task.ORD, *range(7), task.SEP, 3, 6, 5]])
    post = task.posterior(tokens)[0, 11]
    assert torch.allclose(post, torch.tensor([0, 5 / 11, 0, 6 / 11, 0, 0, 0], dtype=torch.float64), rtol=0, atol=1e-15)
    assert torch.allclose(task.class_posterior(tokens)[0, 11], torch.tensor([5 / 11, 6 / 11], dtype=torch.float64),
                          rtol=0, atol=1e-15)


# --- inputs the task does not sample ----------------------------------------------------------------------------
def test_a_context_no_class_produces_is_uniform_from_there_on() -> None:
    """x ↦ x is no involution and no 3-cycle: the predictive after it and the class posterior are uniform; before it
    they are unchanged.  An opaque header that is not a permutation makes the whole row uniform."""
    task = tasks.make("model_selection", n=6, classes="involution,three_cycle", L=3)
    head = [task.ORD, *range(6), task.SEP]
    good = torch.tensor([head + [0, 1, 2, 3, 1]])
    bad = torch.tensor([head + [0, 1, 2, 2, 1]])
    pg, pb = task.posterior(good), task.posterior(bad)
    assert torch.equal(pg[:, :11], pb[:, :11])
    assert torch.allclose(pb[0, 12], torch.full((6,), 1 / 6, dtype=torch.float64))
    assert torch.allclose(task.class_posterior(bad)[0, 11:], torch.full((2, 2), 0.5, dtype=torch.float64))
    opaque = task.replace(symbols="opaque")
    broken = torch.tensor([[opaque.ORD, 0, 0, 2, 3, 4, 5, opaque.SEP, 6, 7, 8, 9, 7]])
    assert torch.allclose(opaque.posterior(broken)[0, 8::2], torch.full((3, 6), 1 / 6, dtype=torch.float64))


# --- layout and regimes -------------------------------------------------------------------------------------------
def test_the_three_regimes_share_the_episode_and_differ_in_symbols_only() -> None:
    """One seed in the three regimes: the same classes, functions and queries; the same positions; body tokens in
    [0, n) (integer) or [n, 2n) (opaque, fixed); the header the identity, a fresh permutation per episode, or one
    permutation for every episode; and the posterior over symbols is the integer posterior moved by π."""
    base = dict(n=6, classes="involution,three_cycle,rotation", L=6)
    eps = {s: tasks.make("model_selection", **base, symbols=s).sample(40, 11) for s in ("integer", "opaque", "fixed")}
    n, start = 6, 8
    for k in ("cls", "f", "x"):
        assert torch.equal(eps["integer"].latent[k], eps["opaque"].latent[k])
        assert torch.equal(eps["integer"].latent[k], eps["fixed"].latent[k])
    assert torch.equal(eps["integer"].mask, eps["opaque"].mask) and torch.equal(eps["integer"].mask, eps["fixed"].mask)
    for s, ep in eps.items():
        assert ((ep.tokens[:, 0] == 2 * n) & (ep.tokens[:, n + 1] == 2 * n + 1)).all()
        header, body = ep.tokens[:, 1 : n + 1], ep.tokens[:, start:]
        assert (torch.sort(header, 1).values == torch.arange(n)).all()
        lo = 0 if s == "integer" else n
        assert ((body >= lo) & (body < lo + n)).all()
        assert torch.equal(header, ep.latent["relabel"])
        # the posterior over symbols is the integer one moved by π
        moved = torch.zeros_like(ep.posterior[:, start::2]).scatter_(
            2, header[:, None, :].expand(-1, 6, -1), eps["integer"].posterior[:, start::2])
        assert torch.allclose(ep.posterior[:, start::2], moved, rtol=0, atol=1e-15)
        # the target is the symbol of f(x)
        y = ep.latent["f"].gather(1, ep.latent["x"])
        assert torch.equal(ep.targets[:, start::2], header.gather(1, y))
    assert (eps["integer"].tokens[:, 1 : n + 1] == torch.arange(n)).all()
    fixed = eps["fixed"].tokens[:, 1 : n + 1]
    assert (fixed == fixed[0]).all() and not torch.equal(fixed[0], torch.arange(n))
    assert torch.equal(tasks.make("model_selection", **base, symbols="fixed").sample(3, 99).tokens[:, 1 : n + 1],
                       fixed[:3])
    assert len({tuple(h) for h in eps["opaque"].tokens[:, 1 : n + 1].tolist()}) > 30


def test_sampling_is_uniform_over_classes_and_within_each_class() -> None:
    """Each class is drawn with probability 1/K, and each function of a class equally often (15 involutions and
    40 3-cycle permutations of 6 points: counts within 5 standard deviations), every draw a member of its class."""
    for name, n, per in (("involution", 6, 600), ("three_cycle", 6, 600), ("multiplication", 7, 600)):
        fs = functions(name, n)
        drawn = draw_functions(name, n, per * len(fs), torch.Generator().manual_seed(1))
        counts: dict[tuple[int, ...], int] = {}
        for f in map(tuple, drawn.tolist()):
            counts[f] = counts.get(f, 0) + 1
        assert set(counts) == set(fs)
        sd = (per * (1 - 1 / len(fs))) ** 0.5
        assert all(abs(c - per) < 5 * sd for c in counts.values()), (name, sorted(counts.values()))
    task = tasks.make("model_selection", n=6, classes="involution,three_cycle,rotation", L=4)
    lat = task.sample(6000, 0).latent
    freq = torch.bincount(lat["cls"], minlength=3).double() / 6000
    assert (freq - 1 / 3).abs().max() < 0.03
    for k, name in enumerate(task.class_names):
        members = set(functions(name, 6))
        assert all(tuple(f) in members for f in lat["f"][lat["cls"] == k].tolist())


def test_queries_are_distinct_or_not_and_avoid_zero_when_asked() -> None:
    task = tasks.make("model_selection", n=7, classes="rotation,multiplication", L=6, query_zero=False)
    x = task.sample(200, 1).latent["x"]
    assert (x > 0).all() and all(len(set(row)) == 6 for row in x.tolist())
    x = task.replace(replacement=True, L=20).sample(200, 1).latent["x"]
    assert (x > 0).all() and any(len(set(row)) < 20 for row in x.tolist())
    assert (tasks.make("model_selection", n=7, classes="rotation", L=7).sample(50, 2).latent["x"] == 0).any()


@pytest.mark.parametrize("params,field", [
    (dict(n=7), "n"),                                        # involutions need an even n
    (dict(n=8, classes="three_cycle"), "n"),                 # 3-cycles need 3 | n
    (dict(n=9, classes="multiplication"), "n"),              # multiplications need a prime
    (dict(classes="involution,involution"), "classes"),
    (dict(classes="squares"), "classes"),
    (dict(classes=""), "classes"),
    (dict(symbols="hex"), "symbols"),
    (dict(L=13), "L"),                                        # 12 distinct points
    (dict(n=7, classes="rotation", query_zero=False, L=7), "L"),
    (dict(replacement=1), "replacement"),
    (dict(facts_in_context=True), "facts_in_context"),        # no arithmetic class: no table to write
    (dict(n=67, classes="rotation", L=4, facts_in_context=True), "facts_in_context"),
])
def test_bad_parameters_are_refused_naming_the_parameter(params: dict, field: str) -> None:
    with pytest.raises(InvalidValue, match=rf"invalid {field}\b"):
        tasks.make("model_selection", **params)


def test_classes_may_be_given_as_a_tuple() -> None:
    task = tasks.make("model_selection", classes=("three_cycle", "involution"))
    assert task.classes == "three_cycle,involution" and task.class_names == ("three_cycle", "involution")


def test_facts_in_context_are_the_operation_tables_in_the_episodes_symbols() -> None:
    """With ``facts_in_context``: between the header and the queries, every fact ``a + b`` and ``a·b`` mod n (all
    n² of each table, each once) in the episode's symbols, true under the header's π, in an order that changes
    between episodes; the episode, its targets and its posterior at the queries are those drawn without facts."""
    n = 5
    with_facts = tasks.make("model_selection", n=n, classes="rotation,multiplication", L=4, symbols="opaque",
                            query_zero=False, facts_in_context=True)
    plain = with_facts.replace(facts_in_context=False)
    ep, ref = with_facts.sample(30, 4), plain.sample(30, 4)
    assert with_facts.n_facts == 2 * n * n and with_facts.seq_len == plain.seq_len + 4 * 2 * n * n
    assert with_facts.vocab_size == 2 * n + 4 and int(ep.tokens.max()) < with_facts.vocab_size
    for k in ("cls", "f", "x", "relabel"):
        assert torch.equal(ep.latent[k], ref.latent[k])
    start = with_facts.body_start
    assert torch.equal(ep.tokens[:, start:], ref.tokens[:, plain.body_start:])
    assert torch.equal(ep.targets[:, start:], ref.targets[:, plain.body_start:])
    assert torch.allclose(ep.posterior[:, start:], ref.posterior[:, plain.body_start:], rtol=0, atol=0)
    orders = set()
    for b in range(30):
        relabel = ep.latent["relabel"][b].tolist()
        value = {relabel[v] + n: v for v in range(n)}  # opaque token → value
        block = ep.tokens[b, with_facts.facts_start : start].view(-1, 4).tolist()
        seen = {"+": set(), "×": set()}
        for a, op, c_b, c in block:
            name = {2 * n + 2: "+", 2 * n + 3: "×"}[op]
            x, y, z = value[a], value[c_b], value[c]
            assert z == ((x + y) % n if name == "+" else (x * y) % n)
            seen[name].add((x, y))
        assert all(len(v) == n * n for v in seen.values())
        orders.add(tuple(map(tuple, block)))
    assert len(orders) == 30
    shown = with_facts.decode(ep, 0)[with_facts.facts_start : start]
    assert all(w in ("+", "×") for w in shown[1::4]) and all(w.startswith("=s") for w in shown[3::4])


# --- the header-blind posterior: a reader who sees every pair but not the header ------------------------------------

def brute_header_blind(classes: tuple[str, ...], n: int, query_zero: bool, pairs: list[tuple[int, int]], asked: list[int],
                       s: int) -> list[Fraction]:
    """The predictive of ``g(s)`` over symbols for a reader without the header, by summing over every relabelling
    ``π`` and every (class, function) hypothesis the prior mass ``P(C)/|C|/n!`` of those under which every shown
    symbol pair is ``π∘f∘π⁻¹`` and (when 0 is never asked) no asked symbol is ``π(0)``."""
    pred = [Fraction(0)] * n
    for pi in itertools.permutations(range(n)):
        inverse = {p: v for v, p in enumerate(pi)}
        if not query_zero and any(inverse[a] == 0 for a in [*asked, s]):
            continue
        for name in classes:
            fs = functions(name, n)
            for f in fs:
                g = {a: pi[f[inverse[a]]] for a in range(n)}
                if all(g[a] == b for a, b in pairs):
                    pred[g[s]] += Fraction(1, len(classes) * len(fs))
    total = sum(pred)
    return [p / total for p in pred]


def test_the_header_blind_posterior_by_hand() -> None:
    # n = 3, rotations (x+1, x+2: the two 3-cycles) against the one multiplication (x -> 2x: fixes 0, swaps 1 and 2),
    # 0 never asked.  At the first query s, a reader without the header knows only that s is not pi(0): a rotation
    # sends s to either other symbol (1/2 each), the multiplication to the one other symbol that is not pi(0), and
    # pi(0) is either of them (1/2 each) — so 1/2, 1/2 on the two other symbols.  The exact posterior, which reads x from
    # the header, puts 1/2·1/2 + 1/2 = 3/4 on 2x and 1/4 on the third value.
    task = tasks.make("model_selection", n=3, classes="rotation,multiplication", L=2, symbols="opaque", query_zero=False)
    ep = task.sample(40, 0)
    q = int(task.query_positions()[0])
    blind, exact = task.header_blind_posterior(ep.tokens)[:, q], ep.posterior[:, q]
    for b in range(40):
        s = int(ep.tokens[b, q]) - task.offset
        others = [c for c in range(3) if c != s]
        assert blind[b, s] == 0 and all(abs(float(blind[b, c]) - 0.5) < 1e-12 for c in others)
        pi = ep.latent["relabel"][b].tolist()
        twice = pi[(2 * pi.index(s)) % 3]  # the symbol of 2x
        assert abs(float(exact[b, twice]) - 0.75) < 1e-12 and exact[b, s] == 0


@pytest.mark.parametrize("params", [
    {"n": 5, "classes": "rotation,multiplication", "L": 4, "query_zero": False},
    {"n": 5, "classes": "rotation,multiplication", "L": 3, "query_zero": True},
    {"n": 6, "classes": "involution,rotation", "L": 4, "query_zero": True},
])
def test_the_header_blind_posterior_equals_enumeration_over_every_relabelling(params: dict) -> None:
    task = tasks.make("model_selection", symbols="opaque", **params)
    ep = task.sample(12, 3)
    blind = task.header_blind_posterior(ep.tokens)
    classes, n = task.class_names, task.n
    for b in range(len(ep.tokens)):
        body = (ep.tokens[b, task.body_start :] - task.offset).tolist()
        asked, shown = body[0::2], body[1::2]
        for j, s in enumerate(asked):
            want = brute_header_blind(classes, n, task.query_zero, list(zip(asked[:j], shown[:j])), asked[:j], s)
            got = blind[b, task.body_start + 2 * j]
            assert torch.allclose(got, torch.tensor([float(w) for w in want], dtype=torch.float64), rtol=0, atol=1e-12)


def test_the_header_blind_posterior_ignores_the_header_and_is_bayes_where_the_header_carries_nothing() -> None:
    arith = tasks.make("model_selection", n=7, classes="rotation,multiplication", L=6, symbols="opaque", query_zero=False)
    ep = arith.sample(64, 1)
    other = ep.tokens.clone()
    other[:, 1 : arith.n + 1] = other[:, 1 : arith.n + 1].roll(1, dims=0)  # another episode's header
    blind = arith.header_blind_posterior(ep.tokens)
    assert torch.equal(blind, arith.header_blind_posterior(other))
    assert not torch.equal(ep.posterior, arith.posterior(other))  # the exact posterior reads the header
    # the header is worth something on the arithmetic pair: the blind reader is further from Bayes than zero and
    # nearer than the context-blind floor (it reads the symbols' relations)
    kl = (ep.posterior * (ep.posterior.clamp_min(1e-300).log2() - blind.clamp_min(1e-300).log2())).where(
        ep.posterior > 0, torch.zeros(())).sum(-1)[ep.mask]
    assert kl.mean() > 0.1
    # involutions and 3-cycles are closed under relabelling: asked everywhere, the header then carries nothing
    relational = tasks.make("model_selection", n=6, classes="involution,three_cycle", L=5, symbols="opaque")
    ep = relational.sample(64, 2)
    assert torch.allclose(relational.header_blind_posterior(ep.tokens), ep.posterior, rtol=0, atol=1e-12)


@pytest.mark.parametrize("params", [
    {"symbols": "integer"}, {"symbols": "fixed"}, {"symbols": "opaque", "facts_in_context": True},
    {"symbols": "opaque", "n": 11},
])
def test_the_header_blind_posterior_is_none_where_it_is_not_defined_or_not_computed(params: dict) -> None:
    task = tasks.make("model_selection", **{"n": 7, "classes": "rotation,multiplication", "L": 4, **params})
    assert task.header_blind_posterior(task.sample(2, 0).tokens) is None


def test_the_header_blind_row_is_among_an_opaque_columns_references_alone() -> None:
    from windtunnel.orchestration import table

    assert "header_blind" in table.reference_rows("quick", "ms_arith_opaque")
    assert "header_blind" not in table.reference_rows("quick", "ms_arith_integer")
    assert "header_blind" not in table.reference_rows("quick", "ms_arith_fixed")
