r"""The data a run trains on, and its share under data parallelism.

No fixed dataset: every step draws fresh episodes, so nothing can be memorised, and the data of a
step is a pure function of ``(seed, step)`` — which makes resuming exact.  The step's batch is
``data_shards`` shards, shard ``j`` from its own stream ``stream_seed(seed, step, j)``; under
``torchrun`` with ``W`` processes, rank ``r`` takes shards ``r·S/W … (r+1)·S/W − 1``.  A
``curriculum`` trains the first steps on easier variants of the task.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict

import torch

from ..run.runs import RunDir
from ..tasks.base import Episodes, Task, physical_memory
from ..run.config import ConfigError, TrainConfig


def _hashed_seed(*parts: object) -> int:
    """A 64-bit seed with the top bit set: disjoint from every small user-facing seed
    (the evaluation's ``EVAL_SEED``, ``tasks show --seed 0``) and, up to hash collisions, from each other."""
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
    shard_seeds = [stream_seed(cfg.seed, step, j) for j in range(rank * own, (rank + 1) * own)]
    if cfg.train_set is not None:  # rows of the fixed set, chosen by the same per-shard streams
        data = training_set(cfg, task)
        parts = [data[torch.randint(len(data), (per,), generator=torch.Generator().manual_seed(s))] for s in shard_seeds]
    else:
        source = curriculum_task(cfg, task, step)
        parts = [source.sample(per, s) for s in shard_seeds]
    return parts[0] if len(parts) == 1 else Episodes.cat(parts)


class TrainingSets:
    """The fixed training sets of the runs a process trains, each sampled once and kept while memory allows.

    A stack trains several runs with fixed sets at once and asks for each member's set on every step, member after
    member: a cache of one set would sample every member's set anew on every step (10,000 HMM episodes a member, host
    work as long as a recorded GPU step).  Sets are kept, least recently used dropped first, while their estimated
    size (:func:`windtunnel.tasks.base.check_memory`'s ``n·T·(8C + 32)`` bytes, the posterior included) stays under
    ``budget`` bytes; the newest set is always kept.  ``draws`` counts the sets sampled."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.draws = 0
        self._sets: OrderedDict[tuple[str, str, int, int], tuple[Episodes, int]] = OrderedDict()

    def get(self, cfg: TrainConfig, task: Task) -> Episodes:
        n = int(cfg.train_set or 0)
        key = (task.name, json.dumps(task.params(), sort_keys=True, default=str), cfg.seed, n)
        if key in self._sets:
            self._sets.move_to_end(key)
            return self._sets[key][0]
        data = task.sample(n, _hashed_seed("train_set", cfg.seed))
        self.draws += 1
        self._sets[key] = (data, n * task.seq_len * (8 * task.n_classes + 32))
        while len(self._sets) > 1 and sum(size for _, size in self._sets.values()) > self.budget:
            self._sets.popitem(last=False)
        return data

    def clear(self) -> None:
        """Forget every set (what a new process starts with)."""
        self._sets.clear()

    def __len__(self) -> int:
        return len(self._sets)


TRAINING_SETS = TrainingSets(budget=(physical_memory() // 8) or 2**31)
"""This process's fixed training sets: up to an eighth of the machine's memory (2 GiB where it is not known)."""


def training_set(cfg: TrainConfig, task: Task) -> Episodes:
    """The run's fixed training set (``cfg.train_set`` episodes): sampled once from a stream of its own,
    ``_hashed_seed("train_set", seed)``, so it is the same in every process and after a resume, and
    disjoint from the fresh-episode streams and the evaluation episodes.  Kept in memory (:data:`TRAINING_SETS`:
    every member's set of a stack, as memory allows)."""
    return TRAINING_SETS.get(cfg, task)


def resolve_shards(cfg: TrainConfig, run: RunDir, resume: bool, world: int) -> int:
    """The shard count of a run: the one its latest checkpoint trained with (a resumed run keeps its
    data stream whatever the process count), else ``data_shards``, else one per process.
    ``ConfigError`` unless the process count divides it."""
    shards = cfg.data_shards or world
    found = run.latest_checkpoint() if resume else None
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


def curriculum_task(cfg: TrainConfig, task: Task, step: int) -> Task:
    """The task whose episodes train step ``step``: the first curriculum stage with ``step < until``
    (``task`` with that stage's parameters changed), else ``task`` itself."""
    for stage in cfg.curriculum:
        if step < stage["until"]:
            return task.replace(**stage["task_params"])
    return task


def _global_means(means: list[float], count: float, device: torch.device) -> list[float]:
    """Means over every process's positions, from each process's ``means`` over its ``count`` positions."""
    sums = torch.tensor([*(m * count for m in means), count], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(sums)
    return [float(x / sums[-1]) for x in sums[:-1]]
