"""A task, an architecture and a diagnostic are each one file: a throwaway of each, written to a
temporary folder and imported, joins the registries and passes the same contracts as the built-in
ones, with no edit anywhere else."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from windtunnel import models, tasks
from windtunnel.errors import InvalidValue
from windtunnel.geometry import registry as geometry_registry
from windtunnel.models import catalog
from windtunnel.tasks import base as task_base

from contracts import check_arch_contract, check_task_contract, tiny_model

EXTENSION = '''
from dataclasses import dataclass

import torch
from torch import nn

from windtunnel.geometry import Diagnostic, Reading, register
from windtunnel.models.base import Block, HookPoint, InputEmbedding, ModelConfig, RMSNorm, WindTunnelModel
from windtunnel.models.catalog import Arch, register_arch
from windtunnel.tasks import Episodes, Task
from windtunnel.tasks import register as register_task
from windtunnel.tasks.base import IGNORE, generator, uniform_rows


@register_task
@dataclass(frozen=True)
class CopyPrevious(Task):
    """Predict the previous token: the posterior is one-hot on it (uniform at the first position)."""

    name = "copy_previous_demo"
    summary = "the previous token, exactly"
    tiny = {"V": 4, "T": 6}
    V: int = 4
    T: int = 6

    @property
    def n_classes(self): return self.V
    @property
    def vocab_size(self): return self.V
    @property
    def seq_len(self): return self.T

    def sample(self, n, seed):
        tokens = torch.randint(0, self.V, (n, self.T), generator=generator(seed))
        targets = torch.full_like(tokens, IGNORE)
        targets[:, 1:] = tokens[:, :-1]
        return Episodes(tokens=tokens, targets=targets, posterior=self.posterior(tokens),
                        mask=self.scored_mask(tokens), latent={})

    def scored_mask(self, tokens, features=None):
        m = torch.ones(tokens.shape, dtype=torch.bool)
        m[:, 0] = False
        return m

    def posterior(self, tokens, features=None):
        out = uniform_rows(tokens.shape, self.V)
        out[:, 1:] = torch.nn.functional.one_hot(tokens[:, :-1], self.V).double()
        return out


@dataclass
class GRUDemoConfig(ModelConfig):
    arch: str = "gru_demo"
    d_model: int = 16
    n_layers: int = 1


class GRUBlock(Block):
    def __init__(self, cfg):
        super().__init__()
        self.gru = nn.GRU(cfg.d_model, cfg.d_model, batch_first=True)
        self.hook_state = HookPoint()

    def mix(self, x):
        return x + self.hook_state(self.gru(x)[0])


class GRUDemo(WindTunnelModel):
    def __init__(self, config):
        super().__init__(config)
        c = config
        self.embed = InputEmbedding(c.vocab_size, c.n_features, c.d_model)
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(GRUBlock(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.d_model, 1e-5)
        self.hook_final = HookPoint()
        self.head = nn.Linear(c.d_model, c.n_classes, bias=False)
        self._finish_init()


register_arch("gru_demo", Arch(GRUDemo, GRUDemoConfig, order=900, tiny={"d_model": 8}))


def state_norm(model, task, *, episodes):
    """Mean norm of the first recurrent state at scored positions (null: the embedding's)."""
    _, cache = model.run_with_cache(episodes.tokens, names=["blocks.0.hook_state", "hook_embed"])
    m = episodes.mask
    return {"applicable": True, "summary": {"state_norm": float(cache["blocks.0.hook_state"][m].norm(dim=-1).mean()),
                                            "embed_norm": float(cache["hook_embed"][m].norm(dim=-1).mean())}}


def _interpret(r):
    s = r["summary"]
    return [Reading("state_norm_demo.state_norm", s["state_norm"], "embedding norm", s["embed_norm"],
                    "any", None, "X1", "a demonstration")]


register(Diagnostic("state_norm_demo", state_norm, None, _interpret, order=999, requires=("blocks.{l}.hook_state",)))
'''


@pytest.fixture
def extension(tmp_path: Path):
    (tmp_path / "wt_extension_demo.py").write_text(EXTENSION)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("wt_extension_demo")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("wt_extension_demo", None)
        task_base._REGISTRY.pop("copy_previous_demo", None)
        catalog._ARCHS.pop("gru_demo", None)
        geometry_registry._REGISTRY.pop("state_norm_demo", None)


def test_a_task_an_architecture_and_a_diagnostic_each_from_one_file(extension, tmp_path: Path) -> None:
    assert "copy_previous_demo" in tasks.names() and "gru_demo" in models.names()
    task = tasks.make("copy_previous_demo", **tasks.get("copy_previous_demo").tiny)
    for seed in (0, 1, 2):
        check_task_contract(task, seed, 5)
    check_arch_contract("gru_demo", task)
    # it trains, evaluates and is analysed like any built-in: the new diagnostic runs on the new model
    from windtunnel.orchestration.stages import analyze_run
    from windtunnel.training.loop import TrainConfig, train

    cfg = TrainConfig(task="copy_previous_demo", task_params={"V": 4, "T": 6}, arch="gru_demo", model={"d_model": 8},
                      steps=4, batch_size=8, eval_every=4, ckpt_every=4, eval_n=8, progress=False, device="cpu",
                      warmup=1)
    run = train(cfg, tmp_path / "run")
    doc = json.loads(analyze_run(run, n=16, n_boot=10, device="cpu", report=False).read_text())
    assert doc["state_norm_demo"]["summary"]["state_norm"] > 0
    assert any(r["claim"] == "X1" for r in doc["interpretation"])
    assert doc["key_orthogonality"]["applicable"] is False  # no keys: its declared requirement says so


@pytest.mark.parametrize("arch", models.names())
def test_every_registered_architecture_keeps_the_contract(arch: str) -> None:
    check_arch_contract(arch, tasks.make("bijection", V=5, L=5))


def test_every_registered_task_has_a_small_instance_or_a_contract_entry() -> None:
    from test_tasks_contract import SMALL

    for name in tasks.names():
        cls = tasks.get(name)  # a named preset (recall_paper, sawtooth) is covered by its task's entry
        assert name in SMALL or cls.name in SMALL or "tiny" in vars(cls), name


def test_diagnostics_declare_what_they_need() -> None:
    """Every diagnostic has readings and claims, and its declaration is in the requirement grammar: the
    per-layer hooks an LSTM has (its residual stream) are met, the attention ones are not."""
    model = models.make("lstm", tasks.make("bijection", V=5, L=5), d_model=8, n_layers=1)
    for name, d in geometry_registry.discover().items():
        assert d.interpret is not None and d.claims, name
        for r in d.requires:
            geometry_registry.check_requirement(r)
        if d.requires:
            assert d.checkpoints or d.compute.requires == d.requires, name  # the body's gate is the declaration
    assert geometry_registry.missing(model, ["blocks.{l}.hook_resid_post", "blocks.{l}.attn.hook_pattern",
                                             "unembed()", "bypass_layer()", "unrotated_keys()", "norm", "head"]) \
        == ["blocks.{l}.attn.hook_pattern", "unrotated_keys()"]


@pytest.mark.parametrize("requirement", ["attn.hook_k", "hook_resid_post.x", "blocks.{l}.", "keys()", "blocks.0.hook_k"])
def test_a_requirement_outside_the_grammar_is_refused_at_registration(requirement: str) -> None:
    with pytest.raises(InvalidValue, match="invalid requirement"):
        geometry_registry.Diagnostic("bad_demo", lambda model, task, **kw: {}, requires=(requirement,))


class _Hookless(torch.nn.Module):
    """A user's model with no hooks at all: tokens → embedding → head."""

    def __init__(self, task: tasks.Task) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(task.vocab_size, 8)
        self.head = torch.nn.Linear(8, task.n_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens))


def _run(diag, model, task, ep):
    kw = {"episodes": ep}
    if diag.untrained:
        kw["untrained"] = model
    if diag.resamples:
        kw["n_boot"] = 5
    return diag.compute(model, task, **kw)


@pytest.mark.parametrize("arch", models.names() + ["hookless"])
def test_a_diagnostic_whose_hooks_a_model_lacks_says_not_applicable(arch: str) -> None:
    """The hooks a diagnostic declares are the capability it needs: on a model without one of them it
    answers "not applicable" (never a crash, never numbers) — on every registered architecture and on a
    model with no hooks at all."""
    task = tasks.make("hmm", S=3, O=3, K=5)  # a hidden state, so every per-task diagnostic has its input
    torch.manual_seed(0)
    model = _Hookless(task) if arch == "hookless" else tiny_model(arch, task)
    ep = task.sample(12, 0)
    for name, diag in geometry_registry.discover().items():
        if diag.checkpoints or diag.applies(model):
            continue
        r = _run(diag, model, task, ep)
        assert r["applicable"] is False and r["reason"], (arch, name)


def test_the_capabilities_table_in_the_docs_is_the_registrys() -> None:
    """``docs/extending.md``'s table of what each diagnostic reads is generated from the declarations
    (``WINDTUNNEL_REGEN_DOCS=1`` rewrites it); any drift between the two fails here."""
    path = Path(__file__).parents[1] / "docs" / "extending.md"
    doc = path.read_text()
    generated = geometry_registry.with_capabilities_table(doc)
    if os.environ.get("WINDTUNNEL_REGEN_DOCS"):
        path.write_text(generated)
        doc = generated
    assert doc == generated, "docs/extending.md's capabilities table differs from the declarations: regenerate it"
    assert geometry_registry.capabilities_markdown() in doc
