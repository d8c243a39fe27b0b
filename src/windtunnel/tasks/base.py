"""The wind-tunnel contract: ``Task``, ``Episodes``, the registry and the Bayes oracle.

A *task* is a frozen dataclass of its parameters.  ``task.sample(n, seed)`` draws ``n``
independent episodes, vectorised over the batch, and attaches the exact Bayesian predictive
distribution (float64) at every scored position.  Conventions shared by every task:

* the network reads ``tokens[:, :t+1]`` (and ``features[:, :t+1]``) and its logits at position
  ``t`` are scored against ``posterior[:, t]`` and ``targets[:, t]``: nothing at or before ``t``
  reveals the target of ``t``;
* ``mask[:, t]`` marks the scored positions, ``targets`` is ``-100`` elsewhere and ``posterior``
  is a uniform placeholder row there (so every row is a distribution and logs stay finite);
* a task whose target is soft (the papers' HMM) sets ``soft_targets`` and is trained against
  ``posterior`` instead of ``targets``.

The posterior is always computed from the *model inputs alone* (``task.posterior(tokens,
features)``): the Bayes oracle is then a genuine model that sees what the network sees, and
``sample`` cannot accidentally leak latent information into the reference.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Iterator

import torch
from ..errors import InvalidValue, did_you_mean, is_int

IGNORE = -100
"""Target value at unscored positions (the ``ignore_index`` of ``torch.nn.functional.cross_entropy``)."""


@dataclass
class Episodes:
    """A batch of sampled episodes (torch tensors, batch first).

    ``tokens [B,T] long``, ``targets [B,T] long`` (``IGNORE`` off the mask), ``posterior
    [B,T,C] float64``, ``mask [B,T] bool``, ``latent`` (the hidden truth, task specific) and, for
    real-valued inputs, ``features [B,T,F] float32``.

    ``posterior`` may be given as a function of no arguments (a task's :meth:`Task.lazy_posterior`): it is then
    computed the first time it is read, and never where nothing reads it — a training step whose loss uses the
    sampled targets reads it only when a log line is due.  Slicing, concatenating and moving episodes keep it
    unread; :attr:`posterior_ready` says whether it has been computed.
    """

    tokens: torch.Tensor
    targets: torch.Tensor
    posterior: torch.Tensor
    mask: torch.Tensor
    latent: dict[str, Any] = field(default_factory=dict)
    features: torch.Tensor | None = None
    #: latent entries shared by the whole batch (e.g. fixed symbol means): never sliced or concatenated
    shared: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if callable(self.posterior):  # computed on first read (__getattr__), not now
            self.__dict__["_compute_posterior"] = self.__dict__.pop("posterior")

    def __getattr__(self, name: str) -> Any:
        # called only for an attribute the instance lacks: the posterior not yet computed
        compute = self.__dict__.get("_compute_posterior") if name == "posterior" else None
        if compute is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = compute()
        self.__dict__["posterior"] = value
        del self.__dict__["_compute_posterior"]
        return value

    @property
    def posterior_ready(self) -> bool:
        """Whether the posterior has been computed (or was given as a tensor)."""
        return "posterior" in self.__dict__

    def _later(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "torch.Tensor | Callable[[], torch.Tensor]":
        """``fn`` of the posterior: now if it is computed, else when it is first read."""
        return fn(self.posterior) if self.posterior_ready else (lambda: fn(self.posterior))

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def inputs(self) -> dict[str, torch.Tensor]:
        """Keyword arguments for a model's forward: ``tokens`` and, where present, ``features``."""
        out = {"tokens": self.tokens}
        if self.features is not None:
            out["features"] = self.features
        return out

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "Episodes":
        def lat(k: str, v: Any) -> Any:
            return fn(v) if isinstance(v, torch.Tensor) and k not in self.shared else v

        return Episodes(
            tokens=fn(self.tokens),
            targets=fn(self.targets),
            posterior=self._later(fn),
            mask=fn(self.mask),
            latent={k: lat(k, v) for k, v in self.latent.items()},
            features=None if self.features is None else fn(self.features),
            shared=self.shared,
        )

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Episodes":
        """The episodes on ``device``.  ``non_blocking`` (a training step's batch): to a GPU through page-locked
        host memory, queued behind the device's work instead of waiting for it, as an ordinary copy from a CPU
        tensor does (a host synchronisation every step); elsewhere the same as a plain copy."""
        def move(t: torch.Tensor) -> torch.Tensor:
            if non_blocking and t.device.type == "cpu" and torch.device(device).type == "cuda":
                return t.pin_memory().to(device, non_blocking=True)
            return t.to(device)

        out = self._map(move)
        out.latent.update({k: move(self.latent[k]) for k in self.shared if isinstance(self.latent.get(k), torch.Tensor)})
        return out

    def __getitem__(self, index: slice | torch.Tensor) -> "Episodes":
        """Select sequences (a slice or an index tensor); latent tensors batch-first are sliced too."""
        n = len(self)

        def pick(t: torch.Tensor) -> torch.Tensor:
            return t[index] if t.dim() > 0 and t.shape[0] == n else t

        return self._map(pick)

    def chunks(self, size: int) -> Iterator["Episodes"]:
        for i in range(0, len(self), size):
            yield self[i : i + size]

    @staticmethod
    def cat(parts: list["Episodes"]) -> "Episodes":
        parts = list(parts)  # an unread posterior is concatenated later: from these parts, whatever the caller's list
        first = parts[0]
        latent: dict[str, Any] = {}
        for k, v in first.latent.items():
            if isinstance(v, torch.Tensor) and k not in first.shared and v.dim() > 0 and v.shape[0] == len(first):
                latent[k] = torch.cat([p.latent[k] for p in parts])
            else:
                latent[k] = v
        return Episodes(
            tokens=torch.cat([p.tokens for p in parts]),
            targets=torch.cat([p.targets for p in parts]),
            posterior=(torch.cat([p.posterior for p in parts]) if all(p.posterior_ready for p in parts)
                       else lambda: torch.cat([p.posterior for p in parts])),
            mask=torch.cat([p.mask for p in parts]),
            latent=latent,
            features=None if first.features is None else torch.cat([p.features for p in parts]),
            shared=first.shared,
        )


def two_unused(present: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Two distinct values per row, drawn uniformly from those a row does not use (``present [B, V]``
    bool); ``None`` if some row uses all but one."""
    if int((~present).sum(1).min()) < 2:
        return None
    order = (torch.rand(present.shape, generator=g, dtype=torch.float64) + 2.0 * present.double()).argsort(1)
    return order[:, 0], order[:, 1]


def check(condition: bool, parameter: str, allowed: str) -> None:
    """Raise ``ValueError`` naming ``parameter`` and its allowed values unless ``condition``."""
    if not condition:
        raise InvalidValue(f"invalid {parameter}: must be {allowed}")


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded deterministically (sampling is always on CPU: reproducible everywhere)."""
    if not is_int(seed):
        raise InvalidValue(f"invalid seed: must be an integer, got {seed!r}")
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def entropy_bits(p: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in bits along the last axis, ``H(p) = -sum p log2 p`` with ``0 log 0 = 0``."""
    p = p.double()
    logp = torch.where(p > 0, torch.log2(p.clamp_min(1e-300)), torch.zeros_like(p))
    return -(p * logp).sum(-1)


@dataclass(frozen=True)
class Task:
    """Base class for a wind tunnel.  Subclasses are frozen dataclasses of their parameters.

    Subclasses implement ``validate``, ``sample``, ``posterior`` and the size properties.
    """

    name: ClassVar[str] = ""
    #: one line on what the task measures (shown by ``windtunnel tasks``)
    summary: ClassVar[str] = ""
    #: the parameters (over the defaults) of the task's small instance: a real instance, small enough that
    #: every test over the registry samples it in milliseconds; each task declares its own (no default here,
    #: so that a task without one fails the contract tests instead of being tested at full size)
    tiny: ClassVar[dict[str, Any]]

    def __post_init__(self) -> None:
        self.validate()

    # --- contract -------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ``ValueError`` naming the parameter and its allowed range."""

    @property
    def n_classes(self) -> int:
        """Number of output classes ``C`` of the predictive distribution."""
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        """Number of distinct input token ids."""
        raise NotImplementedError

    @property
    def seq_len(self) -> int:
        """Length ``T`` of a sampled episode."""
        raise NotImplementedError

    @property
    def soft_targets(self) -> bool:
        """Train against ``posterior`` (soft labels, the papers' HMM) instead of ``targets``."""
        return False

    @property
    def n_features(self) -> int:
        """Width ``F`` of real-valued ``features`` (0 when inputs are tokens only)."""
        return 0

    def sample(self, n: int, seed: int) -> Episodes:
        """Draw ``n`` episodes, deterministic in ``seed``, with exact float64 posteriors."""
        raise NotImplementedError

    def posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """Exact predictive ``[B,T,C]`` float64 from the model inputs (uniform rows off the mask)."""
        raise NotImplementedError

    def lazy_posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> Callable[[], torch.Tensor]:
        """:meth:`posterior` of these inputs as a function to call later (what ``sample`` gives :class:`Episodes`,
        which calls it when the posterior is first read).  The inputs are copied now, so editing the sampled
        tokens afterwards cannot change the posterior of the episodes as they were drawn."""
        tokens = tokens.clone()
        features = None if features is None else features.clone()
        return lambda: self.posterior(tokens, features)

    def scored_mask(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """Which positions are scored, ``[B,T]`` bool, from the inputs alone."""
        raise NotImplementedError

    def decode(self, episodes: Episodes, index: int = 0) -> list[str]:
        """Human-readable rendering of each input position of one episode."""
        return [str(int(t)) for t in episodes.tokens[index]]

    # --- anatomy (optional: what the geometric diagnostics need to know about the layout) ------
    #: the hidden state is one of finitely many values whose posterior argmax can cluster
    #: representations (the probes' k-means check); ``False``: that check does not apply
    discrete_latent_state: ClassVar[bool] = False

    def hypothesis_tokens(self) -> tuple[list[int], str] | None:
        """Token ids that stand for the task's hypotheses, with a description of them, or ``None``
        when no input token names a hypothesis (key orthogonality then does not apply)."""
        return None

    def attention_regions(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named key-position sets ``R[b, t, j]`` (bool ``[B,T,T]``, ``j <= t``) that matter for the
        query at ``(b, t)`` (e.g. the elimination set), from the inputs alone; ``{}``: none."""
        return {}

    def unpooled(self) -> "Task | None":
        """For a task whose latent is drawn from a finite pool (memorisation vs inference), the same task
        with the latent drawn from its true prior — whose posterior is what a model that infers, rather
        than memorises, matches; ``None`` for a task without a pool."""
        return None

    def belief(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor | None:
        """The exact distribution over the generating process's hidden state at every position,
        ``[B, T, S]`` float64 (the *belief state* an optimal filter carries), or ``None`` where the
        task has no hidden state of its own (the belief-geometry diagnostic then does not apply)."""
        return None

    def windowed_posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None,
                           window: int = 1) -> torch.Tensor | None:
        """The exact predictive ``[B, T, C]`` (float64) of an observer that sees only the last ``window``
        pieces of evidence before each scored position (the task says what a piece is: a shown pair, an
        observation), with everything else the task fixes (its prior, a header) — the Bayes answer of a
        predictor with a short memory, one of the reference strategies a network may pass through in
        training.  ``None`` where the task does not define it."""
        return None

    def counterfactual_edit(self, tokens: torch.Tensor, seed: int) -> "tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None":
        """Two edits of one piece of evidence in each episode, for counterfactual tests:
        ``(edited, other, position)`` — ``edited`` and ``other`` are ``tokens`` with the single token at
        ``position[b]`` replaced by two different values, each edit a valid episode of the task whose exact
        posterior (:meth:`posterior` of the edited tokens) differs from the original's at a later scored
        position.  ``None`` where the task defines no such edit."""
        return None

    #: one line per region of :meth:`attention_regions` (shown in the geometry record)
    region_descriptions: ClassVar[dict[str, str]] = {}

    def main_region(self, regions: dict[str, torch.Tensor]) -> str | None:
        """The region whose attention mass is the task's headline focusing number (``None``: none)."""
        return None

    # --- conveniences ---------------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        """The constructor parameters as a plain dict (what ``make`` needs to rebuild the task)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def replace(self, **changes: Any) -> "Task":
        """A copy with some parameters changed (validated), e.g. ``task.replace(K=50)``."""
        return dataclasses.replace(self, **changes)

    @property
    def length_param(self) -> str | None:
        """Name of the parameter that sets the episode length (for length generalisation)."""
        return None

    def with_length(self, length: int) -> "Task":
        """The same task at another episode length (``ValueError`` if the task has no such knob)."""
        if self.length_param is None:
            raise InvalidValue(f"invalid lengths: task {self.name!r} has no length parameter")
        return self.replace(**{self.length_param: length})

    def bayes_entropy(self, episodes: Episodes) -> torch.Tensor:
        """Entropy of the exact posterior in bits ``[B,T]`` (0 off the mask)."""
        return entropy_bits(episodes.posterior) * episodes.mask


def physical_memory() -> int:
    """Bytes of physical memory on this machine (0 where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 0


def check_memory(task: "Task", n: int, what: str = "batch") -> None:
    """Refuse (``InvalidValue``) to sample ``n`` episodes whose posteriors alone would need more
    than half of this machine's memory: ``n·T·(8C + 32)`` bytes (float64 posterior, tokens,
    targets, mask).  A size that cannot be allocated is the user's to change, not a crash."""
    need = n * task.seq_len * (8 * task.n_classes + 32)
    limit = physical_memory() // 2
    if limit and need > limit:
        raise InvalidValue(
            f"invalid {what}: {n} episodes of {task.name} need ≈{need / 2**30:.1f} GiB for their posteriors, "
            f"more than half of this machine's {2 * limit / 2**30:.0f} GiB; use a smaller {what} or task"
        )


# --- registry ------------------------------------------------------------------------------
_REGISTRY: dict[str, type[Task]] = {}
_PRESETS: dict[str, dict[str, Any]] = {}


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: make a task constructible by ``make(cls.name, ...)``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} needs a class attribute `name`")
    _REGISTRY[cls.name] = cls
    return cls


def register_preset(preset: str, task: str, **params: Any) -> None:
    """Name a parameter set of a task, e.g. the authors' recall sizes (``make('recall_paper')``)."""
    _PRESETS[preset] = {"task": task, **params}


def names() -> list[str]:
    """Registered task names (presets included)."""
    return sorted(_REGISTRY) + sorted(_PRESETS)


def get(name: str) -> type[Task]:
    if name in _PRESETS:
        return _REGISTRY[_PRESETS[name]["task"]]
    if name not in _REGISTRY:
        raise InvalidValue(f"unknown task {name!r}{did_you_mean(name, names())}: choose from {', '.join(names())}")
    return _REGISTRY[name]


def make(name: str, **params: Any) -> Task:
    """Build a task by name: ``make('bijection', V=10)``.  Unknown names/parameters raise ``ValueError``."""
    cls = get(name)
    base: dict[str, Any] = {}
    if name in _PRESETS:
        base = {k: v for k, v in _PRESETS[name].items() if k != "task"}
    allowed = {f.name for f in fields(cls)}
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise InvalidValue(
            f"unknown parameter {unknown[0]!r} for task {cls.name!r}{did_you_mean(unknown[0], allowed)}: allowed "
            f"{', '.join(sorted(allowed)) or 'none'}"
        )
    for f in fields(cls):  # a flag value "true" must not pass as the integer 1
        if f.name in params and isinstance(params[f.name], bool) and "bool" not in str(f.type):
            raise InvalidValue(f"invalid {f.name}: must be a number, got {params[f.name]!r}")
    try:
        return cls(**{**base, **params})
    except (OverflowError, ZeroDivisionError, FloatingPointError) as exc:
        raise InvalidValue(f"invalid parameters for task {cls.name!r}: {exc}") from None


def defaults(name: str) -> dict[str, Any]:
    """The default parameters of a task (or preset)."""
    return make(name).params()


# --- the Bayes-optimal answer as one more model ----------------------------------------------
class BayesOracle(torch.nn.Module):
    """The exact posterior, packaged with a network's call signature.

    ``oracle(tokens, features=None) -> logits [B,T,C]`` with ``logits = log posterior``
    (``-inf`` replaced by a large negative number so softmax gives exact zeros).  It has no
    parameters; evaluated like any network it scores 0 on every metric.
    """

    NEG = -1e30

    def __init__(self, task: Task):
        super().__init__()
        self.task = task

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        post = self.task.posterior(tokens.cpu(), None if features is None else features.cpu())
        return self.logits(post).to(tokens.device)

    def logits(self, post: torch.Tensor) -> torch.Tensor:
        """``log post``, with ``-inf`` replaced by :attr:`NEG` so that a softmax gives exact zeros."""
        return torch.where(post > 0, post.clamp_min(1e-300).log(), torch.full_like(post, self.NEG))

    def n_params(self) -> int:
        return 0


def oracle(task: Task, prior: str = "task") -> BayesOracle:
    """The Bayes-optimal predictor for ``task`` as a model (Garg et al.'s 'optimal' row).

    ``prior="task"``: under the distribution the task samples from (for a pooled task, the pool);
    ``prior="true"``: under the true prior (:meth:`Task.unpooled`; the same as ``"task"`` for a task
    without a pool) — the predictor that infers instead of memorising."""
    if prior not in ("task", "true"):
        raise InvalidValue(f"invalid prior {prior!r}: 'task' or 'true'")
    return BayesOracle((task.unpooled() or task) if prior == "true" else task)


def uniform_rows(shape: tuple[int, ...], n_classes: int) -> torch.Tensor:
    """Uniform placeholder distributions for unscored positions."""
    return torch.full((*shape, n_classes), 1.0 / n_classes, dtype=torch.float64)


def fit_samples(task: Task, n: int = 20000, seed: int = 0x5EED_B11D, chunk: int = 2000) -> list[Episodes]:
    """The ``n`` episodes (in chunks of ``chunk``) a :class:`ConditionalMean` averages: drawn once, they
    can fit several tables."""
    return [task.sample(min(chunk, n - start), seed + i) for i, start in enumerate(range(0, n, chunk))]


class ConditionalMean(torch.nn.Module):
    r"""The best predictor that sees only part of its context: the conditional mean of the posterior.

    .. math:: q(y \mid z_t) = \mathbb{E}\left[\,p_{\text{Bayes}}(y \mid x_{\le t}) \;\middle|\; z_t\right]

    where ``z_t`` is what the predictor is allowed to see (``by``): ``"position_token"`` — its position
    and its own input token, the *context-blind* optimum (:class:`ContextBlind`); ``"token"`` — its input
    token alone, a bigram predictor; ``"none"`` — nothing, the unigram (marginal) predictor.  The
    conditional mean minimises the expected KL(Bayes ‖ q) and the cross-entropy among all predictors
    that see only ``z_t``.  Estimated by averaging the posteriors of ``n`` sampled episodes
    (:func:`fit_samples`, or ``samples`` when given) per cell (a
    cell never sampled falls back to the average over all scored positions); real-valued features
    are ignored.
    """

    NEG = -1e30
    KINDS = ("position_token", "token", "none")

    def __init__(self, task: Task, by: str = "position_token", n: int = 20000, seed: int = 0x5EED_B11D,
                 chunk: int = 2000, samples: "list[Episodes] | None" = None) -> None:
        super().__init__()
        if by not in self.KINDS:
            raise InvalidValue(f"invalid by {by!r}: choose from {', '.join(self.KINDS)}")
        self.task, self.by = task, by
        T = task.seq_len if by == "position_token" else 1
        V = task.vocab_size if by != "none" else 1
        C = task.n_classes
        sums = torch.zeros(T, V, C, dtype=torch.float64)
        counts = torch.zeros(T, V, dtype=torch.float64)
        for ep in samples if samples is not None else fit_samples(task, n, seed, chunk):
            idx = self._cell(ep.tokens)[ep.mask]  # only scored positions enter the means
            sums.view(T * V, C).index_add_(0, idx, ep.posterior[ep.mask])
            counts.view(-1).index_add_(0, idx, torch.ones(idx.numel(), dtype=torch.float64))
        overall = sums.sum((0, 1)) / counts.sum().clamp_min(1)
        by_position = torch.where(counts.sum(1, keepdim=True) > 0, sums.sum(1) / counts.sum(1, keepdim=True).clamp_min(1),
                                  overall)  # [T,C]
        table = torch.where(counts[..., None] > 0, sums / counts.clamp_min(1)[..., None], by_position[:, None, :])
        self.register_buffer("table", table)

    def _cell(self, tokens: torch.Tensor) -> torch.Tensor:
        """The flat table cell ``[B, T]`` each position reads."""
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)[None, :].expand(B, T) if self.by == "position_token" else torch.zeros_like(tokens)
        tok = tokens if self.by != "none" else torch.zeros_like(tokens)
        width = self.task.vocab_size if self.by != "none" else 1
        return pos * width + tok.clamp(0, width - 1)

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        T = tokens.shape[1]
        if self.by == "position_token" and T > self.table.shape[0]:
            raise InvalidValue(f"invalid input: length {T} exceeds the fitted length {self.table.shape[0]}")
        post = self.table.view(-1, self.table.shape[-1])[self._cell(tokens)]  # [B,T,C]
        return torch.where(post > 0, post.clamp_min(1e-300).log(), torch.full_like(post, self.NEG)).float()

    def n_params(self) -> int:
        return 0


class ContextBlind(ConditionalMean):
    r"""The best predictor that sees only its position and its own input: the context-blind optimum.

    .. math:: q(y \mid t, x_t) = \mathbb{E}\left[\,p_{\text{Bayes}}(y \mid x_{\le t}) \;\middle|\; t, x_t\right]

    What a network with no cross-position mixing (``mlp_pointwise``) can reach at best; on the
    bijection it is uniform over the ``V`` values at every key position, the papers' "MLP fails"
    plateau.  (:class:`ConditionalMean` with ``by="position_token"``.)
    """

    def __init__(self, task: Task, n: int = 20000, seed: int = 0x5EED_B11D, chunk: int = 2000) -> None:
        super().__init__(task, "position_token", n=n, seed=seed, chunk=chunk)


def context_blind(task: Task, n: int = 20000) -> ContextBlind:
    """The context-blind optimum for ``task`` as a model (see :class:`ContextBlind`)."""
    return ContextBlind(task, n=n)
