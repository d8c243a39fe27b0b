"""A task, an architecture and a diagnostic are each one file.

A throwaway of each, written as docs/extending.md describes it (the diagnostic is the page's own example, taken
from the page), joins the registries and passes the contracts the built-in ones pass, with no edit anywhere
else: imported as a module of one's own, it trains and is analysed like a built-in; dropped into a copy of the
package, the full task, model, diagnostic and own-model suites reach it (counted per suite, beside a built-in),
and the command line lists it without importing torch.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
import torch

from windtunnel import models, tasks
from windtunnel.errors import InvalidValue
from windtunnel.geometry import registry as geometry_registry
from windtunnel.models import catalog
from windtunnel.tasks import base as task_base

from contracts import check_arch_contract, check_task_contract, tiny_model, tiny_task

ROOT = Path(__file__).parents[1]
EXTENDING = ROOT / "docs" / "extending.md"

TASK_FILE = '''"""A throwaway task: predict the previous token."""
from dataclasses import dataclass

import torch

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
'''

ARCH_FILE = '''"""A throwaway architecture: a residual stack of GRUs."""
from dataclasses import dataclass

from torch import nn

from windtunnel.models.base import Block, HookPoint, InputEmbedding, ModelConfig, RMSNorm, WindTunnelModel
from windtunnel.models.catalog import Arch, register_arch


@dataclass
class GRUDemoConfig(ModelConfig):
    arch: str = "gru_demo"
    d_model: int = 16
    n_layers: int = 2


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


register_arch("gru_demo", Arch(GRUDemo, GRUDemoConfig, order=900, tiny={"d_model": 8, "n_layers": 2}))
'''


def docs_example(first_line: str) -> str:
    """The fenced Python block of docs/extending.md that begins with ``first_line``, exactly as the page shows it."""
    blocks = re.findall(r"```python\n(.*?)```", EXTENDING.read_text(), re.S)
    found = [b for b in blocks if b.startswith(first_line + "\n")]
    assert len(found) == 1, f"docs/extending.md has no one block beginning {first_line!r}"
    return found[0]


DIAGNOSTIC_FILE = docs_example("# windtunnel/geometry/stream_norm.py")
"""The page's whole diagnostic (``stream_norm``)."""

THROWAWAYS = {"task": ("tasks", "copy_previous_demo", TASK_FILE), "architecture": ("models", "gru_demo", ARCH_FILE),
              "diagnostic": ("geometry", "stream_norm", DIAGNOSTIC_FILE)}
"""Each kind of extension → the package it is a file of, its registered name (and file name), its source."""


@pytest.fixture
def extension(tmp_path: Path):
    """The three throwaway files as modules of one's own, imported (each registers itself); unregistered after."""
    for package, name, source in THROWAWAYS.values():
        (tmp_path / f"wt_demo_{name}.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    try:
        yield [importlib.import_module(f"wt_demo_{name}") for _, name, _ in THROWAWAYS.values()]
    finally:
        sys.path.remove(str(tmp_path))
        for _, name, _ in THROWAWAYS.values():
            sys.modules.pop(f"wt_demo_{name}", None)
        task_base._REGISTRY.pop("copy_previous_demo", None)
        catalog._ARCHS.pop("gru_demo", None)
        geometry_registry._REGISTRY.pop("stream_norm", None)


@pytest.mark.slow
def test_a_task_an_architecture_and_a_diagnostic_each_from_one_file(extension, tmp_path: Path) -> None:
    assert "copy_previous_demo" in tasks.names() and "gru_demo" in models.names()
    task = tiny_task("copy_previous_demo")
    for seed in (0, 1, 2):
        check_task_contract(task, seed, 5)
    check_arch_contract("gru_demo", task)
    # it trains, evaluates and is analysed like any built-in: the new diagnostic runs on the new model
    from windtunnel.orchestration.stages import analyze_run
    from windtunnel.training.loop import TrainConfig, train

    cfg = TrainConfig(task="copy_previous_demo", task_params=dict(task.tiny), arch="gru_demo", model={"d_model": 8},
                      steps=4, batch_size=8, eval_every=4, ckpt_every=4, eval_n=8, progress=False, device="cpu",
                      warmup=1)
    run = train(cfg, tmp_path / "run")
    doc = json.loads(analyze_run(run, n=16, n_boot=10, device="cpu", report=False).read_text())
    norms = doc["stream_norm"]
    assert len(norms["norm_by_layer"]) == 2 and doc["summary"]["stream_norm.final_norm"] == norms["norm_by_layer"][-1]
    assert doc["key_orthogonality"]["applicable"] is False  # no keys: its declared requirement says so


SUITES = {"task": "test_tasks_contract.py", "model": "test_models.py", "diagnostic": "test_geometry.py",
          "own-model": "test_own_model.py"}
"""The parametrised suites over the registries: each iterates a registry at collection."""

LISTED = """
import runpy, sys
sys.argv = ["windtunnel", *sys.argv[1:]]
try:
    runpy.run_module("windtunnel", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print("torch imported:", "torch" in sys.modules)
"""
"""``windtunnel ARGS``, then whether torch was imported on the way."""


def built_in(kind: str) -> str:
    """A built-in entry of each kind, from its registry: what a throwaway's counts are set beside."""
    if kind == "task":
        return next(n for n in tasks.names() if tasks.get(n).name == n)
    if kind == "architecture":
        return models.names()[0]
    return next(n for n, d in geometry_registry.discover().items() if not d.checkpoints)


def outcomes(report: Path) -> list[tuple[str, str, str, str]]:
    """Each test of a JUnit report: (suite file, test name with its parameters, outcome — passed, skipped or
    failed —, the failure's text)."""
    out = []
    for case in ET.parse(report).iter("testcase"):
        failure = case.find("failure") if case.find("failure") is not None else case.find("error")
        outcome = "failed" if failure is not None else "skipped" if case.find("skipped") is not None else "passed"
        out.append((case.get("classname", "").rsplit(".", 1)[-1] + ".py", case.get("name", ""), outcome,
                    "" if failure is None else f"{failure.get('message', '')}\n{failure.text or ''}"))
    return out


def reached(tests: list[tuple[str, str, str, str]], name: str) -> dict[str, Counter]:
    """Suite file → the outcomes of its tests whose parameters include ``name`` (one of the ``-``-separated parts
    of the node id's brackets)."""
    out: dict[str, Counter] = {}
    for suite, test, outcome, _ in tests:
        params = re.search(r"\[(.*)\]$", test)
        if params is not None and name in params.group(1).split("-"):
            out.setdefault(suite, Counter())[outcome] += 1
    return out


@pytest.mark.slow
def test_the_full_suites_reach_a_task_an_architecture_and_a_diagnostic_dropped_into_the_package(
        tmp_path: Path) -> None:
    """A copy of the package with the three throwaway files dropped in (what a contributor does, nothing else
    edited) and the suites beside it: every suite passes and reaches the throwaway of each kind it reaches a
    built-in of — counted per suite from the node ids, beside the built-in's count — and ``windtunnel tasks``
    and ``train --help`` list the new task and architecture without importing torch."""
    shutil.copytree(ROOT / "src" / "windtunnel", tmp_path / "src" / "windtunnel",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    for package, name, source in THROWAWAYS.values():
        (tmp_path / "src" / "windtunnel" / package / f"{name}.py").write_text(source)
    tests_dir = tmp_path / "tests"
    shutil.copytree(ROOT / "tests" / "golden", tests_dir / "golden")  # a new task's golden file is written here
    for name in ("conftest.py", "contracts.py", *SUITES.values()):
        shutil.copy(ROOT / "tests" / name, tests_dir / name)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")  # the pytest settings and markers
    # the copy is imported before the installed package; the fused Mamba kernel is not built from it (its build
    # cache is shared with the checkout's, and a build from another path would rebuild both; the kernel's own
    # tests skip, and no suite here needs it to reach the throwaways)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "src"), os.environ.get("PYTHONPATH", "")]),
           "WINDTUNNEL_NO_KERNEL": "1"}

    for args, shown in ((["tasks"], "copy_previous_demo"), (["train", "--help"], "gru_demo")):
        out = subprocess.run([sys.executable, "-c", LISTED, *args], capture_output=True, text=True, cwd=tmp_path,
                             env=env, timeout=300).stdout
        assert shown in out and "torch imported: False" in out, out

    report = tmp_path / "suites.xml"
    # both tiers: the contract's slow cases (each diagnostic on every architecture) are where a diagnostic is reached
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "slow or not slow", "-p", "no:cacheprovider",
                           f"--junitxml={report}",
                           *(f"tests/{f}" for f in SUITES.values())], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=3000)
    assert report.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    tests = outcomes(report)
    failed = [f"{suite}::{test}\n{text[-2000:]}" for suite, test, outcome, text in tests if outcome == "failed"]
    counts = {kind: (reached(tests, new), reached(tests, built_in(kind))) for kind, (_, new, _) in THROWAWAYS.items()}
    for suite, file in SUITES.items():  # the counts, each beside a built-in's (``-s`` shows them)
        print(f"{suite} suite ({file}): " + "; ".join(
            f"{kind} {THROWAWAYS[kind][1]} {dict(mine.get(file, Counter()))} vs {built_in(kind)} "
            f"{dict(theirs.get(file, Counter()))}" for kind, (mine, theirs) in counts.items()))
    assert not failed, "\n\n".join(failed)
    for suite, file in SUITES.items():
        assert any(mine.get(file) for mine, _ in counts.values()), f"the {suite} suite reached no throwaway"
        for kind, (mine, theirs) in counts.items():
            assert not theirs.get(file) or mine.get(file, Counter())["passed"], (
                f"the {suite} suite reaches the built-in {kind} {built_in(kind)} but passes no test of the "
                f"throwaway {THROWAWAYS[kind][1]}")
    assert proc.returncode == 0, proc.stdout[-5000:]


# Mamba's contract check builds and differentiates its scan many times (about a minute): the slow tier
@pytest.mark.parametrize("arch", [pytest.param(a, marks=pytest.mark.slow) if a == "mamba" else a
                                  for a in models.names()])
def test_every_registered_architecture_keeps_the_contract(arch: str) -> None:
    check_arch_contract(arch, tasks.make("bijection", V=5, L=5))


def test_diagnostics_declare_what_they_need() -> None:
    """Every diagnostic that names claims has readings for them, and its declaration is in the requirement grammar,
    the body's gate being the declaration: the per-layer hooks an LSTM has (its residual stream) are met, the
    attention ones are not."""
    model = models.make("lstm", tasks.make("bijection", V=5, L=5), d_model=8, n_layers=1)
    for name, d in geometry_registry.discover().items():
        assert d.interpret is not None or not d.claims, name  # a diagnostic naming claims says what it reads for them
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
