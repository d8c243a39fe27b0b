"""A model of one's own is diagnosed like ours, and every diagnostic's declaration is what its body reads.

* A transformer written from scratch with ``torch.nn`` (written here into a temporary folder as a module,
  imported through ``--arch module:factory``) is trained and analysed through the CLI and gets every
  diagnostic this package's transformer gets on the same task, with no traceback.
* The contract: every registered diagnostic, run on a model that exposes exactly what it declares
  (``Diagnostic.requires``), applies and runs; on one that lacks any one part of it, it answers "not
  applicable" naming that part. Never an exception.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from windtunnel import models, tasks
from windtunnel.cli import main
from windtunnel.geometry import registry
from windtunnel.models.base import HookPoint, WindTunnelModel

OWN_TRANSFORMER = '''
"""A user's transformer, written from scratch with torch.nn; windtunnel's HookPoint (an identity module)
marks each activation the diagnostics read, under the names windtunnel's own transformer uses."""
import math

import torch
from torch import nn

from windtunnel.models import HookPoint


class Attention(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d // n_heads
        self.q, self.k, self.v = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.out_proj = nn.Linear(d, d, bias=False)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_scores, self.hook_pattern, self.hook_z = HookPoint(), HookPoint(), HookPoint()

    def heads(self, x):  # [B, T, d] -> [B, T, H, d_head]
        return x.view(*x.shape[:2], self.n_heads, self.d_head)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = (hook(self.heads(proj(x))) for proj, hook in ((self.q, self.hook_q), (self.k, self.hook_k),
                                                                 (self.v, self.hook_v)))
        scores = self.hook_scores(torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(self.d_head))
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        pattern = self.hook_pattern(scores.masked_fill(~causal, float("-inf")).softmax(-1))
        z = self.hook_z(torch.einsum("bhij,bjhd->bihd", pattern, v))
        return self.out_proj(z.reshape(B, T, d))


class Layer(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, n_heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.hook_resid_pre, self.hook_resid_post = HookPoint(), HookPoint()
        self.hook_attn_out, self.hook_mlp_out = HookPoint(), HookPoint()

    def forward(self, x):
        x = self.hook_resid_pre(x)
        x = x + self.hook_attn_out(self.attn(self.ln1(x)))
        return self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.ln2(x))))


class TinyTransformer(nn.Module):
    def __init__(self, vocab, classes, max_len, d=16, n_layers=2, n_heads=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Layer(d, n_heads) for _ in range(n_layers))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes, bias=False)
        self.hook_final = HookPoint()

    def embed(self, tokens):
        return self.tok(tokens) + self.pos.weight[: tokens.shape[1]]

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.blocks:
            x = layer(x)
        return self.head(self.hook_final(self.norm(x)))

    def unrotated_keys(self, tokens):  # learned positions: the keys are never rotated
        x, keys = self.embed(tokens), []
        for layer in self.blocks:
            keys.append(layer.attn.heads(layer.attn.k(layer.ln1(x))))
            x = layer(x)
        return keys


def factory(task, d_model=16, n_layers=2, n_heads=2):
    return TinyTransformer(task.vocab_size, task.n_classes, 4 * task.seq_len, d_model, n_layers, n_heads)
'''

RECALL = {"pairs": 3, "n_keys": 6, "n_values": 6, "queries": 3}
"""A small recall task: the key, attention, EM and counterfactual diagnostics all have their input there."""


@pytest.fixture()
def own_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder holding ``own_transformer.py``, the current folder (as a user runs the CLI from there)."""
    (tmp_path / "own_transformer.py").write_text(OWN_TRANSFORMER)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("own_transformer", None)


def _applicable(geometry: dict[str, Any]) -> set[str]:
    return {name for name in registry.discover() if isinstance(geometry.get(name), dict)
            and geometry[name].get("applicable", True) and "error" not in geometry[name]}


@pytest.mark.slow
def test_a_users_transformer_gets_every_diagnostic_ours_gets(own_module: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    """Train + analyse through the CLI: the user's from-scratch transformer and this package's transformer
    on the same task get the same set of applicable diagnostics, none failing and no traceback."""
    applicable = {}
    for arch in ("own_transformer:factory", "transformer"):
        out = own_module / arch.replace(":", "_")
        config = {"task": "recall", "task_params": RECALL, "arch": arch,
                  "model": {"d_model": 16, "n_layers": 2, "n_heads": 2}, "steps": 6, "batch_size": 8,
                  "eval_every": 6, "ckpt_every": 3, "eval_n": 16, "warmup": 1, "device": "cpu"}
        (own_module / "config.json").write_text(json.dumps(config))
        assert main(["train", "--config", str(own_module / "config.json"), "--out", str(out), "--no-progress"]) == 0
        assert main(["analyze", str(out), "--n", "16"]) == 0
        geometry = json.loads((out / "geometry.json").read_text())
        assert not [k for k, v in geometry.items() if isinstance(v, dict) and "error" in v], arch
        applicable[arch] = _applicable(geometry)
    err = capsys.readouterr().err
    assert "Traceback" not in err and " failed (" not in err, err
    assert applicable["own_transformer:factory"] == applicable["transformer"]
    # everything but what the task (no hidden state, no relabelling header) or the transformer (no selective step
    # sizes) lacks
    assert applicable["transformer"] == set(registry.discover()) - {"belief_geometry", "header_probe", "selection"}


def test_the_own_model_names_its_layers_like_ours(own_module: Path) -> None:
    """The user's layer hooks keep their paths as names; their readout, keys and bypass are the model's."""
    task = tasks.make("recall", **RECALL)
    torch.manual_seed(0)
    model = models.make("own_transformer:factory", task)
    builtin = models.make("transformer", task, d_model=16, n_layers=2, n_heads=2)
    assert len(model.blocks) == 2 and "blocks.1.attn.hook_pattern" in model.hook_names()
    per_layer = {n for n in builtin.hook_names() if n.startswith("blocks.")}
    assert per_layer <= set(model.hook_names())
    assert model.capabilities() == builtin.capabilities() == {"unembed", "unrotated_keys", "bypass_layer"}
    ep = task.sample(4, 0)
    logits, cache = model.run_with_cache(ep.tokens, names=["blocks.1.hook_resid_post", "hook_final"])
    torch.testing.assert_close(model.unembed(cache["blocks.1.hook_resid_post"]), logits)
    with model.bypass_layer(1):
        _, bypassed = model.run_with_cache(ep.tokens, names=["blocks.1.hook_resid_pre", "blocks.1.hook_resid_post"])
    assert torch.equal(bypassed["blocks.1.hook_resid_pre"], bypassed["blocks.1.hook_resid_post"])
    keys = model.unrotated_keys(ep.tokens)
    assert len(keys) == 2 and keys[0].shape == (4, task.seq_len, 2, 8)


def test_zeroing_a_head_by_its_hook_is_our_transformers_head_ablation() -> None:
    """Head ablation reads only ``hook_z``: zeroing one head there gives what ``Transformer.ablate_head`` gives."""
    from windtunnel.geometry.ablation import zero_head

    task = tasks.make("bijection", V=5, L=5)
    torch.manual_seed(0)
    model = models.make("transformer", task, d_model=16, n_layers=2, n_heads=2).eval()
    ep = task.sample(4, 0)
    with torch.no_grad():
        with model.ablate_head(1, 0):
            expected = model(ep.tokens)
        with zero_head(model, 1, 0):
            got = model(ep.tokens)
        intact = model(ep.tokens)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, intact)


# --- the contract: applies and runs on exactly its declaration; "not applicable" naming each part it lacks ----
class _Part:
    """Attribute access to ``obj`` limited to the dotted ``paths``: what is not among them is absent."""

    def __init__(self, obj: Any, paths: set[str]) -> None:
        self._obj, self._paths = obj, paths

    def __len__(self) -> int:
        return len(self._obj)

    def __getitem__(self, i: int) -> "_Part":
        return _Part(self._obj[i], self._paths)

    def __getattr__(self, name: str) -> Any:
        if name in self._paths:
            return getattr(self._obj, name)
        below = {p[len(name) + 1:] for p in self._paths if p.startswith(name + ".")}
        if not below:
            raise AttributeError(name)
        return _Part(getattr(self._obj, name), below)


class Exposing(WindTunnelModel):
    """``inner`` seen through exactly the requirements ``exposed`` (the grammar of
    ``windtunnel.geometry.registry``): other hooks are unknown names, other parts and methods are absent."""

    def __init__(self, inner: WindTunnelModel, exposed: set[str]) -> None:
        super().__init__(inner.config)
        self.inner = inner
        self.exposed = set(exposed)
        layer_parts = {r[len(registry.LAYER):] for r in exposed if r.startswith(registry.LAYER)}
        self._layer_parts = {p for p in layer_parts if not p.split(".")[-1].startswith("hook_")}
        self._layer_hooks = layer_parts - self._layer_parts

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        return self.inner(tokens, features)

    @property
    def blocks(self) -> _Part:  # type: ignore[override]
        return _Part(self.inner.blocks, self._layer_parts)

    def __getattr__(self, name: str) -> Any:
        if name in ("norm", "head") and name in self.__dict__.get("exposed", ()):
            return getattr(self._modules["inner"], name)
        return super().__getattr__(name)

    def _shown(self, name: str) -> bool:
        if name.startswith("blocks."):
            return name.split(".", 2)[2] in self._layer_hooks
        return name in self.exposed

    def hook_points(self) -> dict[str, HookPoint]:
        return {n: m for n, m in self.inner.hook_points().items() if self._shown(n)}

    def capabilities(self) -> frozenset[str]:
        return frozenset(m for m in self.inner.capabilities() if f"{m}()" in self.exposed)

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner.unembed(x)

    def unrotated_keys(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> list[torch.Tensor]:
        return self.inner.unrotated_keys(tokens, features)

    @contextmanager
    def bypass_layer(self, layer: int) -> Iterator["Exposing"]:
        with self.inner.bypass_layer(layer):
            yield self


def _contract_models(tmp_path: Path, task: tasks.Task) -> list[WindTunnelModel]:
    """The models the contract test can narrow: the user's transformer, and Mamba for the selective step sizes."""
    torch.manual_seed(0)
    return [models.make("own_transformer:factory", task), models.make("mamba", task, d_model=16, n_layers=2)]


def _run(diag: registry.Diagnostic, model: WindTunnelModel, task: tasks.Task, n: int = 12) -> dict[str, Any]:
    kw: dict[str, Any] = {"episodes": task.sample(n, 5)}
    if diag.untrained:
        kw["untrained"] = model
    if diag.resamples:
        kw["n_boot"] = 5
    return diag.compute(model, task, **kw)


CONTRACT_TASKS = (("recall", RECALL), ("hmm", {"S": 2, "O": 2, "K": 4}),
                  ("model_selection", {"n": 6, "L": 5, "symbols": "opaque"}))
"""Tasks the contract runs each diagnostic on (the first where the model has everything and the task too; model
selection for the header probe, which reads a relabelling header)."""


@pytest.mark.parametrize("name", [n for n, d in registry.discover().items() if not d.checkpoints])
@pytest.mark.slow
def test_every_diagnostic_runs_on_exactly_its_declaration_and_names_what_is_missing(
        own_module: Path, name: str) -> None:
    """On a model exposing exactly ``requires`` the diagnostic applies and returns numbers (on a task that
    has its input); with any one requirement withheld it says "not applicable" and names it; never raises."""
    diag = registry.discover()[name]
    results = []
    for task_name, params in CONTRACT_TASKS:
        task = tasks.make(task_name, **params)
        full = next((m for m in _contract_models(own_module, task) if not diag.missing(m)), None)
        assert full is not None, f"no model of the contract test exposes {diag.requires}: add one that does"
        exact = Exposing(full, set(diag.requires))
        assert diag.applies(exact), (name, diag.missing(exact))
        r = _run(diag, exact, task)
        results.append((task_name, r))
        if r.get("applicable", True):
            assert set(r) - {"applicable"}, name  # numbers, under whatever keys the diagnostic chooses
            break
    else:
        pytest.fail(f"{name} applied on none of the contract's tasks: {results}")
    for requirement in diag.requires:
        short = Exposing(full, set(diag.requires) - {requirement})
        assert not diag.applies(short) and diag.missing(short) == [requirement], (name, requirement)
        r = _run(diag, short, task)
        assert r["applicable"] is False and requirement in r["reason"], (name, requirement, r)


NO_LAYERS = """
from torch import nn


class Unrolled(nn.Module):  # no blocks, no hooks: only its outputs can be read
    def __init__(self, task):
        super().__init__()
        self.embed, self.head = nn.Embedding(task.vocab_size, 8), nn.Linear(8, task.n_classes)

    def forward(self, tokens):
        return self.head(self.embed(tokens).cumsum(1))


def factory(task):
    return Unrolled(task)
"""


def test_a_diagnostic_over_checkpoints_is_gated_by_its_declaration(own_module: Path) -> None:
    """``diagnose`` tests a checkpoint diagnostic's declaration on the run's model: on a model without
    layers ``frame_precision`` is "not applicable" naming what it reads, and ``reference_predictors``
    (outputs only) runs.  (On the user's transformer both run: the CLI test above.)"""
    from windtunnel.geometry import diagnose
    from windtunnel.training.loop import TrainConfig, train

    (own_module / "no_layers.py").write_text(NO_LAYERS)
    try:
        cfg = TrainConfig(task="bijection", task_params={"V": 4, "L": 4}, arch="no_layers:factory", steps=2,
                          batch_size=8, eval_every=2, ckpt_every=2, eval_n=8, progress=False, device="cpu", warmup=1)
        run = train(cfg, own_module / "run")
        checkpoint_diags = [n for n, d in registry.discover().items() if d.checkpoints]
        doc = diagnose(run, n=8, n_boot=5, device="cpu", only=checkpoint_diags)
    finally:
        sys.modules.pop("no_layers", None)
    assert doc["frame_precision"]["applicable"] is False
    assert "blocks.{l}.hook_resid_post" in doc["frame_precision"]["reason"]
    assert doc["reference_predictors"]["applicable"] is True
