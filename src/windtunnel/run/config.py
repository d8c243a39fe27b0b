"""What a training run is: ``TrainConfig``, the fields that rebuild its task, model and optimiser
(written to the run folder as ``config.json``), validated when it is made, the TOML/JSON file
that holds one, the device a run trains on (``pick_device``) and the
thread count a cell worked in the calling process leaves behind (``threads_kept``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

from .. import models
from ..errors import UserError, did_you_mean, is_int, is_real


class ConfigError(UserError, ValueError):
    """A bad configuration key or value (the CLI turns it into one line and exit status 2)."""


@dataclass
class TrainConfig:
    """Everything needed to rebuild the task, the model and the optimiser (saved as config.json)."""

    task: str = "bijection"
    task_params: dict[str, Any] = field(default_factory=dict)
    arch: str = "transformer"
    params: int | None = None  # target parameter count (capacity matching); None: arch defaults
    model: dict[str, Any] = field(default_factory=dict)  # overrides: d_model, n_layers, n_heads, ...
    steps: int = 2000
    batch_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-5
    warmup: int = 100
    weight_decay: float = 0.01
    beta2: float = 0.98
    grad_clip: float = 1.0
    #: the readout (final norm and output head, ``readout_parameters()``) trains at this multiple of
    #: the learning rate: the logit gap that drives the mass on eliminated values to 0 is bounded by
    #: the head's norm, which grows at a rate the learning rate sets
    readout_lr_mult: float = 1.0
    loss: str = "auto"  # auto | targets | posterior
    seed: int = 0
    log_every: int = 25
    eval_every: int = 250
    eval_n: int = 512
    ckpt_every: int = 250
    #: also checkpoint once this many minutes of training have passed since the last checkpoint (0: off),
    #: so that a killed run loses at most that much however far apart ``ckpt_every`` steps are; such a
    #: checkpoint is removed once a newer one is whole and never counts among the ``keep_last``, so a
    #: finished run keeps the same checkpoints whatever its speed
    ckpt_minutes: float = 10.0
    keep_last: int = 2
    log_checkpoints: bool = True  # keep checkpoints at ~log-spaced steps (training dynamics)
    device: str = "auto"  # auto | cpu | cuda | mps
    compile: bool = False
    bf16: str = "auto"  # auto (on CUDA) | on | off
    progress: bool = True
    #: stages ``[{"until": step, "task_params": {...}}, ...]``: before step ``until`` the batches come
    #: from the task with those parameters changed (evaluation always uses the task itself)
    curriculum: list[dict[str, Any]] = field(default_factory=list)
    #: shards of each step's batch, each drawn from its own stream; 0: one per process (data parallel)
    data_shards: int = 0
    #: a fixed training set of this many episodes, sampled once from the run's seed, each step's batch
    #: drawn from it uniformly (with replacement); ``None``: fresh episodes every step (the default, so
    #: nothing can be memorised).  The data-regime control: the authors' recipes train epochs over a fixed set
    train_set: int | None = None
    #: experiment trackers that mirror ``metrics.jsonl``: any of ``tensorboard``, ``wandb``, ``mlflow``
    #: (``windtunnel.run.trackers``; each package imported only when named here)
    trackers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def need(cond: bool, key: str, allowed: str) -> None:
            if not cond:
                raise ConfigError(f"invalid config value for {key!r}: must be {allowed}, got {getattr(self, key)!r}")

        for f in dataclasses.fields(self):  # the type first: no `true` for a count, no "no" for a flag
            kind = _KINDS[str(f.type)]
            need(_is_kind(getattr(self, f.name), kind), f.name, _KIND_WORDS[kind])

        need(isinstance(self.task, str), "task", "a task name")
        need(isinstance(self.task_params, dict), "task_params", "a table of task parameters")
        need(isinstance(self.arch, str) and (self.arch in models.names() or models.is_external(self.arch)), "arch",
             f"one of {', '.join(models.names())} or package.module:factory"
             + (did_you_mean(self.arch, models.names()) if isinstance(self.arch, str) else ""))
        if models.is_external(self.arch):
            models.load_factory(self.arch)  # importable now, not after the run folder is written
        need(self.params is None or (isinstance(self.params, int) and self.params >= 1000), "params", "an integer ≥ 1000")
        need(isinstance(self.model, dict), "model", "a table of model overrides")
        for key in ("steps", "batch_size", "log_every", "eval_every", "eval_n", "ckpt_every"):
            need(isinstance(getattr(self, key), int) and getattr(self, key) >= 1, key, "a positive integer")
        need(isinstance(self.warmup, int) and self.warmup >= 0, "warmup", "an integer ≥ 0")
        need(isinstance(self.keep_last, int) and self.keep_last >= 1, "keep_last", "an integer ≥ 1")
        need(isinstance(self.ckpt_minutes, (int, float)) and not isinstance(self.ckpt_minutes, bool)
             and 0 <= self.ckpt_minutes < float("inf"), "ckpt_minutes", "a number of minutes ≥ 0 (0: off)")
        need(isinstance(self.lr, (int, float)) and 0 < self.lr < 1, "lr", "a number in (0, 1)")
        need(isinstance(self.min_lr, (int, float)) and 0 <= self.min_lr <= self.lr, "min_lr", "a number in [0, lr]")
        need(isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0, "weight_decay", "≥ 0")
        need(isinstance(self.beta2, (int, float)) and 0 < self.beta2 < 1, "beta2", "in (0, 1)")
        need(isinstance(self.grad_clip, (int, float)) and self.grad_clip > 0, "grad_clip", "a positive number")
        need(is_real(self.readout_lr_mult)
             and 0 < self.readout_lr_mult <= 100, "readout_lr_mult", "a number in (0, 100]")
        need(self.loss in ("auto", "targets", "posterior"), "loss", "auto, targets or posterior")
        need(isinstance(self.seed, int) and 0 <= self.seed < 2**31, "seed", "an integer in [0, 2^31)")
        need(self.device in ("auto", "cpu", "cuda", "mps") or str(self.device).startswith("cuda:"), "device", "auto, cpu, cuda or mps")
        need(self.bf16 in ("auto", "on", "off"), "bf16", "auto, on or off")
        if isinstance(self.device, str) and self.device.startswith("cuda"):
            index = int(self.device.split(":")[1]) if self.device.startswith("cuda:") and self.device[5:].isdigit() else 0
            need(self.device == "cuda" or self.device[5:].isdigit(), "device", "cuda or cuda:N")
            need(torch.cuda.is_available() and index < torch.cuda.device_count(), "device",
                 f"a CUDA device this machine has ({torch.cuda.device_count()} visible)")
        if self.device == "mps":
            need(getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available(), "device",
                 "a device this machine has (no MPS here)")
        need(is_int(self.data_shards) and self.data_shards >= 0,
             "data_shards", "an integer ≥ 0 (0: one shard per process)")
        need(self.data_shards == 0 or self.batch_size % self.data_shards == 0, "data_shards",
             f"a divisor of batch_size {self.batch_size}")
        need(self.train_set is None or (is_int(self.train_set)
                                        and self.train_set >= 1), "train_set", "a positive integer or none")
        need(self.train_set is None or not self.curriculum, "train_set",
             "none when a curriculum is given (a fixed set has one task's episodes)")
        from .trackers import TRACKERS

        need(all(t in TRACKERS for t in self.trackers) and len(set(self.trackers)) == len(self.trackers), "trackers",
             f"a list of distinct names from {', '.join(TRACKERS)}")
        stages_ok = isinstance(self.curriculum, list) and all(
            isinstance(s, dict) and set(s) == {"until", "task_params"} and is_int(s["until"]) and isinstance(s["task_params"], dict)
            for s in self.curriculum
        )
        need(stages_ok, "curriculum", 'a list of {"until": step, "task_params": {...}} stages')
        untils = [s["until"] for s in self.curriculum]
        need(all(a < b for a, b in zip([0] + untils, untils)) and all(u <= self.steps for u in untils),
             "curriculum", "stages with increasing 'until' steps in [1, steps]")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        allowed = {f.name for f in dataclasses.fields(cls)}
        for key in d:
            if key not in allowed:
                raise ConfigError(f"unknown config key {key!r}: allowed {', '.join(sorted(allowed))}")
        try:
            return cls(**d)
        except TypeError as exc:
            raise ConfigError(str(exc)) from exc

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


NOT_THE_RECIPE = ("progress", "trackers", "ckpt_minutes", "device", "compile")
"""``TrainConfig`` fields that say how a run is watched, kept and where and how it computes, not what it trains: a run
resumed or reused with other values of these is the same run (a cell trained on a GPU is the grid's cell, and
resumes on a CPU; a compiled model is the same model, its sums in another order)."""


@contextlib.contextmanager
def threads_kept() -> Iterator[None]:
    """Run the block, then give torch back the intra-op thread count it had before.

    A cell's work sets the count its recipe asks for; where that work runs in the calling process (one worker) the
    count must not outlive it — a caller left with two threads on a core that is already busy runs every later
    small step several times slower (threads spinning on each other)."""
    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)


def pick_device(name: str) -> torch.device:
    """The device a run trains on: ``auto`` picks this process's GPU (``LOCAL_RANK``), else MPS, else the CPU;
    ``cuda`` without an index is this process's GPU too (``torch.cuda.set_device`` needs an index)."""
    if name == "cuda" and torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def recipe(fields: dict[str, Any]) -> dict[str, Any]:
    """What a run trains, from ``TrainConfig`` fields: every field at its value (fields added since the run was
    made at their defaults), those of :data:`NOT_THE_RECIPE` left out — before validation, so a device this
    machine lacks is no error."""
    kept = TrainConfig.from_dict({k: v for k, v in fields.items() if k not in NOT_THE_RECIPE}).to_dict()
    return {k: v for k, v in kept.items() if k not in NOT_THE_RECIPE}


_KINDS = {"str": "str", "int": "int", "float": "float", "bool": "bool", "int | None": "int?",
          "dict[str, Any]": "table", "list[dict[str, Any]]": "list", "list[str]": "list"}
"""Each ``TrainConfig`` annotation and the kind of value it admits (a new field of another type fails the
test suite until it is named here)."""
_KIND_WORDS = {"str": "a string", "int": "an integer", "float": "a finite number", "bool": "true or false",
               "int?": "an integer or none", "table": "a table", "list": "a list"}


def _is_kind(value: Any, kind: str) -> bool:
    """Whether ``value`` is of ``kind`` exactly: a bool is not an integer, a string is not a bool."""
    import math

    if kind == "int?":
        return value is None or _is_kind(value, "int")
    if isinstance(value, bool):
        return kind == "bool"
    return {"str": isinstance(value, str) and value != "",
            "int": isinstance(value, int),
            "float": isinstance(value, (int, float)) and math.isfinite(value),
            "bool": False,
            "table": isinstance(value, dict),
            "list": isinstance(value, list)}[kind]


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML or JSON config file into a dict (validation happens in ``TrainConfig``)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            try:
                import tomllib  # type: ignore[import-not-found]
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            return tomllib.loads(text)
        data = json.loads(text)
    except Exception as exc:
        raise ConfigError(f"config file {path} is not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table of TrainConfig fields, not a {type(data).__name__}")
    return data
