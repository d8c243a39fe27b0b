"""A model of one's own with no hook names gets the stream-reading diagnostics (``windtunnel.models.discovery``).

The models below are written as a user writes them — ``torch.nn`` only, no windtunnel import — into a temporary
folder, and loaded through ``--arch module:factory`` (``models.make``), the path the command line takes.

* Discovery finds the list of layers by the documented rule (the longest list of same-typed blocks on the
  path from the input to the logits) and exposes the stream before and after each layer as
  ``blocks.{l}.hook_resid_pre`` / ``hook_resid_post``: the hooks read exactly the tensors the layers take and
  return (compared with a forward pass written out by hand), and a tensor returned by a hook replaces what
  flows downstream.
* The readout after the last layer is exposed as ``unembed`` only where it reproduces the logits.
* No hook is left registered on the user's modules, also after an exception.
* Models without a list of layers (one multi-layer ``nn.GRU``, no list, layers that are not chained) get a
  reason, not a traceback.
* The count: a plain GRU stack trained and analysed through the CLI gets 1 diagnostic without discovery, and
  every stream diagnostic with it; ``analyze`` prints each diagnostic that did not apply, and why.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch
from torch import nn

from windtunnel import models, tasks
from windtunnel.cli import main
from windtunnel.geometry import registry
from windtunnel.models import discovery
from windtunnel.models.discovery import NotFound, Stream
from windtunnel.models.external import ExternalModel

USER_MODELS = '''
"""A user's models: torch.nn only, no windtunnel import, no hook names."""
import math

import torch
from torch import nn


class GRUStack(nn.Module):
    """An embedding, single-layer GRUs in an nn.ModuleList, a linear head."""

    def __init__(self, vocab, classes, hidden=16, n_layers=3, embed=None):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed or hidden)
        self.rnns = nn.ModuleList(nn.GRU(embed or hidden if i == 0 else hidden, hidden, batch_first=True)
                                  for i in range(n_layers))
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        for rnn in self.rnns:
            x, _ = rnn(x)
        return self.head(x)


def gru(task, hidden=16, n_layers=3):
    return GRUStack(task.vocab_size, task.n_classes, hidden, n_layers)


def gru_wide_embedding(task):  # the first GRU maps width 8 to 16
    return GRUStack(task.vocab_size, task.n_classes, 16, 2, embed=8)


class LSTMStack(nn.Module):
    """LSTMs called with the input by keyword, returning (output, (h, c)); a final norm and a head."""

    def __init__(self, vocab, classes, hidden=16, n_layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.lstms = nn.ModuleList(nn.LSTM(hidden, hidden, batch_first=True) for _ in range(n_layers))
        self.norm_out = nn.LayerNorm(hidden)
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        for lstm in self.lstms:
            x = lstm(input=x)[0]
        return self.classifier(self.norm_out(x))


def lstm(task):
    return LSTMStack(task.vocab_size, task.n_classes)


class Head(nn.Module):
    def __init__(self, d, d_head):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(d, d_head, bias=False) for _ in range(3))

    def forward(self, x):
        T = x.shape[1]
        scores = self.q(x) @ self.k(x).transpose(1, 2) / math.sqrt(self.k.out_features)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        return scores.masked_fill(~causal, float("-inf")).softmax(-1) @ self.v(x)


class Block(nn.Module):
    """Pre-norm attention (a list of heads) and MLP, residuals inside the block."""

    def __init__(self, d, n_heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.heads = nn.ModuleList(Head(d, d // n_heads) for _ in range(n_heads))
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.proj(torch.cat([head(h) for head in self.heads], -1))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token and learned position embeddings, blocks in an nn.Sequential called as a whole, final norm, head.
    Each block has four heads in an nn.ModuleList: a longer list of same-typed modules than the blocks."""

    def __init__(self, vocab, classes, max_len, d=16, n_layers=2, n_heads=4):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.layers = nn.Sequential(*[Block(d, n_heads) for _ in range(n_layers)])
        self.ln_f, self.out = nn.LayerNorm(d), nn.Linear(d, classes, bias=False)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos.weight[: tokens.shape[1]]
        return self.out(self.ln_f(self.layers(x)))


def gpt(task, d_model=16, n_layers=2):
    return TinyGPT(task.vocab_size, task.n_classes, 4 * task.seq_len, d_model, n_layers)


class Causal(nn.Module):
    """A causal mixing layer: the running mean of a linear map, plus its input."""

    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        steps = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=x.dtype)[None, :, None]
        return x + torch.tanh(self.lin(x)).cumsum(1) / steps


def sequential(task):  # the whole model is one nn.Sequential of mixed modules
    return nn.Sequential(nn.Embedding(task.vocab_size, 16), Causal(16), Causal(16), Causal(16),
                         nn.LayerNorm(16), nn.Linear(16, task.n_classes))


class SkipToHead(nn.Module):
    """The head reads the last layer's output plus the embedding: the tail is no function of the stream alone."""

    def __init__(self, vocab, classes, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.mix = nn.ModuleList(Causal(d) for _ in range(2))
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        e = x = self.embed(tokens)
        for layer in self.mix:
            x = layer(x)
        return self.head(x + e)


def skip_to_head(task):
    return SkipToHead(task.vocab_size, task.n_classes)


class DeepGRU(nn.Module):
    """One nn.GRU running two layers: not a list of layers."""

    def __init__(self, vocab, classes, hidden=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.gru = nn.GRU(hidden, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens):
        return self.head(self.gru(self.embed(tokens))[0])


def deep_gru(task):
    return DeepGRU(task.vocab_size, task.n_classes)


class Unrolled(nn.Module):
    """No list at all."""

    def __init__(self, vocab, classes):
        super().__init__()
        self.embed, self.head = nn.Embedding(vocab, 8), nn.Linear(8, classes)

    def forward(self, tokens):
        return self.head(self.embed(tokens).cumsum(1))


def unrolled(task):
    return Unrolled(task.vocab_size, task.n_classes)


class OutsideResidual(nn.Module):
    """The residual is added outside the layers, so no layer's output is the stream."""

    def __init__(self, vocab, classes, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.mix = nn.ModuleList(nn.GRU(d, d, batch_first=True) for _ in range(2))
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        for gru in self.mix:
            x = x + gru(x)[0]
        return self.head(x)


def outside_residual(task):
    return OutsideResidual(task.vocab_size, task.n_classes)
'''

RECALL = {"pairs": 3, "n_keys": 6, "n_values": 6, "queries": 3}
"""A small recall task (it defines the counterfactual edit, so the counterfactual diagnostic has its input)."""

STREAM_NEEDS = {"blocks.{l}.hook_resid_pre", "blocks.{l}.hook_resid_post", "unembed()", "bypass_layer()"}
"""What discovery exposes (``windtunnel.geometry.registry`` grammar)."""

STREAM_DIAGNOSTICS = {"value_manifold", "probes", "bayes_lens", "jacobian_lens", "layer_ablation", "steering",
                      "state_patching", "counterfactual", "belief_geometry", "frame_precision"}
"""The diagnostics of the package that read only the stream (declare only :data:`STREAM_NEEDS`), as of this test;
a diagnostic registered later that declares only these is held to apply as well (:func:`_stream_only`)."""


def _stream_only() -> set[str]:
    """The registered diagnostics that declare only what discovery exposes (those over checkpoints included)."""
    return {k for k, d in registry.discover().items() if d.requires and set(d.requires) <= STREAM_NEEDS}


@pytest.fixture()
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder holding ``user_models.py``, the current folder (as a user runs the CLI from there)."""
    (tmp_path / "user_models.py").write_text(USER_MODELS)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("user_models", None)


def _task() -> tasks.Task:
    return tasks.make("recall", **RECALL)


def _make(factory: str, task: tasks.Task | None = None, **kw: Any) -> ExternalModel:
    torch.manual_seed(0)
    model = models.make(f"user_models:{factory}", task or _task(), **kw)
    assert isinstance(model, ExternalModel)
    return model.eval()


def _manual(model: ExternalModel, tokens: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """Each layer's input and output and the logits, by a forward pass written out by hand for each user model."""
    net = model.net
    name = type(net).__name__
    ins, outs = [], []
    with torch.no_grad():
        if name == "GRUStack":
            x = net.embed(tokens)
            for rnn in net.rnns:
                ins.append(x)
                x = rnn(x)[0]
                outs.append(x)
            logits = net.head(x)
        elif name == "LSTMStack":
            x = net.embed(tokens)
            for lstm in net.lstms:
                ins.append(x)
                x = lstm(x)[0]
                outs.append(x)
            logits = net.classifier(net.norm_out(x))
        elif name == "TinyGPT":
            x = net.tok(tokens) + net.pos.weight[: tokens.shape[1]]
            for block in net.layers:
                ins.append(x)
                x = block(x)
                outs.append(x)
            logits = net.out(net.ln_f(x))
        else:  # the mixed nn.Sequential
            x = net[0](tokens)
            for block in list(net)[1:4]:
                ins.append(x)
                x = block(x)
                outs.append(x)
            logits = net[5](net[4](x))
    return ins, outs, logits


STACKS = {"gru": ("rnns", ["head"]), "lstm": ("lstms", ["norm_out", "classifier"]),
          "gpt": ("layers", ["ln_f", "out"]), "sequential": ("[1:4]", ["4", "5"])}
"""Each user model with a list of layers: where its layers are, and its readout's modules."""


@pytest.mark.parametrize("factory", sorted(STACKS))
def test_the_layers_are_found_and_the_hooks_read_what_they_take_and_return(user: Path, factory: str) -> None:
    """The documented rule picks the user's list of layers (not the longer list of heads inside each block of
    the transformer), and ``blocks.{l}.hook_resid_pre/post`` read exactly each layer's input and output."""
    task = _task()
    model = _make(factory, task)
    stream = model.stream
    assert isinstance(stream, Stream), stream
    path, readout = STACKS[factory]
    assert stream.path == path and stream.readout_paths == readout and stream.pre
    L = len(model.blocks)
    assert L == len(stream.layers) >= 2
    names = [f"blocks.{l}.hook_resid_{x}" for l in range(L) for x in ("pre", "post")]
    assert set(names) <= set(model.hook_names())
    assert model.capabilities() >= {"unembed", "bypass_layer"}
    tokens = task.sample(3, 1).tokens
    ins, outs, logits = _manual(model, tokens)
    with torch.no_grad():  # as the hand-written pass (an LSTM's kernel differs in the last bit under autograd)
        got, cache = model.run_with_cache(tokens, names=names)
    assert torch.equal(got, logits)
    for l in range(L):
        assert torch.equal(cache[f"blocks.{l}.hook_resid_pre"], ins[l]), (factory, l)
        assert torch.equal(cache[f"blocks.{l}.hook_resid_post"], outs[l]), (factory, l)


@pytest.mark.parametrize("factory", sorted(STACKS))
def test_a_tensor_returned_by_a_hook_replaces_the_stream_downstream(user: Path, factory: str) -> None:
    """Replacing layer 0's output (and, separately, the stream entering layer 0) through the hook gives the
    logits of the hand-written forward pass fed the replacement; bypassing layer 1 feeds layer 2 (or the
    readout) the stream that entered layer 1."""
    task = _task()
    model = _make(factory, task)
    tokens = task.sample(3, 2).tokens
    ins, outs, logits = _manual(model, tokens)
    edit = torch.randn(outs[0].shape, generator=torch.Generator().manual_seed(3))
    layers, readout = model.stream.layers, model.stream.readout

    def rest(x: torch.Tensor, start: int) -> torch.Tensor:
        with torch.no_grad():
            for layer in layers[start:]:
                x = discovery.output_tensor(layer(x))
            for module in readout:
                x = module(x)
        return x

    with torch.no_grad(), model.hooks([("blocks.0.hook_resid_post", lambda x, _: edit)]):
        patched = model(tokens)
    torch.testing.assert_close(patched, rest(edit, 1))
    assert not torch.allclose(patched, logits)
    with torch.no_grad(), model.hooks([("blocks.0.hook_resid_pre", lambda x, _: edit)]):
        steered = model(tokens)
    torch.testing.assert_close(steered, rest(edit, 0))
    assert not torch.allclose(steered, logits)
    with torch.no_grad(), model.bypass_layer(1):
        bypassed = model(tokens)
    torch.testing.assert_close(bypassed, rest(ins[1], 2))
    torch.testing.assert_close(model(tokens), logits)  # nothing stays patched


@pytest.mark.parametrize("factory", sorted(STACKS))
def test_unembed_of_the_last_stream_is_the_models_logits(user: Path, factory: str) -> None:
    task = _task()
    model = _make(factory, task)
    tokens = task.sample(4, 3).tokens
    last = f"blocks.{len(model.blocks) - 1}.hook_resid_post"
    logits, cache = model.run_with_cache(tokens, names=last)
    torch.testing.assert_close(model.unembed(cache[last]), logits)
    # on a state that is no stream of the model too: the readout is the modules, not a cached answer
    x = torch.randn(2, 5, cache[last].shape[-1])
    expected = x
    for m in model.stream.readout:
        expected = m(expected)
    torch.testing.assert_close(model.unembed(x), expected.float())


def test_a_tail_that_reads_more_than_the_last_stream_has_no_unembed(user: Path) -> None:
    """The head reads the last layer's output plus the embedding: the layers are exposed, ``unembed`` is not,
    and the diagnostics that read it say so."""
    task = _task()
    model = _make("skip_to_head", task)
    assert isinstance(model.stream, Stream) and model.stream.path == "mix"
    assert model.stream.readout is None and "unembed" not in model.capabilities()
    assert any("no readout" in note for note in model.stream.notes), model.stream.notes
    assert "blocks.1.hook_resid_post" in model.hook_names() and "bypass_layer" in model.capabilities()
    diags = registry.discover()
    assert diags["bayes_lens"].missing(model) == ["unembed()"]
    r = diags["bayes_lens"].compute(model, task, episodes=task.sample(8, 0), untrained=model)
    assert r["applicable"] is False and "unembed()" in r["reason"]
    assert diags["probes"].applies(model)


def test_a_first_layer_that_changes_the_width_exposes_only_the_stream_after_each_layer(user: Path) -> None:
    model = _make("gru_wide_embedding")
    assert isinstance(model.stream, Stream) and not model.stream.pre
    names = set(model.hook_names())
    assert {"blocks.0.hook_resid_post", "blocks.1.hook_resid_post"} <= names
    assert not any(n.endswith("hook_resid_pre") for n in names)
    assert "bypass_layer" not in model.capabilities() and "unembed" in model.capabilities()
    assert "maps width 8 to 16" in model.describe_stream()


@pytest.mark.parametrize("factory, reason", [
    ("unrolled", "has no nn.ModuleList or nn.Sequential"),
    ("deep_gru", "gru (GRU, num_layers=2) runs its layers inside one call"),
    ("outside_residual", "the layers are not chained: layer 1's input is not layer 0's output"),
])
def test_a_model_without_a_list_of_layers_gets_a_reason_not_a_traceback(user: Path, factory: str,
                                                                          reason: str) -> None:
    """The model is built and runs; discovery says why it found no layers; the stream diagnostics answer "not
    applicable" naming the hook they read."""
    task = _task()
    model = _make(factory, task)
    assert isinstance(model.stream, NotFound) and reason in model.stream.reason, model.stream
    assert model.describe_stream().startswith("layers not found: ")
    assert len(model.blocks) == 0 and not any(n.startswith("blocks.") for n in model.hook_names())
    r = registry.discover()["probes"].compute(model, task, episodes=task.sample(8, 0), untrained=model)
    assert r["applicable"] is False and "blocks.{l}.hook_resid_post" in r["reason"]


def _all_modules(model: ExternalModel) -> list[nn.Module]:
    return list(model.modules()) + list(model.stream.points.values())


def test_no_hook_stays_registered_after_an_exception(user: Path) -> None:
    """After building (discovery probes with hooks), after a hooked block whose hook raises, whose body raises,
    and after nested blocks, no forward or forward-pre hook is left on any module of the model."""
    task = _task()
    model = _make("gru", task)
    assert discovery.hooks_on(_all_modules(model)) == 0
    tokens = task.sample(2, 0).tokens

    def boom(x: torch.Tensor, _name: str) -> None:
        raise RuntimeError("a hook failed")

    with pytest.raises(RuntimeError, match="a hook failed"):
        with model.hooks([("blocks.1.hook_resid_post", boom)]):
            model(tokens)
    assert discovery.hooks_on(_all_modules(model)) == 0
    with pytest.raises(KeyError):
        with model.bypass_layer(0):
            with model.hooks([("blocks.2.hook_resid_pre", lambda x, _: None)]):
                assert discovery.hooks_on(model.stream.layers) == 2 * len(model.stream.layers)  # routed once
                raise KeyError("the body failed")
    assert discovery.hooks_on(_all_modules(model)) == 0
    with model.hooks([("blocks.0.hook_resid_post", lambda x, _: None)]):
        with model.hooks([("blocks.1.hook_resid_post", lambda x, _: None)]):
            pass
        model(tokens)
        assert discovery.hooks_on(model.stream.layers) > 0
    assert discovery.hooks_on(_all_modules(model)) == 0


def test_a_users_blocks_are_the_layers_and_their_own_hook_names_win(user: Path) -> None:
    """A list named ``blocks`` is the only candidate (the documented convention), even beside a longer list; where
    its layers carry our hook points themselves, discovery does not run and the user's hook points are the stream."""
    source = USER_MODELS + '''

from windtunnel.models import HookPoint


class Named(GRUStack):  # its layers under `blocks`, and a longer list of same-typed modules off the path
    def __init__(self, vocab, classes):
        super().__init__(vocab, classes, 16, 2)
        self.blocks = self.rnns
        self.spare = nn.ModuleList(nn.GRU(16, 16, batch_first=True) for _ in range(4))


def named(task):
    return Named(task.vocab_size, task.n_classes)


class Wrapped(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gru = nn.GRU(d, d, batch_first=True)
        self.hook_resid_pre, self.hook_resid_post = HookPoint(), HookPoint()

    def forward(self, x):
        return self.hook_resid_post(self.gru(self.hook_resid_pre(x))[0])


class Hooked(GRUStack):
    def __init__(self, vocab, classes):
        super().__init__(vocab, classes, 16, 2)
        self.blocks = nn.ModuleList(Wrapped(16) for _ in range(2))

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def hooked(task):
    return Hooked(task.vocab_size, task.n_classes)
'''
    (user / "user_models.py").write_text(source)
    named = _make("named")
    assert isinstance(named.stream, Stream) and named.stream.path == "blocks" and len(named.blocks) == 2
    hooked = _make("hooked")
    assert hooked.stream is None and "layers: blocks (2), with the model's own hook points" in hooked.describe_stream()
    points = hooked.hook_points()
    assert points["blocks.1.hook_resid_post"] is hooked.net.blocks[1].hook_resid_post
    assert "unembed" not in hooked.capabilities()  # no norm and head, no unembed, and no discovery of a readout


@pytest.mark.slow
def test_a_plain_gru_stack_gets_the_stream_diagnostics_through_the_cli(
        user: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The before -> after count of docs/own-model.md: a GRU stack trained and analysed through the CLI on a recall
    task, with stream discovery disabled (the model as before it existed) and with it.  Without it only
    ``reference_predictors`` (the outputs alone) applies; with it every stream diagnostic applies but
    ``belief_geometry`` (the task has no hidden state), none fails, and ``analyze`` prints one line for each
    diagnostic that did not apply, naming what is missing, and the layers it found."""
    applied: dict[str, set[str]] = {}
    printed: dict[str, str] = {}
    for label in ("before", "after"):
        if label == "before":
            monkeypatch.setattr(discovery, "find_stream", lambda *_a, **_k: NotFound("discovery disabled"))
        else:
            monkeypatch.undo()
            monkeypatch.chdir(user)
        out = user / label
        config = {"task": "recall", "task_params": RECALL, "arch": "user_models:gru", "steps": 6,
                  "batch_size": 8, "eval_every": 6, "ckpt_every": 3, "eval_n": 16, "warmup": 1, "device": "cpu"}
        (user / "config.json").write_text(json.dumps(config))
        assert main(["train", "--config", str(user / "config.json"), "--out", str(out), "--no-progress"]) == 0
        capsys.readouterr()
        assert main(["analyze", str(out), "--n", "16"]) == 0
        printed[label] = capsys.readouterr().out
        geometry = json.loads((out / "geometry.json").read_text())
        diags = [k for k in registry.discover() if isinstance(geometry.get(k), dict)]
        assert not [k for k in diags if "error" in geometry[k]], label
        applied[label] = {k for k in diags if geometry[k].get("applicable", True)}
        not_applied = [k for k in diags if k not in applied[label]]
        assert f"{len(not_applied)} diagnostic(s) did not apply:" in printed[label]
        for k in not_applied:
            assert f"  {k}: {geometry[k]['reason']}" in printed[label], k
    n = len(registry.discover())
    print(f"plain GRU stack on recall: {len(applied['before'])} of {n} diagnostics before, "
          f"{len(applied['after'])} of {n} after")
    assert applied["before"] == {"reference_predictors"}
    assert STREAM_DIAGNOSTICS <= _stream_only()
    gained = applied["after"] - applied["before"]
    assert gained <= _stream_only() and gained >= STREAM_DIAGNOSTICS - {"belief_geometry"}
    for k in _stream_only() - gained:  # a stream diagnostic that did not apply lacks something of the task
        assert json.loads((user / "after" / "geometry.json").read_text())[k]["reason"].startswith("task"), k
    assert "the model's stream: layers not found: discovery disabled" in printed["before"]
    assert "the model's stream: layers found: rnns (3 x GRU)" in printed["after"]
    assert "probes: architecture 'user_models:gru' does not expose blocks.{l}.hook_resid_post" in printed["before"]


def test_by_declaration_a_gru_stack_meets_every_stream_diagnostic(user: Path) -> None:
    """The same count by declaration alone (what each diagnostic reads from the model, task aside): without
    discovery the GRU stack meets only the declaration of ``reference_predictors``; with it, every stream
    diagnostic's."""
    from windtunnel.models.external import make_external

    task = _task()
    diags = registry.discover()
    torch.manual_seed(0)
    before = make_external("user_models:gru", task, discover=False)
    after = _make("gru", task)
    assert before.stream is None and len(before.blocks) == 0
    assert {k for k, d in diags.items() if d.applies(before)} == {"reference_predictors"}
    met = {k for k, d in diags.items() if d.applies(after)}
    print(f"plain GRU stack by declaration: 1 of {len(diags)} diagnostics before, {len(met)} of {len(diags)} after")
    assert met == _stream_only() | {"reference_predictors"}
    assert STREAM_DIAGNOSTICS <= _stream_only()


def test_discovery_leaves_the_parameters_and_checkpoint_keys_as_they_were(user: Path) -> None:
    """Nothing is registered in the module tree: the state dict and the parameters are those of the model built
    without discovery, and a deep copy keeps its own working stream."""
    import copy

    from windtunnel.models.external import make_external

    task = _task()
    torch.manual_seed(0)
    plain = make_external("user_models:gru", task, discover=False)
    found = _make("gru", task)
    assert list(plain.state_dict()) == list(found.state_dict())
    assert sum(p.numel() for p in plain.parameters()) == found.n_params()
    twin = copy.deepcopy(found)
    assert twin.stream.layers[0] is twin.net.rnns[0] and twin.blocks[2] is twin.net.rnns[2]
    tokens = task.sample(2, 0).tokens
    with torch.no_grad(), twin.hooks([("blocks.2.hook_resid_post", lambda x, _: torch.zeros_like(x))]):
        zeroed = twin(tokens)
    torch.testing.assert_close(zeroed, twin.net.head(torch.zeros(2, tokens.shape[1], 16)).expand_as(zeroed))
    assert discovery.hooks_on(list(found.modules())) == 0
