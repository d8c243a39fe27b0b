"""Model selection over function classes (Dalal, Misra, Parekh, arXiv 2607.19379, the sequel to Papers I–III).

A hidden function ``f`` on the domain ``Z_n = {0, …, n−1}`` is drawn from one of several *classes*; the model
sees input–output pairs ``(x, f(x))`` and predicts ``f(x)`` at each new ``x``, which the Bayes-optimal predictor
does by mixing the classes by their posterior.  Every class is a finite set of functions ``Z_n → Z_n``:

* ``involution`` — the fixed-point-free involutions (``f∘f = id``, ``f(x) ≠ x``; needs ``n`` even):
  ``|C| = (n−1)!! = (n−1)(n−3)⋯1``;
* ``three_cycle`` — the permutations whose cycles all have length 3 (needs ``3 | n``):
  ``|C| = n! / (3^{n/3} (n/3)!)``;
* ``rotation`` — ``x ↦ x + c mod n`` for ``c ∈ {1, …, n−1}`` (any ``n ≥ 2``): ``|C| = n − 1``;
* ``multiplication`` — ``x ↦ c·x mod n`` for ``c ∈ {2, …, n−1}`` (``n`` prime ``≥ 3``, so each is a
  permutation): ``|C| = n − 2``.

**Domain.**  All classes act on the same ``Z_n`` so that they are sets of functions on one domain.  Every
multiplication fixes 0 and no rotation does, so a query of 0 names the arithmetic class at once; with
``query_zero = false`` the query points are drawn from ``{1, …, n−1}`` only (the functions are still functions on
all of ``Z_n``: 0 is simply never asked).  Which points are asked is drawn independently of ``f``, so the
likelihood of an episode is that of its shown pairs alone and the posteriors below hold under either choice.
The classes may overlap (``x ↦ x + n/2`` is a rotation and a fixed-point-free involution; ``x ↦ x ± n/3`` are
rotations made of 3-cycles): the hypotheses are the pairs (class, function), so a function in two classes is
counted in each, with its class's prior mass ``P(C)/|C|``.

**Episodes.**  Class ``C`` uniform over ``classes``, ``f`` uniform within ``C``, then ``L`` query points
``x_1, …, x_L``, distinct (``replacement = false``, the default: each pair is new evidence) or drawn with
replacement (a repeated point is then a lookup).

**Layout** (the same in every regime, ``T = n + 2L + 1`` without facts)::

    ORD h_0 h_1 … h_{n−1} SEP  s(x_1) s(y_1)  s(x_2) s(y_2)  …  s(x_L)

with ``y_t = f(x_t)``; ``ORD = 2n``, ``SEP = 2n + 1``.  The header states the relabelling ``π`` of the
episode: ``h_i = π(i)`` written as the integer token ``π(i) ∈ [0, n)`` (position ``i`` of the header is the
integer ``i``), and the body writes each value ``v`` as its symbol ``s(v)``.  The model predicts, at the
position of ``s(x_t)``, the symbol of ``f(x_t)`` (scored; the last ``y`` is not shown).

* ``symbols = "integer"`` — ``π`` is the identity and the body tokens are the integers themselves,
  ``s(v) = v`` (the header, then always ``0 1 … n−1``, carries nothing: it is kept so that every regime has the
  same positions);
* ``symbols = "opaque"`` — each episode draws ``π`` uniformly; the body tokens are the opaque symbols
  ``s(v) = n + π(v)``, a token range of their own, whose meaning only the header gives (the authors' format
  for per-episode relabelling, ``[ORD, π(0), …, π(n−1), SEP]`` before opaque tokens ``n + π(v)``);
* ``symbols = "fixed"`` — the same layout with one relabelling fixed for the task (the same header in every
  episode, drawn once from a constant seed per ``n``): the control where the opaque symbols have a stable meaning.

``facts_in_context = true`` (a control: the arithmetic given as relations between symbols, as *In-Context
Algebra* gives a group's facts, instead of to be worked out from the integers the header names): between the
header and the first query, every fact ``a ∘ b = c`` of the operation of each arithmetic class present (``+`` for
rotations, ``×`` for multiplications, all ``a, b ∈ Z_n``: ``n²`` facts a table), written as the four tokens
``s(a) OP s(b) s(c)`` with ``OP`` the token ``2n + 2`` (``+``) or ``2n + 3`` (``×``), in an order drawn per
episode.  The header stays; the facts hold for every function of every class, so the posterior is unchanged.
A rotation's answer is then two look-ups (``x_1 + c = y_1`` names ``c``, ``x + c`` is the answer), a
multiplication's the same in the other table.

The class a position predicts is the symbol index: ``c = v`` (integer) or ``c = π(v)`` (opaque, fixed), so
``n_classes = n`` and the exact posterior over ``c`` is the value posterior mapped through ``π``.

**Exact posterior** (float64; :meth:`posterior`, :meth:`class_posterior`).  After the shown pairs ``D``,

    P(C | D) ∝ P(C) · N_C(D) / |C|,          P(f(x) = v | D) = Σ_C P(C | D) · N_C(D ∪ {x ↦ v}) / N_C(D),

with ``N_C(D)`` the functions of ``C`` consistent with ``D`` (:func:`count_consistent`).  The posterior is
computed by the chain rule, one pair at a time: ``N_C(D)/|C| = Π_j P_C(f(x_j) = y_j | D_{<j})``, the class
weights updated by each pair's within-class predictive probability and renormalised, with the within-class
predictives in closed form:

* involution — with ``F`` the points no shown pair touches (each shown ``x ↦ y`` also fixes ``y ↦ x``):
  a matched ``x`` goes to its partner; a free ``x`` is uniform over ``F ∖ {x}``, ``1/(|F|−1)`` each.
  ``N(D) = (|F| − 1)!!``, and ``0`` when ``D`` shows a fixed point or a point with two partners;
* three_cycle — the shown pairs form a partial functional graph whose components must be closed 3-cycles, paths
  of two edges ``a→b→c`` (the cycle is forced: ``c ↦ a``), paths of one edge ``a→b`` (``s`` of them: each needs one
  more point) and ``r`` free points.  With ``j = r − s`` (a multiple of 3):
  ``N(D) = r!/(r−s)! · T(j)``, ``T(3k) = (3k)!/(3^k k!)`` (each one-edge path picks a distinct free point to close
  its cycle, the other free points form 3-cycles among themselves), and ``0`` for any other component (a fixed
  point, a 2-cycle, a path of three edges, a point with two images or preimages).  Predictive at ``x``: a shown
  ``x`` (or the end ``c`` of ``a→b→c``) is forced; the end of a one-edge path ``a→x`` goes to each free point with
  ``1/r``; a free ``x`` goes to each other free point with ``j/(r(r−1))`` and to each head ``a`` of a one-edge
  path ``a→b`` with ``1/r`` (``(r−1)·j/(r(r−1)) + s/r = 1``);
* rotation, multiplication — at most ``n`` candidate constants: the consistent ones are kept, the predictive is
  the share of them sending ``x`` to each value.

**Header-blind posterior** (:meth:`ModelSelection.header_blind_posterior`; opaque symbols without facts,
``n ≤ 8``).  The exact predictive of a reader who sees every shown pair but not the header: with ``π`` unknown and
uniform, the body is the function ``g = π∘f∘π⁻¹`` on the symbols, and a symbol is never asked when it is
``π(0)`` and 0 is never asked.  It is the Bayes mixture over the hypotheses ``(π, f)``, weight ``P(C)/(|C|·n!)``,
that agree with every shown symbol pair and every query so far, computed by enumerating the ``n!`` relabellings.
It is what a model can reach from the symbols' relations alone (a rotation mod a prime is a single ``n``-cycle, a
multiplication fixes ``π(0)`` and has cycles of its order): the level of a model that never composes the header
with the arithmetic.  For classes closed under relabelling (involutions, 3-cycles) asked at every point it is the
exact posterior itself: the header then carries nothing.

A context no class can produce (not one the task samples: from the first pair that no class allows on, or with
an opaque header that is not a permutation) has a uniform predictive and a uniform class posterior.
``tests/test_model_selection.py`` checks every formula against enumeration of every function of every class.

The module is longer than 600 lines because a task is one file: the four classes' counting and predictives, the
three symbol regimes and the facts control share the one layout and the one chain-rule filter, and splitting them
would put a class's counting apart from the filter that must agree with it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import torch

from .base import IGNORE, Episodes, Task, check, generator, register, register_preset, uniform_rows
from ..errors import is_int

CLASS_NAMES: tuple[str, ...] = ("involution", "three_cycle", "rotation", "multiplication")
"""The function classes a task may select among."""

SYMBOL_REGIMES: tuple[str, ...] = ("integer", "opaque", "fixed")
"""How values are written: the integers themselves, symbols relabelled every episode, or one fixed relabelling."""

FACT_OPS: tuple[str, ...] = ("rotation", "multiplication")
"""The classes whose operation (``+``, ``×`` mod ``n``) ``facts_in_context`` writes as a table of facts."""

MAX_FACTS_N = 64
"""The largest ``n`` with ``facts_in_context`` (each table is ``n²`` facts of four tokens)."""

MAX_HEADER_BLIND_N = 8
"""The largest ``n`` whose header-blind posterior is computed (:meth:`ModelSelection.header_blind_posterior`
enumerates the ``n!`` relabellings: 40,320 at 8)."""

FIXED_RELABEL_SEED = 0x5E1EC7_0000
"""The generator seed (plus ``n``) of the one relabelling of ``symbols = "fixed"``."""


def is_prime(n: int) -> bool:
    """Whether ``n`` is a prime (trial division: ``n`` is small)."""
    return n >= 2 and all(n % d for d in range(2, math.isqrt(n) + 1))


def double_factorial(k: int) -> int:
    """``k!! = k (k−2) (k−4) ⋯`` down to 1 or 2, with ``(−1)!! = 0!! = 1``."""
    out = 1
    while k > 1:
        out *= k
        k -= 2
    return out


def three_cycle_count(m: int) -> int:
    """``T(m)``: the permutations of ``m`` points made only of 3-cycles, ``m!/(3^{m/3} (m/3)!)`` (0 unless ``3 | m``)."""
    if m < 0 or m % 3:
        return 0
    return math.factorial(m) // (3 ** (m // 3) * math.factorial(m // 3))


def class_size(name: str, n: int) -> int:
    """``|C|``: the number of functions of class ``name`` on ``Z_n`` (module docstring)."""
    if name == "involution":
        return double_factorial(n - 1) if n % 2 == 0 else 0
    if name == "three_cycle":
        return three_cycle_count(n)
    if name == "rotation":
        return n - 1
    if name == "multiplication":
        return n - 2 if is_prime(n) else 0
    raise ValueError(f"unknown class {name!r}")


def _partial_function(pairs: Sequence[tuple[int, int]]) -> dict[int, int] | None:
    """The shown pairs as a partial function, or ``None`` when a point is shown with two different images."""
    f: dict[int, int] = {}
    for x, y in pairs:
        if f.setdefault(int(x), int(y)) != int(y):
            return None
    return f


def count_consistent(name: str, n: int, pairs: Sequence[tuple[int, int]]) -> int:
    """``N_C(D)``: the functions of class ``name`` on ``Z_n`` that agree with every pair ``(x, y)`` of ``pairs``
    (exact integer; the closed forms of the module docstring, by classifying the shown partial function)."""
    f = _partial_function(pairs)
    if f is None or any(not (0 <= v < n) for kv in f.items() for v in kv):
        return 0
    if name == "involution":
        if n % 2:
            return 0
        partner: dict[int, int] = {}
        for x, y in f.items():
            if x == y or partner.setdefault(x, y) != y or partner.setdefault(y, x) != x:
                return 0
        return double_factorial(n - len(partner) - 1)
    if name == "three_cycle":
        if n % 3:
            return 0
        pre: dict[int, int] = {}
        for x, y in f.items():
            if pre.setdefault(y, x) != x:  # two preimages
                return 0
        touched = set(f) | set(pre)
        single = 0  # paths of one edge a→b (a has no preimage, b no image)
        seen: set[int] = set()
        for start in touched:
            if start in seen:
                continue
            # walk back to the start of the component (or around a cycle)
            a = start
            while a in pre and pre[a] != start:
                a = pre[a]
                if a == start:
                    break
            if a in pre:  # a cycle: walk it
                comp, b = [a], f[a]
                while b != a:
                    comp.append(b)
                    b = f[b]
                if len(comp) != 3:
                    return 0
            else:  # a path from a
                comp, b = [a], a
                while b in f:
                    b = f[b]
                    comp.append(b)
                if len(comp) > 3:
                    return 0
                single += len(comp) == 2
            seen.update(comp)
        r = n - len(touched)
        if single > r:
            return 0
        return math.perm(r, single) * three_cycle_count(r - single)
    if name == "rotation":
        return sum(all((x + c) % n == y for x, y in f.items()) for c in range(1, n))
    if name == "multiplication":
        if not is_prime(n):
            return 0
        return sum(all((c * x) % n == y for x, y in f.items()) for c in range(2, n))
    raise ValueError(f"unknown class {name!r}")


# --- the classes as batched filters -------------------------------------------------------------------------
class _Filter:
    """One class's exact within-class predictive over a batch, updated pair by pair (the module docstring's
    closed forms).  ``predict(x) [B, n]``: ``P_C(f(x) = v | D)`` for the shown pairs ``D`` so far (rows of a
    class that ``D`` already rules out are never read); ``update(x, y, alive)``: add the pair ``x ↦ y`` to the
    rows ``alive`` (those where it has positive probability under the class)."""

    def __init__(self, B: int, n: int) -> None:
        self.B, self.n = B, n
        self.rows = torch.arange(B)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def update(self, x: torch.Tensor, y: torch.Tensor, alive: torch.Tensor) -> None:
        raise NotImplementedError

    def _onehot(self, v: torch.Tensor) -> torch.Tensor:
        return torch.zeros(self.B, self.n, dtype=torch.float64).scatter_(1, v.clamp(0, self.n - 1)[:, None], 1.0)


class _Involution(_Filter):
    """Fixed-point-free involutions: ``partner[b, v]`` the point ``v`` is paired with (−1: free)."""

    def __init__(self, B: int, n: int) -> None:
        super().__init__(B, n)
        self.partner = torch.full((B, n), -1, dtype=torch.long)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        p = self.partner[self.rows, x]
        free = self.partner < 0
        free[self.rows, x] = False
        uniform = free.double() / free.sum(1, keepdim=True).clamp_min(1)  # 1/(|F|−1) on F∖{x}
        return torch.where((p >= 0)[:, None], self._onehot(p), uniform)

    def update(self, x: torch.Tensor, y: torch.Tensor, alive: torch.Tensor) -> None:
        rows = self.rows[alive]
        self.partner[rows, x[alive]] = y[alive]
        self.partner[rows, y[alive]] = x[alive]


class _ThreeCycle(_Filter):
    """Permutations made of 3-cycles: the shown partial function ``succ`` and its inverse ``pred`` (−1: none)."""

    def __init__(self, B: int, n: int) -> None:
        super().__init__(B, n)
        self.succ = torch.full((B, n), -1, dtype=torch.long)
        self.pred = torch.full((B, n), -1, dtype=torch.long)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        succ, pred, rows = self.succ, self.pred, self.rows
        free = (succ < 0) & (pred < 0)
        r = free.sum(1).double()
        after = succ.gather(1, succ.clamp_min(0))  # the image of each point's image
        heads = (succ >= 0) & (pred < 0) & (after < 0)  # a of a one-edge path a→b
        s = heads.sum(1).double()
        j = r - s
        sx, a = succ[rows, x], pred[rows, x]
        z = pred[rows, a.clamp_min(0)]
        forced = torch.where(sx >= 0, sx, z)  # shown x, or the end c of a→b→c (c ↦ a)
        is_forced = (sx >= 0) | ((a >= 0) & (z >= 0))
        tail = (sx < 0) & (a >= 0) & (z < 0)  # the end of a one-edge path a→x
        r1 = r.clamp_min(1)[:, None]
        to_free = free.double() / r1
        others = free.clone()
        others[rows, x] = False
        from_free = others.double() * (j / (r * (r - 1)).clamp_min(1))[:, None] + heads.double() / r1
        out = torch.where(tail[:, None], to_free, from_free)
        return torch.where(is_forced[:, None], self._onehot(forced), out)

    def update(self, x: torch.Tensor, y: torch.Tensor, alive: torch.Tensor) -> None:
        rows = self.rows[alive]
        self.succ[rows, x[alive]] = y[alive]
        self.pred[rows, y[alive]] = x[alive]


class _Table(_Filter):
    """A class given as a table of its functions ``table [K, n]``: the consistent ones ``keep [B, K]``."""

    def __init__(self, B: int, n: int, table: torch.Tensor) -> None:
        super().__init__(B, n)
        self.table = table
        self.keep = torch.ones(B, table.shape[0], dtype=torch.bool)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        images = self.table[:, x].T  # [B, K]: f_k(x_b)
        counts = torch.zeros(self.B, self.n, dtype=torch.float64).scatter_add_(1, images, self.keep.double())
        return counts / counts.sum(1, keepdim=True).clamp_min(1)

    def update(self, x: torch.Tensor, y: torch.Tensor, alive: torch.Tensor) -> None:
        self.keep &= (self.table[:, x].T == y[:, None]) | ~alive[:, None]


def class_table(name: str, n: int) -> torch.Tensor:
    """The functions of an arithmetic class as rows ``[K, n]`` (``table[k, x] = f_k(x)``)."""
    x = torch.arange(n)
    if name == "rotation":
        return (x[None, :] + torch.arange(1, n)[:, None]) % n
    if name == "multiplication":
        return (x[None, :] * torch.arange(2, n)[:, None]) % n
    raise ValueError(f"class {name!r} has no table")


def _make_filter(name: str, B: int, n: int) -> _Filter:
    if name == "involution":
        return _Involution(B, n)
    if name == "three_cycle":
        return _ThreeCycle(B, n)
    return _Table(B, n, class_table(name, n))


def exact_filter(classes: Sequence[str], n: int, xs: torch.Tensor, ys: torch.Tensor,
                 within_out: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact value predictive and class posterior of a batch of episodes (values, not symbols).

    ``xs [B, L]`` the query points, ``ys [B, L']`` (``L' ≥ L − 1``) their shown images.  Returns
    ``(predictive [B, L, n], class_posterior [B, L + 1, K])``: ``predictive[:, t]`` is ``P(f(x_t) = · | D_{<t})``
    and ``class_posterior[:, t]`` is ``P(C | D_{<t})`` (``D_{<t}`` the pairs before the ``t``-th query; index
    ``L`` after ``min(L, L')`` pairs).  A row where no class remains (inputs the task does not sample) is
    uniform from there on, in both.  Float64; the class weights are the chain rule
    ``P(C)·Π_j P_C(y_j | D_{<j})``, renormalised after each pair.  ``within_out``, where given, receives the
    within-class predictives ``P_C(f(x_t) = · | D_{<t})`` as one tensor ``[B, L, K, n]`` (a class the pairs have
    ruled out keeps the predictive of the last pairs it allowed: read it only where its posterior is above 0)."""
    B, L = xs.shape
    K = len(classes)
    filters = [_make_filter(c, B, n) for c in classes]
    w = torch.full((B, K), 1.0 / K, dtype=torch.float64)  # the uniform class prior
    dead = torch.zeros(B, dtype=torch.bool)
    pred = torch.empty(B, L, n, dtype=torch.float64)
    post = torch.empty(B, L + 1, K, dtype=torch.float64)
    uniform_v = torch.full((B, n), 1.0 / n, dtype=torch.float64)
    uniform_k = torch.full((B, K), 1.0 / K, dtype=torch.float64)
    withins = []
    for t in range(L + 1):
        post[:, t] = torch.where(dead[:, None], uniform_k, w)
        if t == L:
            break
        x = xs[:, t]
        within = torch.stack([f.predict(x) for f in filters], 1)  # [B, K, n]
        withins.append(within)
        pred[:, t] = torch.where(dead[:, None], uniform_v, (w[:, :, None] * within).sum(1))
        if t >= ys.shape[1]:
            continue
        y = ys[:, t]
        like = within.gather(2, y[:, None, None].expand(B, K, 1))[..., 0]  # P_C(f(x_t) = y_t | D_{<t})
        w = w * like
        total = w.sum(1, keepdim=True)
        dead = dead | (total[:, 0] <= 0)
        w = torch.where(total > 0, w / total.clamp_min(1e-300), w)
        for k, f in enumerate(filters):
            f.update(x, y, (like[:, k] > 0) & (w[:, k] > 0))
    if within_out is not None:
        within_out.append(torch.stack(withins, 1) if withins else torch.empty(B, 0, K, n, dtype=torch.float64))
    return pred, post


def _class_functions(name: str, n: int) -> torch.Tensor:
    """Every function of class ``name`` on ``Z_n`` as rows ``[|C|, n]`` (the relational classes by filtering the
    ``n!`` permutations: meant for small ``n``)."""
    if name in ("rotation", "multiplication"):
        return class_table(name, n)
    perms = torch.tensor(list(itertools.permutations(range(n))), dtype=torch.long)
    twice = perms.gather(1, perms)
    moved = (perms != torch.arange(n)).all(1)  # no fixed point
    keep = moved & ((twice == torch.arange(n)).all(1) if name == "involution"
                    else (perms.gather(1, twice) == torch.arange(n)).all(1))
    return perms[keep]


def draw_functions(name: str, n: int, B: int, g: torch.Generator) -> torch.Tensor:
    """``B`` functions drawn uniformly from class ``name``, as images ``[B, n]``."""
    if name in ("involution", "three_cycle"):
        k = 2 if name == "involution" else 3
        perm = torch.argsort(torch.rand(B, n, generator=g), dim=1).view(B, n // k, k)
        # consecutive blocks of a uniform random order are the pairs / cycles: each function of the class
        # arises from the same number of orders (k^{n/k}·(n/k)! for 3-cycles, 2^{n/2}·(n/2)! for involutions)
        f = torch.empty(B, n, dtype=torch.long)
        f.scatter_(1, perm.reshape(B, n), perm.roll(-1, dims=2).reshape(B, n))
        return f
    table = class_table(name, n)
    return table[torch.randint(0, table.shape[0], (B,), generator=g)]


@register
@dataclass(frozen=True)
class ModelSelection(Task):
    """Model selection among function classes on ``Z_n`` from ``L`` shown pairs (module docstring)."""

    name = "model_selection"
    summary = "hidden function from one of several classes (involutions, 3-cycles, rotations, multiplications); predict f(x) as the Bayes mixture over classes"
    tiny = {"n": 6, "L": 5, "symbols": "opaque"}

    n: int = 12
    classes: str = "involution,three_cycle"
    L: int = 12
    symbols: str = "integer"
    replacement: bool = False
    query_zero: bool = True
    facts_in_context: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.classes, (tuple, list)) and all(isinstance(c, str) for c in self.classes):
            object.__setattr__(self, "classes", ",".join(self.classes))  # one spelling: a comma-separated string
        super().__post_init__()

    def validate(self) -> None:
        check(isinstance(self.classes, str) and all(c.strip() in CLASS_NAMES for c in self.classes.split(","))
              and len(self.class_names) == len(set(self.class_names)),
              "classes", f"distinct names from {', '.join(CLASS_NAMES)}, comma-separated")
        check(is_int(self.n) and 2 <= self.n <= 1024, "n", "an integer in [2, 1024]")
        need = {"involution": (lambda n: n % 2 == 0, "even"), "three_cycle": (lambda n: n % 3 == 0, "a multiple of 3"),
                "rotation": (lambda n: True, ""), "multiplication": (lambda n: is_prime(n) and n >= 3, "a prime ≥ 3")}
        for c in self.class_names:
            ok, what = need[c]
            check(ok(self.n), "n", f"{what} for the class {c} (classes {self.classes!r})")
        check(self.symbols in SYMBOL_REGIMES, "symbols", f"one of {', '.join(SYMBOL_REGIMES)}")
        check(isinstance(self.replacement, bool), "replacement", "true or false")
        check(isinstance(self.query_zero, bool), "query_zero", "true or false")
        check(isinstance(self.facts_in_context, bool) and (not self.facts_in_context or (
            any(c in FACT_OPS for c in self.class_names) and self.n <= MAX_FACTS_N)), "facts_in_context",
              f"true or false; true only with rotation or multiplication among the classes and n ≤ {MAX_FACTS_N} "
              "(the facts are their operation tables, n² each)")
        hi = 4096 if self.replacement else self.n_points
        check(is_int(self.L) and 1 <= self.L <= hi, "L", f"an integer in [1, {hi}]"
              + ("" if self.replacement else " (distinct query points)"))

    # --- sizes and token ids ------------------------------------------------------------------------------
    @property
    def class_names(self) -> tuple[str, ...]:
        """The classes selected among, in order (the last axis of :meth:`class_posterior`)."""
        return tuple(c.strip() for c in self.classes.split(","))

    @property
    def n_points(self) -> int:
        """How many points may be asked: ``n``, or ``n − 1`` without 0."""
        return self.n if self.query_zero else self.n - 1

    @property
    def ORD(self) -> int:
        """The token opening the header."""
        return 2 * self.n

    @property
    def SEP(self) -> int:
        """The token closing the header."""
        return 2 * self.n + 1

    @property
    def offset(self) -> int:
        """The token id of symbol 0 in the body: 0 (integer) or ``n`` (opaque, fixed)."""
        return 0 if self.symbols == "integer" else self.n

    @property
    def fact_classes(self) -> tuple[str, ...]:
        """The classes whose operation table is written as facts (none unless ``facts_in_context``)."""
        return tuple(c for c in self.class_names if c in FACT_OPS) if self.facts_in_context else ()

    @property
    def n_facts(self) -> int:
        """How many facts ``a ∘ b = c`` the facts block holds: ``n²`` per table."""
        return len(self.fact_classes) * self.n**2

    @property
    def facts_start(self) -> int:
        """The position of the first fact, ``n + 2`` (right after the header)."""
        return self.n + 2

    @property
    def body_start(self) -> int:
        """The position of the first query: ``n + 2``, after the facts ``n + 2 + 4·n_facts``."""
        return self.facts_start + 4 * self.n_facts

    def op_token(self, name: str) -> int:
        """The token of a class's operation in the facts: ``+`` (rotation) ``2n + 2``, ``×`` (multiplication)
        ``2n + 3``."""
        return 2 * self.n + 2 + FACT_OPS.index(name)

    @property
    def n_classes(self) -> int:
        return self.n

    @property
    def vocab_size(self) -> int:
        return 2 * self.n + (4 if self.facts_in_context else 2)

    @property
    def seq_len(self) -> int:
        return self.body_start + 2 * self.L - 1

    @property
    def length_param(self) -> str:
        return "L"

    def query_positions(self) -> torch.Tensor:
        """The positions of the queries ``x_1 … x_L`` (the scored positions)."""
        return self.body_start + 2 * torch.arange(self.L)

    def fixed_relabel(self) -> torch.Tensor:
        """The relabelling ``π [n]`` of ``symbols = "fixed"`` (the same for every task with this ``n``)."""
        return torch.argsort(torch.rand(self.n, generator=torch.Generator().manual_seed(FIXED_RELABEL_SEED + self.n)))

    # --- sampling --------------------------------------------------------------------------------------------
    def draw(self, n_episodes: int, seed: int) -> dict[str, torch.Tensor]:
        """The latent draws of ``n_episodes`` episodes: ``cls [B]`` (index into :attr:`class_names`), ``f [B, n]``
        (images), ``x [B, L]`` (query points) and ``relabel [B, n]`` (``π``).  The class, the function and the
        queries come from one stream and ``π`` from another, so the three regimes of one seed share everything
        but the symbols."""
        check(is_int(n_episodes) and n_episodes >= 1, "n", "a positive integer")
        g = generator(seed)
        B, n = n_episodes, self.n
        cls = torch.randint(0, len(self.class_names), (B,), generator=g)
        f = torch.empty(B, n, dtype=torch.long)
        for k, name in enumerate(self.class_names):  # every class drawn for every row: the stream is per-row stable
            fk = draw_functions(name, n, B, g)
            f = torch.where((cls == k)[:, None], fk, f)
        lo = n - self.n_points  # 0, or 1 without 0
        if self.replacement:
            x = torch.randint(lo, n, (B, self.L), generator=g)
        else:
            x = lo + torch.argsort(torch.rand(B, self.n_points, generator=g), dim=1)[:, : self.L]
        if self.symbols == "opaque":
            relabel = torch.argsort(torch.rand(B, n, generator=generator(seed ^ 0x0BA9_0E5)), dim=1)
        elif self.symbols == "fixed":
            relabel = self.fixed_relabel().expand(B, n).clone()
        else:
            relabel = torch.arange(n).expand(B, n).clone()
        return {"cls": cls, "f": f, "x": x, "relabel": relabel}

    def sample(self, n: int, seed: int) -> Episodes:
        lat = self.draw(n, seed)
        f, x, relabel = lat["f"], lat["x"], lat["relabel"]
        B, L, N = n, self.L, self.n
        y = f.gather(1, x)
        tokens = torch.empty(B, self.seq_len, dtype=torch.long)
        tokens[:, 0] = self.ORD
        tokens[:, 1 : N + 1] = relabel
        tokens[:, N + 1] = self.SEP
        if self.n_facts:
            tokens[:, self.facts_start : self.body_start] = self.facts(relabel, seed)
        body = torch.empty(B, 2 * L, dtype=torch.long)
        body[:, 0::2] = relabel.gather(1, x) + self.offset
        body[:, 1::2] = relabel.gather(1, y) + self.offset
        tokens[:, self.body_start :] = body[:, : 2 * L - 1]
        targets = torch.full(tokens.shape, IGNORE, dtype=torch.long)
        targets[:, self.query_positions()] = relabel.gather(1, y)
        return Episodes(tokens=tokens, targets=targets, posterior=self.lazy_posterior(tokens),
                        mask=self.scored_mask(tokens), latent=lat)

    def facts(self, relabel: torch.Tensor, seed: int) -> torch.Tensor:
        """The facts block ``[B, 4·n_facts]``: every fact ``a ∘ b = c`` of each table of :attr:`fact_classes`
        (``c = a + b`` or ``a·b`` mod ``n``, for all ``a, b ∈ Z_n``), written ``s(a) OP s(b) s(c)`` in the episode's
        symbols, in an order drawn per episode (from a stream of its own, so the episode is the one drawn without
        facts).  The facts hold for every function, so they change no posterior."""
        n, B = self.n, relabel.shape[0]
        a, b = torch.arange(n).repeat_interleave(n), torch.arange(n).repeat(n)
        rows = []
        for name in self.fact_classes:
            c = (a + b) % n if name == "rotation" else (a * b) % n
            rows.append(torch.stack([a, torch.full_like(a, -1 - FACT_OPS.index(name)), b, c], 1))
        table = torch.cat(rows)  # [F, 4]; an operation as −1 − its index
        order = torch.argsort(torch.rand(B, len(table), generator=generator(seed ^ 0xFAC7_5)), dim=1)
        facts = table[order]  # [B, F, 4]
        ops = facts < 0
        symbols = relabel.gather(1, facts.clamp_min(0).view(B, -1)).view_as(facts) + self.offset
        return torch.where(ops, 2 * n + 1 - facts, symbols).view(B, -1)  # −1 → 2n + 2 (+), −2 → 2n + 3 (×)

    def scored_mask(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        mask = torch.zeros(tokens.shape, dtype=torch.bool)
        mask[:, self.query_positions()[self.query_positions() < tokens.shape[1]]] = True
        return mask

    # --- the exact posterior -----------------------------------------------------------------------------------
    def read(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """What the inputs say: ``(relabel [B, n], xs [B, Lq], ys [B, Ly], ok [B])`` — ``π`` (read from the
        header when opaque; the identity or the fixed relabelling otherwise), the query points and shown images as
        values, and whether the row is an episode of the task's form (a header that is a permutation, body tokens
        in the symbol range)."""
        B, T = tokens.shape
        n = self.n
        ok = torch.ones(B, dtype=torch.bool)
        if self.symbols == "opaque":
            head = tokens[:, 1 : n + 1] if T > n else torch.zeros(B, n, dtype=torch.long)
            inrange = ((head >= 0) & (head < n)).all(1)
            relabel = head.clamp(0, n - 1)
            ok &= inrange & (torch.sort(relabel, 1).values == torch.arange(n)).all(1)
            relabel = torch.where(ok[:, None], relabel, torch.arange(n).expand(B, n))
        elif self.symbols == "fixed":
            relabel = self.fixed_relabel().expand(B, n)
        else:
            relabel = torch.arange(n).expand(B, n)
        inverse = torch.argsort(relabel, dim=1)  # π⁻¹: symbol → value
        body = tokens[:, self.body_start :] - self.offset
        ok &= ((body >= 0) & (body < n)).all(1)
        values = inverse.gather(1, body.clamp(0, n - 1))
        return relabel, values[:, 0::2], values[:, 1::2], ok

    def _filtered(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        relabel, xs, ys, ok = self.read(tokens)
        pred, post = exact_filter(self.class_names, self.n, xs, ys)
        return relabel, pred, post, ok

    def posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """The exact predictive over the symbol index at each query: the value predictive of
        :func:`exact_filter` mapped through ``π`` (``P(c = π(v)) = P(f(x_t) = v | D_{<t})``)."""
        B, T = tokens.shape
        out = uniform_rows((B, T), self.n)
        if T <= self.body_start:
            return out
        relabel, pred, _, ok = self._filtered(tokens)
        symbols = torch.zeros_like(pred).scatter_(2, relabel[:, None, :].expand_as(pred), pred)
        symbols = torch.where(ok[:, None, None], symbols, torch.full_like(symbols, 1.0 / self.n))
        out[:, self.body_start :: 2] = symbols
        return out

    def class_posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """The exact class posterior ``P(C | pairs read so far)`` at every position, ``[B, T, K]`` float64 (``K``
        the classes of :attr:`class_names`, in order): the prior in the header, ``P(C | D_{<t})`` at the ``t``-th
        query and ``P(C | D_{≤t})`` at its shown image.  Uniform on a row that is not an episode of the task's
        form or that no class can produce."""
        B, T = tokens.shape
        K = len(self.class_names)
        out = torch.full((B, T, K), 1.0 / K, dtype=torch.float64)
        if T <= self.body_start:
            return out
        _, _, post, ok = self._filtered(tokens)
        post = torch.where(ok[:, None, None], post, torch.full_like(post, 1.0 / K))
        nq = len(range(self.body_start, T, 2))
        out[:, self.body_start :: 2] = post[:, :nq]
        ny = len(range(self.body_start + 1, T, 2))
        out[:, self.body_start + 1 :: 2] = post[:, 1 : ny + 1]
        return out

    def header_blind_posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None,
                               chunk: int = 128) -> torch.Tensor | None:
        """The exact predictive over the symbol index at each query of a reader that does not read the header
        (module docstring, "Header-blind posterior"), ``[B, T, n]`` float64, uniform off the queries and on a row
        that is not an episode of the task's form or that no hypothesis can produce; ``None`` where it is not
        defined (symbols not opaque, facts in context) or not computed (``n`` above :data:`MAX_HEADER_BLIND_N`).

        ``P(g(s_t) = c | D_{<t}) ∝ Σ_{(π, f) ⊨ D_{<t}} P(C)/(|C|·n!) · [π(f(π⁻¹(s_t))) = c]``, the hypotheses that
        send every shown symbol ``s_j`` to its shown image and never map 0 to an asked symbol (when 0 is never
        asked).  ``chunk``: episodes enumerated at once (memory ``chunk × n! × Σ|C|`` booleans)."""
        if self.symbols != "opaque" or self.facts_in_context or self.n > MAX_HEADER_BLIND_N:
            return None
        B, T = tokens.shape
        n = self.n
        out = uniform_rows((B, T), n)
        if T <= self.body_start:
            return out
        perms = torch.tensor(list(itertools.permutations(range(n))), dtype=torch.long)  # π [P, n]: value → symbol
        inverse = torch.argsort(perms, dim=1)
        tables = [_class_functions(c, n) for c in self.class_names]
        funcs = torch.cat(tables)  # [F, n] every function of every class (one counted in each class it is in)
        weight = torch.cat([torch.full((len(t),), 1.0 / (len(self.class_names) * len(t)), dtype=torch.float64)
                            for t in tables])
        P, F = len(perms), len(funcs)
        # g[h, s] = π(f(π⁻¹(s))) for every hypothesis h = (π, f); z[h] = π(0)
        g = perms[:, None, :].expand(P, F, n).gather(2, funcs[None].expand(P, F, n).gather(
            2, inverse[:, None, :].expand(P, F, n))).reshape(P * F, n)
        z = perms[:, 0].repeat_interleave(F)
        w = (weight[None].expand(P, F) / P).reshape(-1)
        body = tokens[:, self.body_start :] - self.offset
        ok = ((body >= 0) & (body < n)).all(1)
        body = body.clamp(0, n - 1)
        asked, shown = body[:, 0::2], body[:, 1::2]
        g_by_symbol = g.T.contiguous()  # [n, H]: each hypothesis's image of each symbol
        for lo in range(0, B, chunk):
            alive = torch.ones(min(chunk, B - lo), P * F, dtype=torch.bool)
            for j in range(asked.shape[1]):
                s = asked[lo : lo + chunk, j]
                if not self.query_zero:
                    alive &= z[None, :] != s[:, None]
                image = g_by_symbol[s]  # [b, H]
                mass = torch.where(alive, w[None, :], torch.zeros(()))
                pred = torch.zeros(len(s), n, dtype=torch.float64).scatter_add_(1, image, mass)
                total = pred.sum(1, keepdim=True)
                pred = torch.where(total > 0, pred / total.clamp_min(1e-300), torch.full_like(pred, 1.0 / n))
                out[lo : lo + chunk, self.body_start + 2 * j] = torch.where(
                    ok[lo : lo + chunk, None], pred, torch.full_like(pred, 1.0 / n))
                if j < shown.shape[1]:
                    alive &= image == shown[lo : lo + chunk, j, None]
        return out

    def within_class_predictive(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """Each class's own exact predictive over the symbol index at each query, ``[B, T, K, n]`` float64:
        ``P_C(c = π(v) | D_{<t}) = N_C(D_{<t} ∪ {x_t ↦ v}) / N_C(D_{<t})``, so that :meth:`posterior` is
        ``Σ_C class_posterior[..., C] · within_class_predictive[..., C, :]`` at every query.  Uniform (``1/n``) off
        the queries and on a row that is not an episode of the task's form; for a class the shown pairs rule out
        (``class_posterior = 0``) it is not defined (it holds the predictive of the last pairs the class allowed)."""
        B, T = tokens.shape
        K = len(self.class_names)
        out = torch.full((B, T, K, self.n), 1.0 / self.n, dtype=torch.float64)
        if T <= self.body_start:
            return out
        relabel, xs, ys, ok = self.read(tokens)
        within: list[torch.Tensor] = []
        exact_filter(self.class_names, self.n, xs, ys, within_out=within)
        pred = within[0]  # [B, Lq, K, n] over values
        symbols = torch.zeros_like(pred).scatter_(3, relabel[:, None, None, :].expand_as(pred), pred)
        symbols = torch.where(ok[:, None, None, None], symbols, torch.full_like(symbols, 1.0 / self.n))
        out[:, self.body_start :: 2] = symbols
        return out

    def decode(self, episodes: Episodes, index: int = 0) -> list[str]:
        n = self.n
        out = []
        for t, tok in enumerate(episodes.tokens[index].tolist()):
            if tok == self.ORD:
                out.append("ORD")
            elif tok == self.SEP:
                out.append("SEP")
            elif t <= n:
                out.append(f"{t - 1}=s{tok}" if self.symbols != "integer" else f"{t - 1}={tok}")
            elif t < self.body_start:  # a fact s(a) OP s(b) s(c)
                k = (t - self.facts_start) % 4
                name = f"s{tok - n}" if self.symbols != "integer" else str(tok)
                out.append("+" if tok == 2 * n + 2 else "×" if tok == 2 * n + 3 else f"={name}" if k == 3 else name)
            else:
                name = f"s{tok - n}" if tok >= n else str(tok)
                out.append(name if (t - self.body_start) % 2 == 0 else f"→{name}")
        return out


# the arithmetic pair (rotations against multiplications mod a prime), 0 never asked: it would name the class
register_preset("model_selection_arith", "model_selection", n=11, classes="rotation,multiplication", L=6,
                query_zero=False)
