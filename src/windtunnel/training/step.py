r"""One training step of a stacked model as a program of device operations, captured once as a CUDA graph and replayed.

A small model's step on a GPU costs what launching its kernels costs, not what they compute: hundreds of launches of a
few microseconds' work each.  :class:`StackedStep` runs the whole step of ``M`` stacked members — forward, the
members' losses, backward, each member's gradient clipping, AdamW, the learning-rate schedule and the divergence
watch — without reading a single number back to the host and without a Python number that changes from step to step:

* the batch is copied into fixed input buffers (:meth:`StackedStep.load`; from page-locked memory on a GPU, queued
  behind the running step, so the next batch is sampled on the host while the device still works on this one);
* the step counter is a device tensor the program advances itself, and the schedule is computed from it on the
  device (:class:`Schedule`, equal to :func:`windtunnel.training.optim.lr_at`);
* AdamW (:class:`MemberAdamW`) takes a learning rate per member and parameter group from that schedule, so members
  that differ in their learning rates (``lr``, ``min_lr``, ``readout_lr_mult``) stack as well as seeds do;
* a member whose loss is not finite is noted on the device (:class:`windtunnel.training.optim.FiniteWatch`, updated
  in place) and read back only at a log, evaluation, checkpoint or stop.

On CUDA the step is then recorded once as a CUDA graph and each later step is one replay.  Before a graph is trusted,
two replays — this step's batch, then another — are checked against the same two steps run eagerly from the same
state (:meth:`StackedStep.capture`): a program that recorded something it should have recomputed — a value fixed at
capture, an input read from a buffer that is not the one refilled — fails that check, and the step runs eagerly from
then on, saying why.  Elsewhere (a
CPU, a forward that cannot be captured) the same program runs eagerly: the arithmetic is the same either way.

Per member ``m`` and parameter ``θ`` in group ``g`` (AdamW, decoupled weight decay ``λ_g``, step ``t``):
``θ ← θ(1 − η_{g,m}(t) λ_g)``; ``m_θ ← β₁ m_θ + (1−β₁) ĝ``; ``v_θ ← β₂ v_θ + (1−β₂) ĝ²``;
``θ ← θ − η_{g,m}(t) · (m_θ / (1−β₁ᵗ)) / (√v_θ / √(1−β₂ᵗ) + ε)`` with ``ĝ`` the member's clipped gradient
``g · min(1, c / (‖g‖ + 10⁻⁶))`` and ``‖g‖`` over the member's own parameters — what a run alone gets from
``clip_grad_norm_`` and ``torch.optim.AdamW``.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, NamedTuple, Sequence

import torch

from ..run.config import TrainConfig
from ..tasks.base import IGNORE, Episodes
from .optim import FiniteWatch, loss_fn

__all__ = ["MemberAdamW", "Recorder", "Schedule", "StackedStep", "clip_per_member", "record_cuda_graph"]

GRAPH_TOLERANCE = 1e-2
"""A captured step is trusted when its update of the weights differs from the eager step's by at most this share of
the update's own size (the two run the same kernels; what differs is summation order, not arithmetic)."""


class Schedule:
    """Each member's learning rate as a function of the step on the device: linear warmup for ``warmup`` steps, then
    cosine from ``lr`` to ``min_lr`` at ``steps`` — :func:`windtunnel.training.optim.lr_at` in device operations (the
    members' constants are placed on the device once, so a recorded step reads nothing from the host)."""

    def __init__(self, cfgs: Sequence[TrainConfig], device: torch.device) -> None:
        def per(name: str) -> torch.Tensor:
            return torch.tensor([float(getattr(c, name)) for c in cfgs], dtype=torch.float64, device=device)

        self.lr, self.min_lr, self.warmup, self.steps = per("lr"), per("min_lr"), per("warmup"), per("steps")

    def __call__(self, step: torch.Tensor) -> torch.Tensor:
        """The members' rates ``[M]`` (float64) at ``step``."""
        s = step.to(torch.float64)
        rising = self.lr * (s + 1) / self.warmup.clamp(min=1)
        progress = ((s - self.warmup) / (self.steps - self.warmup).clamp(min=1)).clamp(max=1.0)
        cosine = self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + torch.cos(math.pi * progress))
        return torch.where(s < self.warmup, rising, cosine)


def clip_per_member(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale each member's slice of ``grads`` so that its norm over all parameters is at most ``max_norm``; returns
    the members' norms before clipping (``clip_grad_norm_``'s rule, member by member)."""
    sq = torch.stack([g.reshape(g.shape[0], -1).double().pow(2).sum(1) for g in grads]).sum(0)
    norms = sq.sqrt()
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.to(g.dtype).reshape(-1, *([1] * (g.dim() - 1))))
    return norms


class _Segment(NamedTuple):
    """One parameter group's parameters of one dtype, laid end to end: ``[M, P]`` buffers of the weights, the two
    moments and the gradients, each parameter a view of its columns; ``mults [M]`` its members' rate multipliers;
    ``live [P]`` 1 where a parameter receives gradients (``None`` when all do)."""

    weight_decay: float
    mults: torch.Tensor
    p: torch.Tensor
    m: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    live: torch.Tensor | None


class MemberAdamW:
    """AdamW over stacked parameters ``[M, …]`` whose learning rate is a device tensor per group and member.

    ``groups``: ``(names, weight_decay, lr_mult[M])`` — the parameters of a group, its decay, and each member's
    multiplier of the scheduled rate (1 but for the readout of a member trained with ``readout_lr_mult``).
    The parameters of a group are moved into one ``[M, P]`` buffer (each parameter a view of it), and so are their
    moments and gradients, so that one update is a dozen operations on a few buffers, not a dozen per parameter: on a
    GPU, where a small model's step costs what its launches cost, the per-parameter update and clipping were half of
    the transformer's operations.  The moments are still reachable per parameter name, so a member's slice is its own
    AdamW state (:meth:`member_state`).  A parameter with no gradient at the first step is one the model does not use
    and, as in ``torch.optim.AdamW``, is left as it is (not decayed).
    """

    def __init__(self, params: dict[str, torch.Tensor], groups: list[tuple[list[str], float, list[float]]],
                 betas: tuple[float, float], eps: float = 1e-8) -> None:
        self.params, self.betas, self.eps = params, betas, eps
        device = next(iter(params.values())).device
        self.count = torch.zeros((), dtype=torch.float64, device=device)  # steps taken, on the device
        self.exp_avg: dict[str, torch.Tensor] = {}
        self.exp_avg_sq: dict[str, torch.Tensor] = {}
        self._grad: dict[str, torch.Tensor] = {}
        self._columns: list[tuple[list[str], list[tuple[int, int]]]] = []
        self.segments: list[_Segment] = []
        self.live: set[str] | None = None  # the parameters that receive gradients, known after the first backward
        for names, wd, mults in groups:
            by_dtype: dict[torch.dtype, list[str]] = {}
            for n in names:
                by_dtype.setdefault(params[n].dtype, []).append(n)
            for dtype, ns in by_dtype.items():
                M = params[ns[0]].shape[0]
                spans, start = [], 0
                for n in ns:
                    spans.append((start, start + params[n][0].numel()))
                    start = spans[-1][1]
                p, m, v, g = (torch.zeros(M, start, dtype=dtype, device=device) for _ in range(4))
                with torch.no_grad():
                    for n, (a, b) in zip(ns, spans):
                        shape = params[n].shape
                        p[:, a:b].copy_(params[n].reshape(M, -1))
                        params[n].data = p[:, a:b].view(shape)  # the model's parameter is now its columns
                        self.exp_avg[n], self.exp_avg_sq[n] = m[:, a:b].view(shape), v[:, a:b].view(shape)
                        self._grad[n] = g[:, a:b].view(shape)
                self._columns.append((ns, spans))
                self.segments.append(_Segment(wd, torch.tensor(mults, dtype=torch.float64, device=device),
                                              p, m, v, g, None))

    def zero_grad(self) -> None:
        """Clear the gradients before a backward pass: the gradient buffers zeroed, each parameter's ``.grad`` their
        view, so that backward adds into them in place (the same memory in every replay of a recorded step); before
        the first backward, each ``.grad`` is ``None``."""
        if self.live is None:
            for p in self.params.values():
                p.grad = None
            return
        for seg in self.segments:
            seg.g.zero_()
        for n in self.live:
            self.params[n].grad = self._grad[n]

    def grads(self) -> list[torch.Tensor]:
        """The members' gradients after a backward pass, as the ``[M, P]`` buffers.  The parameters with a gradient
        are noted at the first call (the others are unused), and again whenever one of the others gets a gradient
        (a model whose parameters are used only on some steps); their gradients are moved into the buffers.  A
        parameter once used is updated from then on, from a zero gradient on a step that does not use it (its
        moments still decay), where ``torch.optim.AdamW`` would skip that step, and its bias correction counts the
        stack's steps, not its own: none of the built-in models has such a parameter, and a recorded step (the
        same operations every step) could not tell."""
        found = {n for n, p in self.params.items() if p.grad is not None}
        if self.live is None or not found <= self.live:
            self.live = found | (self.live or set())
            for i, (ns, spans) in enumerate(self._columns):
                live = None
                if not all(n in self.live for n in ns):
                    live = torch.zeros(self.segments[i].p.shape[1], dtype=self.segments[i].p.dtype,
                                       device=self.count.device)
                    for n, (a, b) in zip(ns, spans):
                        live[a:b] = float(n in self.live)
                self.segments[i] = self.segments[i]._replace(live=live)
        for n in self.live:
            p = self.params[n]
            if p.grad is not None and p.grad.data_ptr() != self._grad[n].data_ptr():
                self._grad[n].copy_(p.grad)
                p.grad = self._grad[n]
        return [seg.g for seg in self.segments]

    @torch.no_grad()
    def step(self, rates: torch.Tensor) -> None:
        """One update with the members' scheduled rates ``rates [M]`` (device operations only), from the gradients
        in the buffers (:meth:`grads`)."""
        beta1, beta2 = self.betas
        self.count.add_(1)
        bias1 = 1 - beta1 ** self.count
        bias2_sqrt = (1 - beta2 ** self.count).sqrt()
        for seg in self.segments:
            dtype = seg.p.dtype
            lr = (rates * seg.mults).to(dtype)[:, None]  # [M, 1]
            if seg.weight_decay:
                seg.p.mul_(1 - lr * seg.weight_decay * (seg.live if seg.live is not None else 1))
            seg.m.lerp_(seg.g, 1 - beta1)
            seg.v.mul_(beta2).addcmul_(seg.g, seg.g, value=1 - beta2)
            denom = (seg.v.sqrt() / bias2_sqrt.to(dtype)).add_(self.eps)
            seg.p.sub_(seg.m / denom * (lr / bias1.to(dtype)))

    def load_member(self, member: int, state: dict[str, dict[str, torch.Tensor]]) -> None:
        """Member ``member``'s slice from a run's own AdamW state (``{name: {step, exp_avg, exp_avg_sq}}``)."""
        with torch.no_grad():
            for n, s in state.items():
                self.exp_avg[n][member].copy_(s["exp_avg"])
                self.exp_avg_sq[n][member].copy_(s["exp_avg_sq"])
                self.count.fill_(float(s["step"]))

    def member_state(self, member: int) -> dict[str, dict[str, torch.Tensor]]:
        """Member ``member``'s AdamW state in ``torch.optim.AdamW``'s per-parameter form (what its checkpoint holds)."""
        step = self.count.detach().to("cpu", torch.float32).clone()
        return {n: {"step": step.clone(), "exp_avg": self.exp_avg[n][member].clone(),
                    "exp_avg_sq": self.exp_avg_sq[n][member].clone()} for n in self.params}


Recorder = Callable[[Callable[[], None], Callable[[], None], Callable[[], None]], Callable[[], None]]
"""``record(body, warmup, reset) -> replay``: how a step is recorded (:func:`record_cuda_graph` on a GPU)."""


class _Scored(NamedTuple):
    """What :func:`windtunnel.training.optim.loss_fn` reads of a batch, from the program's buffers."""

    targets: torch.Tensor
    mask: torch.Tensor
    posterior: torch.Tensor | None


class StackedStep:
    """The training step of ``M`` stacked members as one program (see the module docstring).

    ``forward(inputs) -> logits [M, B, T, C]`` runs the stacked model on stacked inputs; ``params`` are its stacked
    leaf parameters; ``cfgs`` the members' configs (their schedules); ``soft`` trains against the posterior.
    After :meth:`run`, ``losses [M]`` (nats), ``norms [M]`` (before clipping) and ``logits`` hold this step's values,
    on the device, until the next run.
    """

    #: how the step is recorded, and on which devices (a stand-in for both lets the tests run the capture on a CPU)
    recorder: Recorder = staticmethod(lambda body, warmup, reset: record_cuda_graph(body, warmup, reset))
    records_on: Callable[[torch.device], bool] = staticmethod(lambda device: device.type == "cuda")

    def __init__(self, forward: Callable[[dict[str, torch.Tensor]], torch.Tensor], params: dict[str, torch.Tensor],
                 optimizer: MemberAdamW, cfgs: Sequence[TrainConfig], soft: bool, use_bf16: bool,
                 device: torch.device, first_step: int, graph: str = "auto") -> None:
        self.forward, self.params, self.optimizer, self.cfgs = forward, params, optimizer, list(cfgs)
        self.soft, self.use_bf16, self.device = soft, use_bf16, device
        self.grad_clip = float(cfgs[0].grad_clip)
        self.schedule = Schedule(cfgs, device)
        self.step = torch.tensor(first_step, dtype=torch.long, device=device)  # the step being taken, on the device
        self.watch = FiniteWatch(len(cfgs), device)
        self.want_graph = graph != "off" and self.records_on(device)
        self.replay: Callable[[], None] | None = None
        self.graph_note = ("eager (asked)" if graph == "off" else
                           "not captured yet" if self.want_graph else "eager (a CUDA graph needs a CUDA device)")
        self.buffers: dict[str, torch.Tensor] = {}
        self.losses = self.norms = self.logits = torch.empty(0)

    # --- the batch ---------------------------------------------------------------------------
    def load(self, batches: Sequence[Episodes]) -> None:
        """Copy the members' batches into the program's input buffers (a new shape — a curriculum stage — makes new
        buffers and drops the graph recorded for the old ones)."""
        fields = {f"in:{k}": [b.inputs[k] for b in batches] for k in batches[0].inputs}
        fields["mask"] = [b.mask for b in batches]
        fields["soft" if self.soft else "targets"] = [b.posterior if self.soft else b.targets for b in batches]
        stacked = {k: torch.stack(v) for k, v in fields.items()}
        if set(stacked) != set(self.buffers) or any(v.shape != self.buffers[k].shape for k, v in stacked.items()):
            self.buffers = {k: torch.empty(v.shape, dtype=v.dtype, device=self.device) for k, v in stacked.items()}
            if self.replay is not None:
                self.replay, self.graph_note = None, "not captured yet (new batch shape)"
        cuda = self.device.type == "cuda"
        for k, v in stacked.items():
            self.buffers[k].copy_(v.pin_memory() if cuda else v, non_blocking=cuda)

    # --- the program -------------------------------------------------------------------------
    def _body(self) -> None:
        """Forward, losses, backward, per-member clipping, AdamW, the watch and the step counter: device work only."""
        self.optimizer.zero_grad()
        b = self.buffers
        inputs = {k[3:]: v for k, v in b.items() if k.startswith("in:")}
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16, cache_enabled=False):
            logits = self.forward(inputs)
        targets = b["targets"] if "targets" in b else torch.full_like(b["mask"], IGNORE, dtype=torch.long)
        losses = torch.stack([loss_fn(logits[i], _Scored(targets[i], b["mask"][i], b["soft"][i] if self.soft else None),
                                      self.soft) for i in range(logits.shape[0])])  # each member's own mean
        self.watch.record(self.step, losses)
        with warnings.catch_warnings():  # the contract is for a parameter's own storage; ours are views of a buffer
            warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")
            losses.sum().backward()
        norms = clip_per_member(self.optimizer.grads(), self.grad_clip)
        self.optimizer.step(self.schedule(self.step))
        self.step.add_(1)
        self.losses, self.norms, self.logits = losses.detach(), norms, logits.detach()

    def run(self) -> None:
        """Take one step: replay the recorded graph, or record one first (on CUDA), or run the program eagerly."""
        if self.replay is not None:
            self.replay()
        elif self.want_graph and self.graph_note.startswith("not captured"):
            self.capture()
        else:
            self._body()

    # --- capture -----------------------------------------------------------------------------
    def _state(self) -> list[torch.Tensor]:
        o = self.optimizer
        return [*self.params.values(), *o.exp_avg.values(), *o.exp_avg_sq.values(), o.count, self.step,
                self.watch.step, self.watch.loss]

    def capture(self) -> None:
        """Record the step (with :attr:`recorder`) and keep the recording only where it reproduces the eager program:
        two replays — this step's batch, then other inputs (its sequences shifted by one position) — must match two
        eager steps from the same state (the step counters equal, the losses and the weights' update within
        :data:`GRAPH_TOLERANCE`), so that a value fixed at recording or an input read from a stale copy shows.
        Otherwise the step runs eagerly from then on, saying why in :attr:`graph_note`.  Everything recording and
        checking ran is undone (state, batch, random stream), and this step is then taken eagerly on its own batch."""
        before = [t.detach().clone() for t in self._state()]
        batch = {k: v.clone() for k, v in self.buffers.items()}
        rng = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None

        def restore() -> None:
            with torch.no_grad():
                for t, saved in zip(self._state(), before):
                    t.copy_(saved)
                for k, v in batch.items():
                    self.buffers[k].copy_(v)
            if rng is not None:
                torch.cuda.set_rng_state(rng, self.device)
            self.optimizer.zero_grad()

        def two_steps(step: Callable[[], None]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
            step()
            first = self.losses.clone()
            with torch.no_grad():  # other inputs in the same buffers: every sequence shifted by one position (a
                for v in self.buffers.values():  # reordered batch would not do: its mean loss is the same)
                    v.copy_(v.roll(1, 2))
            step()
            return [t.detach().clone() for t in self._state()], [first, self.losses.clone()]

        try:
            replay = self.recorder(self._body, self._body, restore)
            outputs = (self.losses, self.norms, self.logits)  # where every replay leaves its values
            restore()
            replayed, replayed_losses = two_steps(replay)
            restore()
            eager, eager_losses = two_steps(self._body)
            failed = None
        except Exception as exc:  # any step that cannot be recorded runs eagerly, as on a CPU
            failed = f"could not record the step: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        restore()
        self._body()  # this step, on its own batch
        if failed is None and any(k.shape != v.shape for k, v in zip(outputs, (self.losses, self.norms, self.logits))):
            failed = "the recording left no outputs of the step"
        if failed is None:
            n = len(self.params)
            moved = math.sqrt(sum(float((e - b).double().pow(2).sum()) for e, b in zip(eager[:n], before[:n])))
            apart = math.sqrt(sum(float((r - e).double().pow(2).sum()) for r, e in zip(replayed[:n], eager[:n])))
            counters = all(torch.equal(r, e) for r, e in zip(replayed[-4:-2], eager[-4:-2]))  # AdamW's and the step's
            losses = all(torch.allclose(r, e, rtol=GRAPH_TOLERANCE, equal_nan=True)
                         for r, e in zip(replayed_losses, eager_losses))
            if not counters:
                failed = "the recorded step did not reproduce the eager one: its step counters differ"
            elif not losses or apart > GRAPH_TOLERANCE * moved + 1e-12:
                failed = (f"the recorded step did not reproduce the eager one: weights {apart:.3g} apart after an "
                          f"update of {moved:.3g} over two steps")
        if failed is not None:
            self.graph_note = f"eager ({failed})"
            return
        for kept, now in zip(outputs, (self.losses, self.norms, self.logits)):
            kept.copy_(now)  # this step's values, where the replays will write theirs
        self.losses, self.norms, self.logits = outputs
        self.replay, self.graph_note = replay, "CUDA graph"


def record_cuda_graph(body: Callable[[], None], warmup: Callable[[], None], reset: Callable[[], None],
                      warmup_steps: int = 3) -> Callable[[], None]:
    """Record ``body`` as a CUDA graph and return its replay: ``warmup`` steps on a side stream first (CUDA graphs need
    the allocator and the libraries' workspaces settled before recording), then ``reset`` (undo them), then the
    recording, which runs nothing."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup_steps):
            warmup()
    torch.cuda.current_stream().wait_stream(side)
    reset()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph.replay
