"""windtunnel.models: shapes, causality, capacity matching, hooks, ablations, scans, rebuild.

The tests over architectures iterate the registry (``models.names()``) and build each one's tiny
instance, declared where it is registered (``Arch.tiny``, via ``contracts.tiny_model``): a new
architecture joins them without an edit here.  The fused C++ kernel is built by the session fixture
``kernel`` (tests/conftest.py), at most once per run and only for the tests that ask for it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from windtunnel import models, tasks
from windtunnel.models import catalog, registry
from windtunnel.models.scans import linear_scan, selective_scan, selective_scan_ref

from contracts import tiny_model

ARCHS = models.names()  # every registered architecture (models from outside the registry are not registered)
TASK = tasks.make("bijection", V=5, L=5)  # T = 9
FEATURE_TASK = SimpleNamespace(vocab_size=7, n_classes=3, n_features=2, seq_len=8)


def tiny(arch: str, task=TASK, seed: int = 0, **kw) -> models.WindTunnelModel:
    return tiny_model(arch, task, seed, **kw)


def inputs(task, n: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    if isinstance(task, SimpleNamespace):
        g = torch.Generator().manual_seed(seed)
        T = task.seq_len
        return {
            "tokens": torch.randint(0, task.vocab_size, (n, T), generator=g),
            "features": torch.randn(n, T, task.n_features, generator=g),
        }
    return task.sample(n, seed).inputs


def all_hooks_removed(model: torch.nn.Module) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_names():
    """``names()`` is in the declared order (``Arch.order``, then the name: catalog.names' documented contract),
    whatever is registered."""
    names = models.names()
    assert len(set(names)) == len(names)
    assert names == sorted(names, key=lambda n: (catalog.get(n).order, n))


DISCOVERED = """
import json, sys
from windtunnel import models
from windtunnel.models import registry
print(json.dumps({"names": models.names(), "modules": registry.model_modules(),
                  "imported": sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("windtunnel.models."))}))
"""


def test_discovery_imports_the_modules_that_register_an_architecture_and_no_other():
    """The package's model modules are those whose own code calls ``register_arch`` (no list to keep): in a fresh
    interpreter the registry holds exactly the names those calls register, and a module that registers none
    and that nothing imports on the way is not imported by discovery (the Triton scan loads where it is used)."""
    import ast
    import subprocess
    import sys

    folder = Path(models.__file__).parent
    declared, declaring = set(), set()
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_arch":
                declared.add(ast.literal_eval(node.args[0]))
                declaring.add(path.stem)
    fresh = json.loads(subprocess.run([sys.executable, "-c", DISCOVERED], capture_output=True, text=True, check=True,
                                      timeout=300).stdout)
    assert set(fresh["names"]) == declared and set(fresh["modules"]) == declaring
    assert declaring <= set(fresh["imported"]) and "scan_triton" not in fresh["imported"]
    assert registry.registers_an_architecture("from .catalog import register_arch\nregister_arch('x', ARCH)\n")
    assert not registry.registers_an_architecture("def register(arch):\n    register_arch('x', arch)\n")


# --- shapes and causality -------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("which", ["tokens", "features"])
def test_shape_and_causality(arch, which):
    task = TASK if which == "tokens" else FEATURE_TASK
    model = tiny(arch, task)
    x = inputs(task)
    with torch.no_grad():
        base = model(**x)
    B, T = x["tokens"].shape
    assert base.shape == (B, T, task.n_classes) and base.dtype == torch.float32
    for t in range(T):
        y = {k: v.clone() for k, v in x.items()}
        if which == "tokens":
            y["tokens"][:, t] = (y["tokens"][:, t] + 1) % task.vocab_size
        else:
            y["features"][:, t] += 1.0
        with torch.no_grad():
            out = model(**y)
        torch.testing.assert_close(out[:, :t], base[:, :t], atol=1e-6, rtol=0)  # the past is untouched
        assert (out[:, t] - base[:, t]).abs().max() > 1e-6  # the present sees the change
        if arch == "mlp_pointwise":  # and nothing later does: no cross-position mixing at all
            torch.testing.assert_close(out[:, t + 1 :], base[:, t + 1 :], atol=0, rtol=0)


def test_mlp_window_limits_what_it_sees():
    model = tiny("mlp", window=3)
    x = inputs(TASK)["tokens"]
    with torch.no_grad():
        base = model(x)
        y = x.clone()
        y[:, 2] = (y[:, 2] + 1) % TASK.vocab_size
        out = model(y)
    torch.testing.assert_close(out[:, 5:], base[:, 5:], atol=1e-6, rtol=0)  # position 2 left the window
    assert (out[:, 4] - base[:, 4]).abs().max() > 1e-6


def test_learned_positions_and_max_len():
    model = tiny("transformer", pos="learned", max_len=9)
    assert model(inputs(TASK)["tokens"]).shape[1] == 9
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 10, dtype=torch.long))
    assert models.make("transformer", TASK, pos="learned").config.max_len == 4 * TASK.seq_len


def test_paper_size_transformer():
    model = models.make("transformer", tasks.make("bijection", V=20))
    assert abs(model.n_params() - 2.67e6) / 2.67e6 < 0.005


def test_transformer_initialisations() -> None:
    """``init="gpt2"``: every matrix N(0, 0.02), the residual projections 0.02/sqrt(2 L); ``init="torch"``:
    PyTorch's own draws (linear maps uniform in ±1/sqrt(fan_in), token embeddings N(0, 1)); the same shape
    and parameter count either way, and an unknown name refused."""
    task = tasks.make("regression", d=4, points=16, C=32)
    torch.manual_seed(0)
    gpt2 = models.make("transformer", task, d_model=64, n_layers=4, n_heads=4)
    torch.manual_seed(0)
    pt = models.make("transformer", task, d_model=64, n_layers=4, n_heads=4, init="torch")
    assert gpt2.n_params() == pt.n_params()
    g = {k: v.detach() for k, v in gpt2.named_parameters()}
    t = {k: v.detach() for k, v in pt.named_parameters()}
    assert abs(float(g["embed.tok.weight"].std()) - 0.02) < 0.004
    assert abs(float(g["blocks.0.mlp.proj.weight"].std()) - 0.02 / 8 ** 0.5) < 0.002
    assert abs(float(t["embed.tok.weight"].std()) - 1.0) < 0.2
    for name, p in t.items():
        if p.dim() == 2 and not name.startswith("embed.tok") and "pos_embed" not in name:
            bound = 1 / p.shape[1] ** 0.5  # fan_in
            assert float(p.abs().max()) <= bound + 1e-7, name
            assert float(p.abs().max()) > 0.9 * bound, name  # the whole range is used, not N(0, 0.02)
    with pytest.raises(ValueError, match="init"):
        models.make("transformer", task, init="xavier")


# --- capacity matching ----------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_readout_is_the_maps_from_the_last_stream_to_the_logits(arch):
    """``readout_parameters()`` = the final norm's and the head's parameters; perturbing them changes
    the logits while the last residual stream (``hook_final``'s input) stays as it was."""
    model = tiny(arch)
    readout = model.readout_parameters()
    assert {id(p) for p in readout} == {id(p) for p in [*model.norm.parameters(), *model.head.parameters()]}
    x = inputs(TASK)
    with torch.no_grad():
        before, cache = model.run_with_cache(**x, names=[f"blocks.{len(model.blocks) - 1}.hook_resid_post"])
        for p in readout:
            p.add_(0.1)
        after, cache2 = model.run_with_cache(**x, names=list(cache))
    assert not torch.allclose(before, after)
    assert all(torch.equal(cache[k], cache2[k]) for k in cache)


@pytest.mark.parametrize("arch", ARCHS)
def test_capacity_matching(arch):
    task = tasks.make("bijection", V=20)
    for budget in (50_000, 200_000, 1_000_000):
        model = models.make(arch, task, params=budget)
        assert abs(model.n_params() - budget) <= 0.03 * budget, (arch, budget, model.n_params())
        cfg = model.config_dict()
        assert cfg["d_model"] == model.config.d_model
        assert models.count_params(model.config) == model.n_params()
        if arch == "transformer":
            assert cfg["d_model"] % cfg["n_heads"] == 0 and (cfg["d_model"] // cfg["n_heads"]) % 2 == 0
            assert cfg["n_layers"] == 6 and cfg["n_heads"] == 6  # only widths move


def test_capacity_matching_errors():
    with pytest.raises(ValueError, match="d_model"):
        models.make("transformer", TASK, params=100_000, d_model=64)
    with pytest.raises(ValueError, match="params"):
        models.make("lstm", TASK, params=10)  # far below the smallest model
    with pytest.raises(ValueError, match="params"):
        models.make("lstm", TASK, params=-5)


# --- hooks ----------------------------------------------------------------------------------------
def _mlp_hooks(c, B: int, T: int) -> dict[str, tuple[int, ...]]:
    return {"hook_embed": (B, T, c.d_embed), "hook_window": (B, T, c.window * c.d_embed),
            "blocks.{l}.hook_mlp_out": (B, T, c.d_model)}


OWN_HOOKS: dict[str, Any] = {
    "transformer": lambda c, B, T: {
        **{f"blocks.{{l}}.attn.hook_{n}": (B, T, c.n_heads, c.head_dim) for n in ("q", "k", "v", "z")},
        "blocks.{l}.attn.hook_scores": (B, c.n_heads, T, T), "blocks.{l}.attn.hook_pattern": (B, c.n_heads, T, T),
        "blocks.{l}.hook_attn_out": (B, T, c.d_model), "blocks.{l}.hook_mlp_out": (B, T, c.d_model)},
    "mamba": lambda c, B, T: {"blocks.{l}.hook_state": (B, T, c.inner, c.d_state),
                              "blocks.{l}.hook_delta": (B, T, c.inner),
                              "blocks.{l}.hook_B": (B, T, c.d_state), "blocks.{l}.hook_C": (B, T, c.d_state),
                              "blocks.{l}.attn.hook_pattern": (B, 1, T, T)},
    "lstm": lambda c, B, T: {"blocks.{l}.hook_state": (B, T, c.d_model)},
    "mlp": _mlp_hooks,
    "mlp_pointwise": _mlp_hooks,
}
"""The hooks of an architecture beyond the skeleton's, with their shapes (``{l}``: every layer), for the
architectures whose hook list this file knows whole; any other registered architecture is held to the skeleton's."""


def expected_shapes(model: models.WindTunnelModel, B: int, T: int) -> tuple[dict[str, tuple[int, ...]], bool]:
    """The hook points and their shapes, and whether the list is complete: complete for an architecture of
    :data:`OWN_HOOKS`; for any other, the skeleton's (embedding, residual stream, final)."""
    c = model.config
    d, L = c.d_model, c.n_layers
    skeleton = {"hook_embed": (B, T, d), "blocks.{l}.hook_resid_pre": (B, T, d),
                "blocks.{l}.hook_resid_post": (B, T, d), "hook_final": (B, T, d)}
    hooks = {**skeleton, **OWN_HOOKS.get(c.arch, lambda c, B, T: {})(c, B, T)}
    out = {name.format(l=l): shape for name, shape in hooks.items() for l in (range(L) if "{l}" in name else [0])}
    return out, c.arch in OWN_HOOKS


@pytest.mark.parametrize("arch", ARCHS)
def test_run_with_cache_names_shapes_and_cleanup(arch):
    model = tiny(arch)
    x = inputs(TASK)
    B, T = x["tokens"].shape
    expected, complete = expected_shapes(model, B, T)
    if complete:
        assert sorted(model.hook_names()) == sorted(expected)
    else:  # an architecture this file has no table for: the skeleton's hooks at least
        assert set(expected) <= set(model.hook_names())
    logits, cache = model.run_with_cache(**x)
    assert set(cache) == set(model.hook_names())
    for name, shape in expected.items():
        assert tuple(cache[name].shape) == shape, name
        assert not cache[name].requires_grad
    assert all_hooks_removed(model)
    torch.testing.assert_close(logits, model(**x), atol=1e-5, rtol=0)  # caching does not change the answer
    # a list, a filter
    _, c2 = model.run_with_cache(**x, names=["hook_final"])
    assert list(c2) == ["hook_final"]
    _, c3 = model.run_with_cache(**x, names=lambda n: n.endswith("resid_post"))
    assert len(c3) == model.config.n_layers
    with pytest.raises(ValueError, match="nope"):
        model.run_with_cache(**x, names=["nope"])
    assert all_hooks_removed(model)


@pytest.mark.parametrize("arch", ARCHS)
def test_hooks_removed_when_hook_raises(arch):
    model = tiny(arch)
    x = inputs(TASK)

    def boom(t, name):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        with model.hooks([("hook_final", boom)]):
            model(**x)
    assert all_hooks_removed(model)
    with pytest.raises(RuntimeError, match="boom"):
        with model.hooks([(lambda n: True, boom)]):  # a filter: every hook point
            model(**x)
    assert all_hooks_removed(model)


@pytest.mark.parametrize("arch", ARCHS)
def test_hook_replacement_patches_downstream(arch):
    model = tiny(arch)
    x = inputs(TASK)
    with model.hooks([("hook_final", lambda t, name: torch.zeros_like(t))]):
        out = model(**x)
    assert torch.equal(out, torch.zeros_like(out))  # head has no bias
    assert all_hooks_removed(model)
    assert model(**x).abs().max() > 0


def test_mamba_state_hook_patching():
    model = tiny("mamba")
    x = inputs(TASK)
    base = model(**x)
    name = "blocks.1.hook_state"
    with model.hooks([(name, lambda t, n: t)]):  # identity patch: same logits via the states path
        torch.testing.assert_close(model(**x), base, atol=1e-5, rtol=1e-5)
    with model.hooks([(name, lambda t, n: torch.zeros_like(t))]):
        assert (model(**x) - base).abs().max() > 1e-4


# --- ablations ------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_bypass_layer_changes_and_restores(arch):
    model = tiny(arch)
    x = inputs(TASK)
    with torch.no_grad():
        base = model(**x)
        with model.bypass_layer(1):
            ablated = model(**x)
            _, cache = model.run_with_cache(**x, names=["blocks.1.hook_resid_pre", "blocks.1.hook_resid_post"])
        after = model(**x)
    assert (ablated - base).abs().max() > 1e-5
    assert torch.equal(cache["blocks.1.hook_resid_pre"], cache["blocks.1.hook_resid_post"])
    assert torch.equal(after, base)
    with pytest.raises(ValueError, match="layer"):
        with model.bypass_layer(7):
            pass


def test_ablate_head_changes_restores_and_equals_zeroed_z():
    model = tiny("transformer")
    x = inputs(TASK)
    with torch.no_grad():
        base = model(**x)
        with model.ablate_head(1, 2):
            ablated = model(**x)
        after = model(**x)

        def zero_head(z, name):
            z = z.clone()
            z[:, :, 2] = 0
            return z

        with model.hooks([("blocks.1.attn.hook_z", zero_head)]):
            patched = model(**x)
    assert (ablated - base).abs().max() > 1e-5
    assert torch.equal(after, base)
    torch.testing.assert_close(ablated, patched, atol=1e-5, rtol=0)
    assert all(b.attn.head_mask is None for b in model.blocks)
    with pytest.raises(ValueError, match="head"):
        with model.ablate_head(0, 3):
            pass


@pytest.mark.parametrize("arch", ARCHS)
def test_ablate_head_needs_attention(arch):
    """Head ablation works where there are attention heads and is refused, naming the architecture, elsewhere."""
    model = tiny(arch)
    if any(".attn.hook_z" in n for n in model.hook_names()):
        with model.ablate_head(0, 0):
            pass
        return
    with pytest.raises(ValueError, match=arch):
        with model.ablate_head(0, 0):
            pass


# --- attention paths ------------------------------------------------------------------------------
@pytest.mark.parametrize("pos", ["rotary", "learned", "none"])
def test_explicit_attention_equals_sdpa_and_pattern_is_causal(pos):
    model = tiny("transformer", pos=pos)
    x = inputs(TASK)
    with torch.no_grad():
        fast = model(**x)
        with model.explicit_attention():
            slow = model(**x)
        _, cache = model.run_with_cache(**x, names=lambda n: n.endswith("hook_pattern"))
    torch.testing.assert_close(slow, fast, atol=1e-5, rtol=0)
    for name, p in cache.items():
        torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-5, rtol=0)
        future = ~torch.ones(p.shape[-1], p.shape[-1], dtype=torch.bool).tril()
        assert (p.masked_select(future) == 0).all(), name


def test_rotary_is_relative():
    """With rotary positions and no other position signal, q·k depends on offsets only."""
    model = tiny("transformer")
    attn = model.blocks[0].attn
    cos, sin = attn.rope(12, torch.device("cpu"), torch.float32)
    from windtunnel.models.transformer import rotate

    q, k = torch.randn(1, 1, 1, attn.head_dim), torch.randn(1, 1, 1, attn.head_dim)
    def at(x, i):
        return rotate(x, cos[i : i + 1], sin[i : i + 1])

    dots = [(at(q, i) * at(k, i - 3)).sum() for i in range(3, 12)]  # query at i, key at i - 3
    torch.testing.assert_close(torch.stack(dots), dots[0].expand(9), atol=1e-5, rtol=1e-5)


# --- mamba scans ----------------------------------------------------------------------------------
def scan_inputs(B=2, T=11, Di=6, N=4, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(B, T, Di, generator=g)
    delta = torch.nn.functional.softplus(torch.randn(B, T, Di, generator=g)) * scale
    A = -torch.exp(torch.randn(Di, N, generator=g))
    Bm, C = torch.randn(B, T, N, generator=g), torch.randn(B, T, N, generator=g)
    D = torch.randn(Di, generator=g)
    return [t.requires_grad_(True) for t in (u, delta, A, Bm, C, D)]


@pytest.fixture(params=["loop", "doubling", "fused"])
def fast_method(request: pytest.FixtureRequest) -> str:
    """Each fast scan method; ``fused`` first asks for the session's C++ kernel (skipped where it cannot be built)."""
    if request.param == "fused":
        request.getfixturevalue("kernel")
    return request.param


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("T", [1, 2, 11, 200])
def test_fast_scan_equals_reference(fast_method, dtype, tol, T):
    """Values and all six gradients of the fast scans against the step-by-step reference."""
    xs = [x.detach().to(dtype).requires_grad_(True) for x in scan_inputs(T=T, seed=T)]
    y0 = selective_scan_ref(*xs)
    y1 = selective_scan(*xs, method=fast_method)
    scale = y0.abs().max()
    assert (y1 - y0).abs().max() <= tol * scale
    w = torch.randn_like(y0)
    g0 = torch.autograd.grad((y0 * w).sum(), xs)
    g1 = torch.autograd.grad((y1 * w).sum(), xs)
    for a, b in zip(g1, g0):
        assert (a - b).abs().max() <= 10 * tol * b.abs().max()


@pytest.mark.parametrize("method", ["loop", "doubling"])
def test_fast_scan_returns_states_with_gradients(method):
    xs = scan_inputs(T=13)
    y0, h0 = selective_scan_ref(*xs, return_states=True)
    y1, h1 = selective_scan(*xs, return_states=True, method=method)
    torch.testing.assert_close(h1, h0, atol=1e-5, rtol=1e-5)
    w, v = torch.randn_like(y0), torch.randn_like(h0)
    g0 = torch.autograd.grad((y0 * w).sum() + (h0 * v).sum(), xs)
    g1 = torch.autograd.grad((y1 * w).sum() + (h1 * v).sum(), xs)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_linear_scan_methods_agree_with_the_recurrence():
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(37, 3, 5, generator=g, dtype=torch.float64), torch.randn(37, 3, 5, generator=g, dtype=torch.float64)
    h, expect = torch.zeros(3, 5, dtype=torch.float64), []
    for t in range(37):
        h = a[t] * h + b[t]
        expect.append(h)
    for method in ("loop", "doubling"):
        torch.testing.assert_close(linear_scan(a, b, method), torch.stack(expect), atol=1e-12, rtol=1e-12)


def test_fast_scan_is_stable_under_huge_decay(fast_method):
    xs = scan_inputs(scale=200.0)  # |delta * A| in the hundreds: any exp(-sum) form would overflow
    y0 = selective_scan_ref(*xs)
    y = selective_scan(*xs, method=fast_method)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, y0, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(y.sum(), xs)
    assert all(torch.isfinite(g).all() for g in grads)


def test_fused_scan_refuses_what_it_cannot_do():
    xs = scan_inputs()
    with pytest.raises(ValueError, match="fused"):
        selective_scan(*xs, return_states=True, method="fused")
    with pytest.raises(ValueError, match="method"):
        selective_scan(*xs, method="chunked")


def test_mamba_ref_and_fast_models_agree(fast_method):
    fast = tiny("mamba", seed=3, scan_method=fast_method)
    ref = tiny("mamba", seed=3, scan="ref")
    ref.load_state_dict(fast.state_dict())
    x = inputs(TASK)
    torch.testing.assert_close(fast(**x), ref(**x), atol=1e-5, rtol=1e-5)


def test_mamba_matches_mambapy():
    mambapy = pytest.importorskip("mambapy.mamba")
    model = tiny("mamba", seed=1)
    c = model.config
    theirs = mambapy.Mamba(mambapy.MambaConfig(d_model=c.d_model, n_layers=c.n_layers, d_state=c.d_state,
                                               d_conv=c.d_conv, expand_factor=c.expand))
    sd = {}
    for k, v in model.state_dict().items():
        if k.startswith("blocks."):
            _, l, rest = k.split(".", 2)
            sd[f"layers.{l}.{rest}" if rest.startswith("norm.") else f"layers.{l}.mixer.{rest}"] = v
    theirs.load_state_dict(sd)
    x = torch.randn(2, 9, c.d_model)
    ours = x
    for block in model.blocks:
        ours = block(ours)
    out = theirs(x)
    out = out[0] if isinstance(out, tuple) else out
    torch.testing.assert_close(ours, out, atol=1e-5, rtol=1e-5)


# --- rebuild and errors ---------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_build_reproduces_architecture(arch):
    model = models.make(arch, FEATURE_TASK, params=30_000)
    cfg = json.loads(json.dumps(model.config_dict()))
    assert cfg["arch"] == arch
    again = models.build(cfg)
    assert type(again) is type(model) and again.n_params() == model.n_params()
    assert {k: v.shape for k, v in again.state_dict().items()} == {k: v.shape for k, v in model.state_dict().items()}
    again.load_state_dict(model.state_dict())
    x = inputs(FEATURE_TASK)
    torch.testing.assert_close(again.eval()(**x), model.eval()(**x), atol=0, rtol=0)


def test_bad_names_raise_value_error():
    with pytest.raises(ValueError, match="'no-such-arch'"):
        models.make("no-such-arch", TASK)
    with pytest.raises(ValueError, match="'n_head'"):
        models.make("transformer", TASK, n_head=4)
    with pytest.raises(ValueError, match="'no-such-arch'"):
        models.build({"arch": "no-such-arch"})
    with pytest.raises(ValueError, match="'bogus'"):
        models.build({**tiny("lstm").config_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="d_model"):
        models.make("transformer", TASK, d_model=25, n_heads=5)  # odd head dim with rotary
    with pytest.raises(ValueError, match="pos"):
        models.make("transformer", TASK, pos="sinusoidal")
    with pytest.raises(ValueError, match="scan"):
        models.make("mamba", TASK, scan="cuda")
    with pytest.raises(ValueError, match="features"):
        tiny("lstm", FEATURE_TASK)(torch.zeros(1, 8, dtype=torch.long))  # features required
    with pytest.raises(ValueError, match="features"):
        tiny("lstm")(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, 2))  # and refused without


# --- the transformer's gated MLP option -----------------------------------------------------------
def test_swiglu_block_is_the_gated_formula_and_capacity_matches():
    model = tiny("transformer", mlp="swiglu", d_ff=10)
    mlp = model.blocks[0].mlp
    x = torch.randn(2, 5, 24)
    w = mlp.fc.weight
    by_hand = torch.nn.functional.silu(x @ w[:10].T) * (x @ w[10:].T) @ mlp.proj.weight.T
    torch.testing.assert_close(mlp(x), by_hand)
    gelu = tiny("transformer", d_ff=10)
    # three d×d_ff matrices instead of two: 24·10 more per layer, nothing else changes
    assert model.n_params() - gelu.n_params() == 2 * 24 * 10
    assert models.count_params(model.config) == model.n_params()
    matched = models.make("transformer", tasks.make("bijection", V=20), params=200_000, mlp="swiglu")
    assert abs(matched.n_params() - 200_000) <= 0.03 * 200_000
    assert models.build(matched.config_dict()).config.mlp == "swiglu"
    with pytest.raises(ValueError, match="mlp"):
        models.make("transformer", TASK, mlp="relu")


def test_causal_depthwise_conv_equals_the_grouped_conv1d():
    from windtunnel.models.scans import causal_depthwise_conv

    torch.manual_seed(0)
    B, T, Di, K = 3, 11, 5, 4
    conv = torch.nn.Conv1d(Di, Di, K, groups=Di, padding=K - 1, bias=True).double()
    x = torch.randn(B, T, Di, dtype=torch.float64, requires_grad=True)
    ours = causal_depthwise_conv(x, conv.weight, conv.bias)
    torch_conv = conv(x.transpose(1, 2))[..., :T].transpose(1, 2)
    torch.testing.assert_close(ours, torch_conv, rtol=0, atol=1e-14)
    # causal: the output at t does not move when inputs after t do
    x2 = x.detach().clone()
    x2[:, 6:] += 1.0
    torch.testing.assert_close(causal_depthwise_conv(x2, conv.weight, conv.bias)[:, :6], ours[:, :6].detach())
    g = torch.randn_like(ours)
    ga = torch.autograd.grad((ours * g).sum(), (x, conv.weight, conv.bias))
    gb = torch.autograd.grad((torch_conv * g).sum(), (x, conv.weight, conv.bias))
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("T", [11, 300])
def test_gated_fused_scan_equals_softplus_scan_gate_composed(kernel, dtype, tol, T):
    """The fused softplus → scan → SiLU gate equals the reference scan composed with torch's
    softplus and SiLU: values and all seven gradients, raw deltas beyond softplus's threshold too."""
    from windtunnel.models.scans import gated_selective_scan

    u, _, A, Bm, C, D = scan_inputs(T=T, seed=T)
    g = torch.Generator().manual_seed(T + 1)
    delta_raw = torch.randn(u.shape, generator=g) * 2 - 1
    delta_raw[0, :3, :2] = 25.0  # above torch's softplus threshold (20): the identity there
    z = torch.randn(u.shape, generator=g) * 2
    xs = [x.detach().to(dtype).requires_grad_(True) for x in (u, delta_raw, A, Bm, C, D, z)]
    out = gated_selective_scan(*xs, method="fused")
    ref = selective_scan_ref(xs[0], torch.nn.functional.softplus(xs[1]), *xs[2:6]) * torch.nn.functional.silu(xs[6])
    assert (out - ref).abs().max() <= tol * ref.abs().max()
    w = torch.randn_like(ref)
    g_out = torch.autograd.grad((out * w).sum(), xs)
    g_ref = torch.autograd.grad((ref * w).sum(), xs)
    for name, a, b in zip("u delta_raw A B C D z".split(), g_out, g_ref):
        assert (a - b).abs().max() <= 10 * tol * b.abs().max(), name


def test_mamba_model_fused_gated_path_equals_reference_scan(kernel):
    """The whole model, fused gated kernel vs the step-by-step reference scan: same logits and gradients."""
    torch.manual_seed(0)
    fast = models.make("mamba", TASK, **catalog.get("mamba").tiny).double()
    ref = models.make("mamba", TASK, **{**catalog.get("mamba").tiny, "scan": "ref"}).double()
    ref.load_state_dict(fast.state_dict())
    tokens = inputs(TASK, n=4)["tokens"]
    a, b = fast(tokens), ref(tokens)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    ga = torch.autograd.grad(a.square().sum(), list(fast.parameters()))
    gb = torch.autograd.grad(b.square().sum(), list(ref.parameters()))
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-10)


def test_fused_kernel_runs_on_torchs_threads(kernel):
    """The kernel's loop over sequences uses the threads torch is set to (an extension compiled
    without OpenMP runs ``at::parallel_for`` serially: the Mamba step then never used the second
    core).  Only a compiler without OpenMP may give the serial build."""
    from windtunnel.models.scans import kernel_threads

    if not kernel.__name__.endswith("_omp"):
        pytest.skip("this compiler built the kernel without OpenMP")
    before = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            assert kernel_threads() == n
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("T", [1, 3, 50])
def test_fused_conv_silu_equals_conv_then_silu(kernel, dtype, tol, T):
    """The fused causal conv + SiLU equals the shift-and-add conv followed by torch's SiLU: values
    and the gradients of input, weight and bias, sequences shorter than the kernel included."""
    from windtunnel.models.scans import ConvSiLUCPU, causal_depthwise_conv

    g = torch.Generator().manual_seed(T)
    x = torch.randn(3, T, 7, generator=g, dtype=dtype).requires_grad_(True)
    w = torch.randn(7, 1, 4, generator=g, dtype=dtype).requires_grad_(True)
    b = torch.randn(7, generator=g, dtype=dtype).requires_grad_(True)
    out = ConvSiLUCPU.apply(x, w, b)
    ref = torch.nn.functional.silu(causal_depthwise_conv(x, w, b))
    assert (out - ref).abs().max() <= tol * ref.abs().max()
    gout = torch.randn_like(ref)
    for a, r in zip(torch.autograd.grad((out * gout).sum(), (x, w, b)), torch.autograd.grad((ref * gout).sum(), (x, w, b))):
        assert a.shape == r.shape and (a - r).abs().max() <= 10 * tol * r.abs().max()


def test_fused_kernel_builds_where_a_compiler_exists():
    """Where a C++ compiler and ninja are present the fused kernel must build: a compile error in
    ``selective_scan_cpu.cpp`` would otherwise only show as skipped kernel tests and a slower Mamba."""
    import shutil

    from torch.utils.cpp_extension import is_ninja_available

    if os.environ.get("WINDTUNNEL_NO_KERNEL", "") not in ("", "0"):
        pytest.skip("the kernel is switched off")
    if shutil.which(os.environ.get("CXX", "c++")) is None or not is_ninja_available():
        pytest.skip("no C++ compiler or ninja here")
    from windtunnel.models.scans import cpu_kernel

    assert cpu_kernel() is not None


@pytest.mark.parametrize("T", [5, 80, 81, 150])
def test_causal_attention_equals_the_explicit_softmax_on_both_backends(T):
    """Below and above the length where the CPU backend switches (math ↔ flash), the fused
    attention equals softmax(q kᵀ/√d + causal mask) v, values and gradients, in float64."""
    from windtunnel.models.base import CPU_MATH_ATTENTION_MAX_T, causal_attention

    assert CPU_MATH_ATTENTION_MAX_T == 80  # the parametrisation straddles it
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(2, 3, T, 8, generator=g, dtype=torch.float64).requires_grad_(True) for _ in range(3))
    scores = (q @ k.transpose(-1, -2)) / 8 ** 0.5
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    ref = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v
    out = causal_attention(q, k, v)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    w = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad((out * w).sum(), (q, k, v)), torch.autograd.grad((ref * w).sum(), (q, k, v))):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("method", ["auto", "loop"])
def test_mamba_trains_under_bf16_autocast(method):
    """Training on a GPU runs the forward pass under bf16 autocast, which hands the scan bf16 projections
    beside float32 decays: the scan must run (forward and backward) in float32 and agree with the model
    run in float32 to bf16 rounding — before the fix this raised "expected scalar type Float"."""
    torch.manual_seed(0)
    task = tasks.make("bijection", V=6, L=5)
    model = models.make("mamba", task, params=20_000)
    for m in model.modules():
        if hasattr(m, "scan_method"):
            m.scan_method = method
    ep = task.sample(4, seed=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = model(**ep.inputs)
    mixed.float().sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
    with torch.no_grad():
        full = model(**ep.inputs)
    assert float((mixed.float() - full).abs().max()) < 0.05 * float(full.abs().max())


def test_pick_device_gives_cuda_an_index(monkeypatch):
    """``--device cuda`` must name this process's GPU by index: ``torch.cuda.set_device`` refuses a bare "cuda"."""
    from windtunnel.run.config import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert pick_device("cuda") == torch.device("cuda", 0)
    assert pick_device("auto") == torch.device("cuda", 0)
    assert pick_device("cpu") == torch.device("cpu")
