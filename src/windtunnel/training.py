"""The training loop, readable top to bottom.

``train(config, out_dir)`` trains one model on one wind tunnel:

1. build the task and the model (``models.make``, capacity-matched when ``params`` is set);
2. every step draws a *fresh* batch (``step_batch``): ``batch_size`` episodes in ``data_shards`` equal
   shards, shard ``j`` sampled with ``seed=stream_seed(seed, step, j)`` — no fixed dataset, so
   nothing can be memorised, and the data of step ``s`` is a pure function of ``(seed, s)``, which
   makes resuming exact; an optional ``curriculum`` trains the first steps on easier variants of
   the task (``curriculum_task``);
3. loss: cross-entropy against ``targets`` or, for soft-target tasks (``loss="posterior"``), the
   soft cross-entropy ``-Σ_c p*(c) log q(c)`` against the exact posterior (Paper I's HMM loss);
4. AdamW, linear warmup then cosine decay to ``min_lr``, gradient clipping;
5. logs ``loss`` and the **Bayes gap** (``metrics.bayes_gap``) — ``KL(posterior ‖ model)`` in bits on the same batch,
   i.e. the excess cross-entropy over the Bayes oracle — to ``metrics.jsonl`` and the progress bar;
6. evaluates on a fixed held-out batch every ``eval_every`` steps;
7. checkpoints atomically (``checkpoint.py``) every ``ckpt_every`` steps and at log-spaced steps
   (kept for the training-dynamics analyses); a NaN/Inf loss stops the run with a clear message
   and leaves the last good checkpoint in place.

Data parallel: launched under ``torchrun`` with ``W`` processes the same code wraps the model in
DDP.  ``batch_size`` stays the *global* batch: rank ``r`` draws shards ``r·S/W … (r+1)·S/W − 1`` of
the step's ``S = data_shards`` shards (``data_shards = 0``, the default, means one shard per
process), the loss is normalised by the global number of scored positions, and only rank 0
writes.  So a ``W``-process run trains on exactly the data, and takes exactly the steps, of a
one-process run with ``data_shards = S`` (equal up to float summation order), and a run killed
under one process count resumes exactly under any count that divides ``S`` (the shard count is
kept in every checkpoint).  A single process is the degenerate case ``W = 1``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from . import checkpoint as ckpt
from .metrics import bayes_gap
from . import models, tasks
from .errors import InvalidValue, UserError
from .runs import RunDir, RunError
from .tasks.base import Episodes, Task

LOG2E = 1.0 / math.log(2.0)


class ConfigError(UserError, ValueError):
    """A bad configuration key or value (the CLI turns it into one line and exit status 2)."""


class TrainingDiverged(UserError, RuntimeError):
    """The loss or the weights became NaN or infinite (no checkpoint of that state is written)."""


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

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def need(cond: bool, key: str, allowed: str) -> None:
            if not cond:
                raise ConfigError(f"invalid config value for {key!r}: must be {allowed}, got {getattr(self, key)!r}")

        need(isinstance(self.task, str), "task", "a task name")
        need(isinstance(self.task_params, dict), "task_params", "a table of task parameters")
        need(isinstance(self.arch, str) and (self.arch in models.names() or models.is_external(self.arch)), "arch",
             f"one of {', '.join(models.names())} or package.module:factory")
        if models.is_external(self.arch):
            models.load_factory(self.arch)  # importable now, not after the run folder is written
        need(self.params is None or (isinstance(self.params, int) and self.params >= 1000), "params", "an integer ≥ 1000")
        need(isinstance(self.model, dict), "model", "a table of model overrides")
        for key in ("steps", "batch_size", "log_every", "eval_every", "eval_n", "ckpt_every"):
            need(isinstance(getattr(self, key), int) and getattr(self, key) >= 1, key, "a positive integer")
        need(isinstance(self.warmup, int) and self.warmup >= 0, "warmup", "an integer ≥ 0")
        need(isinstance(self.keep_last, int) and self.keep_last >= 1, "keep_last", "an integer ≥ 1")
        need(isinstance(self.lr, (int, float)) and 0 < self.lr < 1, "lr", "a number in (0, 1)")
        need(isinstance(self.min_lr, (int, float)) and 0 <= self.min_lr <= self.lr, "min_lr", "a number in [0, lr]")
        need(isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0, "weight_decay", "≥ 0")
        need(isinstance(self.beta2, (int, float)) and 0 < self.beta2 < 1, "beta2", "in (0, 1)")
        need(isinstance(self.grad_clip, (int, float)) and self.grad_clip > 0, "grad_clip", "a positive number")
        need(isinstance(self.readout_lr_mult, (int, float)) and not isinstance(self.readout_lr_mult, bool)
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
        need(isinstance(self.data_shards, int) and not isinstance(self.data_shards, bool) and self.data_shards >= 0,
             "data_shards", "an integer ≥ 0 (0: one shard per process)")
        need(self.data_shards == 0 or self.batch_size % self.data_shards == 0, "data_shards",
             f"a divisor of batch_size {self.batch_size}")
        stages_ok = isinstance(self.curriculum, list) and all(
            isinstance(s, dict) and set(s) == {"until", "task_params"} and isinstance(s["until"], int)
            and not isinstance(s["until"], bool) and isinstance(s["task_params"], dict)
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


# --- pieces of the loop ---------------------------------------------------------------------


def _hashed_seed(*parts: object) -> int:
    """A 64-bit seed with the top bit set: disjoint from every small user-facing seed
    (``evaluate(seed=12345)``, ``tasks show --seed 0``) and, up to hash collisions, from each other."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") | (1 << 63)


def stream_seed(seed: int, step: int, shard: int = 0) -> int:
    """The data seed of one training step's shard (one stream per run seed and shard)."""
    return _hashed_seed("train", seed, shard, step)


def process_group() -> tuple[int, int]:
    """``(rank, world size)`` of this process: torchrun's ``RANK``/``WORLD_SIZE``, ``(0, 1)`` alone."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def step_batch(cfg: TrainConfig, task: Task, step: int, shards: int, rank: int = 0, world: int = 1) -> Episodes:
    """The episodes process ``rank`` of ``world`` trains on at ``step``.

    The step's global batch is ``shards`` shards of ``batch_size / shards`` episodes, shard ``j``
    drawn from ``stream_seed(seed, step, j)`` (from the curriculum's task where one applies); the
    process takes the ``shards / world`` consecutive shards starting at ``rank · shards / world``.
    With one shard and one process this is ``task.sample(batch_size, stream_seed(seed, step))``.
    """
    per, own = cfg.batch_size // shards, shards // world
    source = curriculum_task(cfg, task, step)
    parts = [source.sample(per, stream_seed(cfg.seed, step, j)) for j in range(rank * own, (rank + 1) * own)]
    return parts[0] if len(parts) == 1 else Episodes.cat(parts)


def resolve_shards(cfg: TrainConfig, run: RunDir, resume: bool, world: int) -> int:
    """The shard count of a run: the one its latest checkpoint trained with (a resumed run keeps its
    data stream whatever the process count), else ``data_shards``, else one per process.
    ``ConfigError`` unless the process count divides it."""
    shards = cfg.data_shards or world
    found = ckpt.find_latest(run.checkpoints) if resume else None
    if found is not None:
        try:
            shards = int(json.loads((found / "state.json").read_text()).get("data_shards", shards))
        except (OSError, ValueError, TypeError):
            pass  # an unreadable state.json is reported by the checkpoint loader
    if shards % world or cfg.batch_size % shards:
        raise ConfigError(f"invalid data_shards: {world} processes need a shard count they divide that divides "
                          f"batch_size {cfg.batch_size}; this run has {shards} shards")
    return shards


def eval_seed(seed: int) -> int:
    """The seed of the fixed held-out batch evaluated during training."""
    return _hashed_seed("eval", seed)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup for ``warmup`` steps, then cosine from ``lr`` to ``min_lr`` at ``steps``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


def param_groups(model: torch.nn.Module, cfg: TrainConfig) -> list[dict[str, Any]]:
    """AdamW's parameter groups: weight decay on matrices only (vectors, gains and parameters
    flagged ``_no_weight_decay``, Mamba's ``A_log`` and ``D``, are exempt); with
    ``readout_lr_mult != 1`` the readout (``model.readout_parameters()``) forms groups of its own
    whose ``lr_mult`` scales the scheduled learning rate.  With the multiplier at 1 the groups are
    the two of every earlier run, so their checkpoints resume unchanged."""
    def decays(p: torch.nn.Parameter) -> bool:
        return p.dim() >= 2 and not getattr(p, "_no_weight_decay", False)

    readout = {id(p) for p in model.readout_parameters()} if cfg.readout_lr_mult != 1 else set()
    groups = []
    for mult, members in ((1.0, [p for p in model.parameters() if id(p) not in readout]),
                          (float(cfg.readout_lr_mult), [p for p in model.parameters() if id(p) in readout])):
        if members:
            groups += [{"params": [p for p in members if decays(p)], "weight_decay": cfg.weight_decay, "lr_mult": mult},
                       {"params": [p for p in members if not decays(p)], "weight_decay": 0.0, "lr_mult": mult}]
    return groups


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def loss_fn(logits: torch.Tensor, ep: Episodes, soft: bool, n_scored: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy (nats) over scored positions, against targets or the soft posterior.

    ``n_scored``: divide the summed cross-entropy by this count instead of the batch's own (a data-
    parallel shard divides by the global count, so the mean over processes is the global mean).
    """
    logits = logits.float()
    if soft:
        logq = F.log_softmax(logits, dim=-1)
        ce = -(ep.posterior.to(logq.dtype) * logq).sum(-1)
        return (ce * ep.mask).sum() / (ep.mask.sum() if n_scored is None else n_scored)
    flat_logits, flat_targets = logits.reshape(-1, logits.shape[-1]), ep.targets.reshape(-1)
    if n_scored is None:
        return F.cross_entropy(flat_logits, flat_targets, ignore_index=-100)
    return F.cross_entropy(flat_logits, flat_targets, ignore_index=-100, reduction="sum") / n_scored


def log_spaced_steps(total: int) -> set[int]:
    """Steps 1, 2, 5, 10, 20, 50, … ≤ total: the checkpoints kept for dynamics analyses."""
    out, base = set(), 1
    while base <= total:
        for m in (1, 2, 5):
            if m * base <= total:
                out.add(m * base)
        base *= 10
    return out


def curriculum_task(cfg: TrainConfig, task: Task, step: int) -> Task:
    """The task whose episodes train step ``step``: the first curriculum stage with ``step < until``
    (``task`` with that stage's parameters changed), else ``task`` itself."""
    for stage in cfg.curriculum:
        if step < stage["until"]:
            return task.replace(**stage["task_params"])
    return task


def build(cfg: TrainConfig) -> tuple[Task, torch.nn.Module]:
    """The task and the (untrained, seeded) model a config describes."""
    try:
        task = tasks.make(cfg.task, **cfg.task_params)
        for stage in cfg.curriculum:
            task.replace(**stage["task_params"])  # validate every stage before training starts
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"curriculum: {exc}" if isinstance(exc, TypeError) else str(exc)) from exc
    from .tasks.base import check_memory, physical_memory

    # weights, gradients and two AdamW moments: 16 bytes a parameter in float32
    if cfg.params is not None and physical_memory() and 16 * cfg.params > physical_memory() // 2:
        raise ConfigError(f"invalid params: {cfg.params} parameters need ≈{16 * cfg.params / 2**30:.0f} GiB to train, "
                          f"more than half of this machine's {physical_memory() / 2**30:.0f} GiB")
    check_memory(task, cfg.batch_size, "batch_size")
    check_memory(task, cfg.eval_n, "eval_n")
    torch.manual_seed(cfg.seed)
    try:
        model = models.make(cfg.arch, task, params=cfg.params, **cfg.model)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if cfg.readout_lr_mult != 1:
        model.readout_parameters()  # a model without a separate readout says so now, not mid-run
    return task, model


# --- the loop -------------------------------------------------------------------------------


def train(cfg: TrainConfig, out_dir: str | Path | RunDir, resume: bool = False, until: int | None = None) -> Path:
    """Train (or resume) a run in ``out_dir``; returns the run folder.

    ``until``: stop (with a checkpoint) after that step although the schedule runs to
    ``cfg.steps`` — an interruption on purpose; resuming continues exactly where it stopped.
    """
    run = out_dir if isinstance(out_dir, RunDir) else RunDir(out_dir)
    rank, world = process_group()
    main_proc = rank == 0
    device = pick_device(cfg.device)
    task, model = build(cfg)  # every user error is raised here, before anything is written
    shards = resolve_shards(cfg, run, resume, world)
    if main_proc:
        run.prepare()
    with (run.lock() if main_proc else contextlib.nullcontext()):
        return _train_locked(cfg, run, task, model, device, resume, until, shards, rank, world)


def _train_locked(cfg: TrainConfig, run: RunDir, task: Task, model: torch.nn.Module, device: torch.device,
                  resume: bool, until: int | None, shards: int, rank: int, world: int) -> Path:
    ddp, main_proc = world > 1, rank == 0
    own_group = ddp and not torch.distributed.is_initialized()
    if own_group:
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    soft = cfg.loss == "posterior" or (cfg.loss == "auto" and task.soft_targets)
    model.to(device)
    optimizer = torch.optim.AdamW(param_groups(model, cfg), lr=cfg.lr, betas=(0.9, cfg.beta2))

    start = 0
    elapsed = 0.0
    ckpt_root = run.checkpoints
    if resume:
        found = ckpt.find_latest(ckpt_root)
        if found is not None:
            state = ckpt.load(found, model, optimizer)
            start = int(state["step"])
            elapsed = float(state.get("elapsed", 0.0))
            ckpt.set_rng_state(state["rng"])
        elif ckpt.list_checkpoints(ckpt_root):
            raise ckpt.CheckpointError(
                f"cannot resume {run.path}: none of its checkpoints can be read; nothing was changed "
                "(start over with --force, or another folder)"
            )
        if main_proc:
            run.truncate_metrics(start)  # also drops lines logged before a kill that preceded any checkpoint
    if main_proc:
        run.write_config({
            "train": cfg.to_dict(),
            "task": {"name": task.name, "params": task.params()},
            "model": model.config_dict(),
            "n_params": model.n_params(),
        })

    net: torch.nn.Module = model
    if cfg.compile:
        net = torch.compile(model)  # type: ignore[assignment]
    if ddp:
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    use_bf16 = cfg.bf16 == "on" or (cfg.bf16 == "auto" and device.type == "cuda")

    eval_batch = task.sample(cfg.eval_n, eval_seed(cfg.seed)).to(device)
    keep_steps = (log_spaced_steps(cfg.steps) | {0}) if cfg.log_checkpoints else set()

    def save(step: int) -> None:
        bad = next((n for n, p in model.named_parameters() if not bool(torch.isfinite(p).all())), None)
        if bad is not None:  # never let `latest` point at weights that diverged
            raise TrainingDiverged(
                f"weights became non-finite ({bad}) by step {step}; stopped, last good checkpoint kept in {ckpt_root}"
            )
        if main_proc:
            ckpt.save(ckpt_root, step, model, optimizer,
                      {"elapsed": elapsed, "config": cfg.to_dict(), "data_shards": shards})
            ckpt.prune(ckpt_root, cfg.keep_last, keep_steps)

    if start == 0 and main_proc and cfg.log_checkpoints and not (ckpt_root / ckpt.LATEST).exists():
        save(0)  # the untrained model: the origin of every training-dynamics curve

    bar = None
    if cfg.progress and main_proc:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.steps, initial=start, desc=f"{cfg.arch}/{task.name}", dynamic_ncols=True)

    model.train()
    t0 = time.perf_counter()
    stop = cfg.steps if until is None else min(cfg.steps, until)
    for step in range(start, stop):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg) * group.get("lr_mult", 1.0)
        batch = step_batch(cfg, task, step, shards, rank, world).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            logits = net(**batch.inputs)
        n_scored = None
        if ddp:  # DDP averages gradients over processes: dividing by N/W makes the average Σ/N
            n_scored = batch.mask.sum().to(torch.float32)
            torch.distributed.all_reduce(n_scored)
            n_scored = n_scored / world
        loss = loss_fn(logits, batch, soft, n_scored)
        if not torch.isfinite(loss):
            if bar is not None:
                bar.close()
            raise TrainingDiverged(
                f"loss became {float(loss.detach())} at step {step}; stopped, last good checkpoint kept in {ckpt_root}"
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        done = step + 1

        if done % cfg.log_every == 0 or done == cfg.steps:
            loss_now, gap = float(loss.detach()), bayes_gap(logits.detach(), batch)
            if ddp:  # every process joins; rank 0 logs the global batch's means
                count = float(batch.mask.sum())
                loss_now, gap = _global_means([loss_now * float(n_scored) / count, gap], count, device)
        if main_proc and (done % cfg.log_every == 0 or done == cfg.steps):
            record = {
                "step": done,
                "loss": loss_now * LOG2E,  # bits
                "bayes_gap": gap,
                "lr": lr_at(step, cfg),
                "grad_norm": float(grad_norm),
                "time": elapsed + time.perf_counter() - t0,
            }
            run.append_metrics(record)
            if bar is not None:
                bar.set_postfix(loss=f"{record['loss']:.4f}", gap=f"{gap:.2e}")
        if main_proc and (done % cfg.eval_every == 0 or done == cfg.steps):
            run.append_metrics({"step": done, "eval": evaluate_batch(model, eval_batch)})
            model.train()
        if done % cfg.ckpt_every == 0 or done in (cfg.steps, stop) or done in keep_steps:
            elapsed_now = elapsed + time.perf_counter() - t0
            elapsed, t0 = elapsed_now, time.perf_counter()
            save(done)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    if ddp:
        # drop the DDP wrapper (its reducer holds gradient-bucket work on the group) before the group
        # is torn down, then let every process arrive: a process group destroyed under pending work
        # or a peer still in a collective is how gloo teardown hangs
        net = logits = loss = None  # type: ignore[assignment]
        torch.distributed.barrier()
    if own_group:
        torch.distributed.destroy_process_group()
    return run.path


def _global_means(means: list[float], count: float, device: torch.device) -> list[float]:
    """Means over every process's positions, from each process's ``means`` over its ``count`` positions."""
    sums = torch.tensor([*(m * count for m in means), count], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(sums)
    return [float(x / sums[-1]) for x in sums[:-1]]


@torch.no_grad()
def evaluate_batch(model: torch.nn.Module, ep: Episodes) -> dict[str, float]:
    """Metrics of ``model`` on a fixed batch (the periodic in-training evaluation)."""
    from .metrics import compute

    model.eval()
    logits = model(**ep.inputs).float().cpu()
    res = compute(logits, ep.to("cpu"))
    vals = res["values"]
    return {k: float(vals[k]) for k in ("entropy_mae_curve", "entropy_mae", "kl", "accuracy") if k in vals}


def load(run_dir: str | Path | RunDir, step: int | None = None) -> tuple[Task, torch.nn.Module]:
    """The task and trained model of a run folder (latest checkpoint, or ``step``)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    record = run.read_config()
    try:
        task = tasks.make(record["task"]["name"], **record["task"]["params"])
        model = models.build(record["model"])
    except (ValueError, TypeError) as exc:
        if models.is_external(record["model"]["arch"]):  # the user's factory, not the folder, is at fault
            raise InvalidValue(f"{run.path}: {exc}") from None
        raise RunError(f"{run.config_path} is damaged: {exc}") from None
    if step is None:
        found = ckpt.find_latest(run.checkpoints)
    else:
        found = run.checkpoints / f"step_{step:08d}"
        found = found if found.is_dir() else None
    if found is None:
        raise ckpt.CheckpointError(f"no complete checkpoint in {run.checkpoints}")
    ckpt.load(found, model)
    model.eval()
    return task, model
