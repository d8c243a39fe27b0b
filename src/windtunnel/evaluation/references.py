"""Named reference predictors: the strategies a network can pass through on its way to the posterior.

Each is a model of the oracle kind (``predictor(tokens, features=None) -> log-probabilities [B,T,C]``,
no parameters), so it is scored, plotted and compared exactly like a network.  From the least
informed to the most:

* ``uniform`` — every class equally likely: ``log2 C`` bits of ignorance;
* ``unigram`` — the marginal of the posterior over all scored positions (it sees nothing);
* ``bigram`` — the posterior's mean given the current input token alone;
* ``context_blind`` — its mean given the position and the current token (``tasks.context_blind``,
  the floor of a network without cross-position mixing);
* ``window_m`` — the exact posterior of an observer that sees only the last ``m`` pieces of evidence
  (``Task.windowed_posterior``: shown pairs on the bijection, observations on the HMM, points on
  regression), for tasks that define it.  On a task with real-valued inputs ``window_0`` comes first: the
  answer given the current input alone (regression's prior predictive ``N(0, σ_w²‖x‖² + σ²)``), the floor
  of a network without cross-position mixing, which ``context_blind`` — averaged over the inputs — is not;
* ``header_blind`` — for a task whose episodes state a relabelling in a header (model selection with opaque
  symbols), the exact posterior of a reader who sees every pair but not the header
  (``Task.header_blind_posterior``): the most a model that never uses the relabelling can reach;
* ``oracle_true_prior`` — for a pooled task, the posterior under the true prior: the predictor that
  infers instead of memorising the pool;
* ``oracle`` — the exact posterior (under a pool, the pool's).

:func:`predictors` builds them for one task; the ``reference_predictors`` diagnostic tracks the
KL from each to a network over its training checkpoints.
"""

from __future__ import annotations

import torch

from ..errors import InvalidValue
from ..tasks.base import BayesOracle, ConditionalMean, Task, fit_samples, oracle

__all__ = ["HeaderBlind", "Uniform", "Windowed", "has_header_blind", "has_window", "predictors", "window_sizes",
           "WINDOWS"]

WINDOWS: tuple[int, ...] = (1, 4)
"""The default short memories of the windowed references (pieces of evidence)."""


class Uniform(torch.nn.Module):
    """Every class equally likely at every position: ``log q_c = -log C``."""

    def __init__(self, task: Task) -> None:
        super().__init__()
        self.task = task

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        C = self.task.n_classes
        return torch.full((*tokens.shape, C), -float(torch.log(torch.tensor(float(C)))), device=tokens.device)

    def n_params(self) -> int:
        return 0


def has_window(task: Task) -> bool:
    """Whether ``task`` defines a windowed posterior (asked on one position of one episode)."""
    ep = task.sample(1, 0)
    features = None if ep.features is None else ep.features[:, :1]
    return task.windowed_posterior(ep.tokens[:, :1], features, window=1) is not None


def window_sizes(task: Task, windows: tuple[int, ...] = WINDOWS) -> tuple[int, ...]:
    """The windows ``m`` of ``task``'s ``window_m`` references: none where the task defines no windowed
    posterior; else ``windows`` shorter than an episode, with ``0`` first on a task with real-valued inputs
    (the input alone is informative there: its own reference)."""
    if not has_window(task):
        return ()
    if task.n_features and 0 not in windows:
        windows = (0, *windows)
    return tuple(m for m in windows if m < task.seq_len)


class Windowed(BayesOracle):
    """The exact posterior given only the last ``window`` pieces of evidence (``Task.windowed_posterior``)."""

    def __init__(self, task: Task, window: int) -> None:
        super().__init__(task)
        if not has_window(task):
            raise InvalidValue(f"task {task.name!r} does not define a windowed posterior")
        self.window = window

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        post = self.task.windowed_posterior(tokens.cpu(), None if features is None else features.cpu(), window=self.window)
        return self.logits(post).to(tokens.device)


def has_header_blind(task: Task) -> bool:
    """Whether ``task`` defines a header-blind posterior (asked on one episode)."""
    posterior = getattr(task, "header_blind_posterior", None)
    return posterior is not None and posterior(task.sample(1, 0).tokens) is not None


class HeaderBlind(BayesOracle):
    """The exact posterior of a reader who does not read the episode's header (``Task.header_blind_posterior``)."""

    def __init__(self, task: Task) -> None:
        super().__init__(task)
        if not has_header_blind(task):
            raise InvalidValue(f"task {task.name!r} does not define a header-blind posterior here")

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        post = self.task.header_blind_posterior(tokens.cpu())
        return self.logits(post).to(tokens.device)


def predictors(task: Task, windows: tuple[int, ...] = WINDOWS, n: int = 20000) -> dict[str, torch.nn.Module]:
    """The reference predictors of ``task``, least informed first (module docstring); ``window_m`` only
    where the task defines a windowed posterior and ``m`` is shorter than an episode, ``oracle_true_prior``
    only for a pooled task.  ``n``: episodes averaged by the conditional-mean references."""
    samples = fit_samples(task, n)  # one draw fits the three conditional means
    out: dict[str, torch.nn.Module] = {
        "uniform": Uniform(task),
        "unigram": ConditionalMean(task, "none", samples=samples),
        "bigram": ConditionalMean(task, "token", samples=samples),
        "context_blind": ConditionalMean(task, "position_token", samples=samples),
    }
    for m in window_sizes(task, windows):
        out[f"window_{m}"] = Windowed(task, m)
    if task.unpooled() is not None:  # it knows less than the pool's oracle, so it comes first
        out["oracle_true_prior"] = oracle(task, prior="true")
    out["oracle"] = oracle(task)
    return out
