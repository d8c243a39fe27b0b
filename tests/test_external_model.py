"""Bring your own model: a GRU written here, outside the package, trained, evaluated, resumed and
tabulated through ``--arch module:factory``, and every broken contract refused in one line."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from windtunnel import models, tasks
from windtunnel.cli import main
from windtunnel.errors import InvalidValue
from windtunnel.orchestration.table import run_table

THIRD_PARTY = '''
"""A user's model, written without windtunnel's base classes (only its HookPoint, for a hook)."""
import torch
from torch import nn
from windtunnel.models import HookPoint


class TinyGRU(nn.Module):
    def __init__(self, vocab, classes, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.hook_state = HookPoint()
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens):
        h, _ = self.gru(self.embed(tokens))
        return self.head(self.hook_state(h))


def count(task, hidden):  # embedding + GRU (3 gates, two weight matrices and two biases each) + head
    return task.vocab_size * hidden + 6 * hidden * (hidden + 1) + (hidden + 1) * task.n_classes


def make(task, params=None, hidden=16):
    if params is not None:  # the smallest width whose count reaches the target
        hidden = min(range(1, 2048), key=lambda h: abs(count(task, h) - params))
    return TinyGRU(task.vocab_size, task.n_classes, hidden)


def ignores_target(task, params=None):
    return TinyGRU(task.vocab_size, task.n_classes, 8)


def no_params(task):
    return TinyGRU(task.vocab_size, task.n_classes, 8)


class Peeking(nn.Module):  # sees the future: position t gets the mean embedding of the whole episode
    def __init__(self, task):
        super().__init__()
        self.embed = nn.Embedding(task.vocab_size, 8)
        self.head = nn.Linear(8, task.n_classes)

    def forward(self, tokens):
        e = self.embed(tokens)
        return self.head(e + e.mean(1, keepdim=True))


def peeking(task):
    return Peeking(task)


def wrong_shape(task):
    return nn.Embedding(task.vocab_size, task.n_classes + 1)


def not_a_module(task):
    return 3


from windtunnel.models import Transformer, TransformerConfig


class Scaled(Transformer):  # the package's skeleton, subclassed in the user's own file
    def forward(self, tokens, features=None):
        return 2.0 * super().forward(tokens, features)


def skeleton(task):
    return Scaled(TransformerConfig(vocab_size=task.vocab_size, n_classes=task.n_classes, d_model=16, n_layers=2,
                                    n_heads=2, max_len=4 * task.seq_len))
'''


@pytest.fixture()
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding ``thirdparty.py``, the current folder (as a user runs the CLI from there)."""
    (tmp_path / "thirdparty.py").write_text(THIRD_PARTY)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("thirdparty", None)


def test_factory_model_is_built_checked_and_rebuilt(third_party: Path) -> None:
    task = tasks.make("bijection", V=4, L=4)
    model = models.make("thirdparty:make", task, params=3000)
    assert abs(model.n_params() - 3000) <= 0.03 * 3000
    ep = task.sample(3, seed=0)
    logits, cache = model.run_with_cache(ep.tokens, names="net.hook_state")
    assert logits.shape == (3, task.seq_len, task.n_classes)
    assert cache["net.hook_state"].shape[:2] == (3, task.seq_len)
    rebuilt = models.build(json.loads(json.dumps(model.config_dict())))
    rebuilt.load_state_dict(model.state_dict())
    assert torch.equal(rebuilt(ep.tokens), model(ep.tokens))
    assert model.config_dict()["task"] == "bijection" and model.config_dict()["params"] == 3000


@pytest.mark.parametrize("arch, message", [
    ("thirdparty:peeking", "not causal"),
    ("thirdparty:wrong_shape", "shape"),
    ("thirdparty:not_a_module", "not a torch.nn.Module"),
    ("thirdparty:nothing", "no attribute"),
    ("no_such_module_xyz:make", "cannot import"),
    ("thirdparty:", "package.module:factory"),
    ("thirdparty:make-it", "package.module:factory"),
])
def test_broken_contracts_are_refused(third_party: Path, arch: str, message: str) -> None:
    task = tasks.make("bijection", V=4, L=4)
    with pytest.raises(InvalidValue, match=message):
        models.make(arch, task)


def test_a_readout_learning_rate_needs_a_windtunnel_readout(third_party: Path) -> None:
    """A user's module has no ``norm``/``head`` skeleton: a readout multiplier is refused before training."""
    from windtunnel.training.loop import TrainConfig, build

    cfg = TrainConfig(task="bijection", task_params={"V": 4, "L": 4}, arch="thirdparty:make", readout_lr_mult=3.0)
    with pytest.raises(InvalidValue, match="no separate readout"):
        build(cfg)
    build(TrainConfig(task="bijection", task_params={"V": 4, "L": 4}, arch="thirdparty:make"))


def test_the_main_job_runs_a_user_model_without_the_readout_multiplier(
        third_party: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from windtunnel.run import grid

    assert main(["run", "--arch", "thirdparty:make", "--steps", "2", "--n", "16", "--out", str(third_party / "m"), "--no-progress", "--no-analyze"]) == 0
    train = json.loads((third_party / "m" / "config.json").read_text())["train"]
    assert train["readout_lr_mult"] == 1.0 and train["lr"] == grid.MAIN_JOB_LR


def test_a_target_the_factory_cannot_take_is_refused(third_party: Path) -> None:
    task = tasks.make("bijection", V=4, L=4)
    with pytest.raises(InvalidValue, match="takes no 'params'"):
        models.make("thirdparty:no_params", task, params=5000)
    models.make("thirdparty:no_params", task)  # without a target it is built as it is
    with pytest.raises(InvalidValue, match="within 3%"):  # accepting the target is not enough: it is checked
        models.make("thirdparty:ignores_target", task, params=50_000)


@pytest.mark.slow
def test_train_resume_and_table_through_the_cli(third_party: Path, capsys: pytest.CaptureFixture) -> None:
    out = third_party / "run"
    args = ["train", "--task", "bijection", "--V", "4", "--L", "4", "--arch", "thirdparty:make", "--params", "3000",
            "--steps", "20", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["train"]["arch"] == cfg["model"]["arch"] == "thirdparty:make"
    assert main(["train", "--resume", str(out), "--steps", "30", "--no-progress"]) == 0
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_00000030"
    assert main(["eval", str(out), "--n", "64"]) == 0
    result = json.loads((out / "eval.json").read_text())
    assert 0 <= result["metrics"]["kl"]["value"] < 10
    assert main(["analyze", str(out), "--n", "32"]) == 0  # a GRU without layers under blocks: each says what it lacks
    geometry = json.loads((out / "geometry.json").read_text())
    outputs_only = {"reference_predictors"}  # reads nothing but the model's outputs over its checkpoints
    assert all(str(v).startswith("not applicable") for k, v in geometry["summary"].items()
               if k.split(".")[0] not in outputs_only), \
        geometry["summary"]
    assert geometry["reference_predictors"]["series"][-1]["step"] == 30
    capsys.readouterr()
    assert main(["train", "--task", "bijection", "--arch", "thirdparty:peeking", "--steps", "5",
                 "--out", str(third_party / "bad"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not causal" in err
    assert not (third_party / "bad" / "config.json").exists()

    table_out = third_party / "table"
    md = run_table(preset="quick", archs=["lstm", "thirdparty:make"], tasks=["bijection"], out=table_out,
                   workers=2, steps=10, eval_n=32, seeds=1, params=20000)
    table = json.loads((table_out / "table.json").read_text())
    cells = {c["arch"]: c for c in table["cells"]}
    assert set(cells) == {"lstm", "thirdparty:make"}
    assert abs(cells["thirdparty:make"]["params"] - 20000) <= 600
    assert "thirdparty:make" in md.read_text()


@pytest.mark.slow
def test_the_console_script_finds_a_module_in_the_current_folder(third_party: Path) -> None:
    exe = Path(sys.executable).with_name("windtunnel")
    if not exe.exists():
        pytest.skip("console script not installed")
    env = dict(os.environ, PYTHONPATH="")
    cmd = [str(exe), "train", "--task", "coin", "--arch", "thirdparty:make", "--steps", "3", "--out", "r", "--no-progress"]
    proc = subprocess.run(cmd, cwd=third_party, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((third_party / "r" / "config.json").read_text())["model"]["arch"] == "thirdparty:make"


def test_the_authors_transformer_enters_as_a_factory_at_its_published_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """``benchmarks/authors_tinygpt.py`` (the time-to-Bayes comparison's other model) passes the protocol's
    checks, has the papers' 2.67M parameters at V = 20, and reads its logits off the value tokens' embeddings."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    task = tasks.make("bijection", V=20, L=19)
    torch.manual_seed(0)
    model = models.make("benchmarks.authors_tinygpt:tinygpt", task)
    assert sum(p.numel() for p in model.parameters()) == 2_677_248
    net = model.net
    ep = task.sample(3, seed=1)
    logits = model(ep.tokens)
    assert logits.shape == (3, task.seq_len, task.n_classes)
    hidden = {}
    handle = net.norm.register_forward_hook(lambda m, i, o: hidden.setdefault("x", o))
    net(ep.tokens)
    handle.remove()
    torch.testing.assert_close(logits, hidden["x"] @ net.tok_emb.weight[task.V:].T)


def test_a_skeleton_subclass_from_the_users_file_gets_what_the_transformer_gets(third_party: Path) -> None:
    """A ``Transformer`` subclass defined in the user's module and returned by a factory keeps its layers'
    hook names and methods: every diagnostic that applies to the built-in transformer applies to it."""
    from windtunnel.geometry import registry

    task = tasks.make("bijection", V=4, L=4)
    model = models.make("thirdparty:skeleton", task)
    builtin = models.make("transformer", task, d_model=16, n_layers=2, n_heads=2)
    assert set(builtin.hook_names()) <= set(model.hook_names())
    assert model.capabilities() == builtin.capabilities()
    diagnostics = registry.discover().values()
    assert {d.name for d in diagnostics if d.applies(model)} == {d.name for d in diagnostics if d.applies(builtin)}
    ep = task.sample(2, 0)
    keys = model.unrotated_keys(ep.tokens)
    assert len(keys) == 2 and keys[0].shape == (2, task.seq_len, 2, 8)
