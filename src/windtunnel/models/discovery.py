r"""Find the residual stream of a user's module from its module tree, with no hook names in its code.

A user's own model (``--arch module:factory``, :mod:`windtunnel.models.external`) that keeps its layers in a list
gets the stream-reading diagnostics without any :class:`~windtunnel.models.HookPoint` of ours:
:func:`find_stream` finds the list of layers and its readout, and :class:`Stream` exposes, by forward hooks on
the user's own modules that are registered only inside a ``with model.hooks(...)`` block,

* ``blocks.{l}.hook_resid_pre`` — the stream entering layer ``l`` (the layer's input);
* ``blocks.{l}.hook_resid_post`` — the stream leaving layer ``l`` (the layer's output tensor);

each of which can be read and *replaced* (patching, steering, layer bypass), and, where the model's tail after
its layers is a function of the last layer's output alone, the readout ``unembed(x)``.

**The rule** (what counts as the list of layers), applied to the user's module ``net``:

1. *Candidates.*  Every ``nn.ModuleList`` or ``nn.Sequential`` in ``net``'s module tree whose children all have
   one class (``type(child)`` identical) and parameters, taken whole; and, inside an ``nn.Sequential`` of mixed
   children, every run of at least two consecutive children of one class with parameters
   (``nn.Sequential(Embedding, Block, Block, Block, Linear)`` -> its three ``Block``\ s).  When ``net`` has a
   list named ``blocks`` (the documented convention), it is the only candidate.
2. *Order.*  Longest first; among equally long ones, the first in ``net.named_modules()`` order.
3. *The path test.*  The first candidate that passes, on one forward pass over two of the task's episodes (eval
   mode, no gradient), every one of these is the list of layers:

   * each layer runs exactly once, in list order;
   * each layer's stream input — its first tensor argument, positional before keyword — and its *output
     tensor* — its output when that is a tensor, else the first element of a returned tuple or list (an
     ``nn.GRU`` / ``nn.LSTM`` layer returns ``(output, h_n)`` / ``(output, (h_n, c_n))``: the output is taken)
     — are floating ``[B, T, d]`` tensors on the episodes' ``B`` and ``T``;
   * the layers are *chained*: layer ``l``'s input equals layer ``l-1``'s output tensor (nothing — a residual
     added outside the layer, a norm, an activation — runs between them);
   * the last layer's output reaches the logits (a random change to it changes them).

   ``blocks.{l}.hook_resid_pre`` is exposed only when every layer's input has the shape of its output (a first
   layer that changes the width, e.g. an ``nn.GRU(d_embed, d)`` with ``d_embed != d``, leaves only
   ``hook_resid_post``; layer bypass then does not apply either).

**Not a list of layers.**  One ``nn.GRU`` / ``nn.LSTM`` / ``nn.RNN`` with ``num_layers > 1`` runs all its layers
inside one call and returns only the last layer's output sequence: there is no stream after each layer to read,
so it is not a list of layers (:func:`find_stream` says so; keep one single-layer module per layer in an
``nn.ModuleList``).  A model with no candidate passing the path test has no stream, and its reason names what
each refused candidate failed.

**The readout.**  The modules that run after the last layer, outermost calls only, in call order (e.g. a final
norm and a linear head) are the readout when they form a chain — the first takes the last layer's output
tensor as its only argument, each next one the previous one's output, the last returns the logits — *and*
applying them to the last stream reproduces the model's logits (checked, to float rounding).  A tail that reads
anything else (the embedding through a skip connection, a functional op between modules) has no ``unembed``.
A model whose last layer returns the logits has the identity as its readout.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch
from torch import nn

from .base import HookPoint

RESID_PRE = "blocks.{l}.hook_resid_pre"
RESID_POST = "blocks.{l}.hook_resid_post"


@dataclass(frozen=True)
class NotFound:
    """No list of layers: ``reason`` says why, in words a user can act on."""

    reason: str

    def describe(self) -> str:
        """One line for the console."""
        return f"layers not found: {self.reason}"


@dataclass
class Stream:
    """The list of layers found in a user's module and the hook points of the stream around them.

    ``path``: where the layers are in the user's module (``rnns``, or ``body[1:4]`` for a run inside a mixed
    ``nn.Sequential``); ``layers``: the layer modules in order; ``inputs``: where each layer takes its stream
    (a positional index or a keyword); ``pre``: whether ``blocks.{l}.hook_resid_pre`` is exposed (every layer's
    input has its output's shape); ``readout``: the modules after the last layer whose chain is the readout
    (``None``: no readout; ``[]``: the identity), with their paths in ``readout_paths``; ``notes``: why a part
    is not exposed."""

    path: str
    layers: list[nn.Module]
    inputs: list[int | str]
    pre: bool
    readout: list[nn.Module] | None
    readout_paths: list[str]
    notes: list[str] = field(default_factory=list)
    points: dict[str, HookPoint] = field(default_factory=dict, init=False)
    _handles: list[Any] = field(default_factory=list, init=False, repr=False)
    _depth: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        for l in range(len(self.layers)):
            names = [RESID_PRE.format(l=l)] if self.pre else []
            for name in names + [RESID_POST.format(l=l)]:
                point = HookPoint()
                point.name = name
                self.points[name] = point

    # --- what it exposes ---------------------------------------------------------------------------------
    def describe(self) -> str:
        """One line for the console: the layers, the hooks exposed, the readout, and what is not exposed."""
        kinds = sorted({type(m).__name__ for m in self.layers})
        hooks = "blocks.{l}.hook_resid_pre and hook_resid_post" if self.pre else "blocks.{l}.hook_resid_post"
        readout = ("identity (the last layer returns the logits)" if self.readout == [] else
                   " -> ".join(self.readout_paths) if self.readout else "none")
        line = (f"layers found: {self.path} ({len(self.layers)} x {'/'.join(kinds)}), exposed as {hooks}; "
                f"readout (unembed): {readout}")
        return line + "".join(f"; {note}" for note in self.notes)

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """The readout applied to a stream state ``x [..., d]``: the readout modules in their order (logits
        ``[..., C]``, float32).  ``ValueError`` when the model has none (:attr:`readout` is ``None``)."""
        if self.readout is None:
            raise ValueError("the model has no readout that is a function of the last layer's output alone")
        for module in self.readout:
            x = module(x)
        return x.float()

    # --- the forward hooks that feed the hook points -------------------------------------------------------
    @contextmanager
    def routed(self) -> Iterator["Stream"]:
        """Inside the block, each layer's stream input passes through ``blocks.{l}.hook_resid_pre`` and its
        output tensor through ``blocks.{l}.hook_resid_post`` (whatever those hook points' hooks return replaces
        the tensor downstream).  Re-entrant: nested blocks share one set of forward hooks on the layers, which
        are removed when the outermost block exits, also on an exception."""
        if self._depth == 0:
            try:
                for l, layer in enumerate(self.layers):
                    if self.pre:
                        self._handles.append(layer.register_forward_pre_hook(
                            _pre_hook(self.points[RESID_PRE.format(l=l)], self.inputs[l]), with_kwargs=True))
                    self._handles.append(layer.register_forward_hook(_post_hook(self.points[RESID_POST.format(l=l)])))
            except BaseException:
                self.detach()
                raise
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.detach()

    def detach(self) -> None:
        """Remove every forward hook this stream put on the user's layers (:meth:`routed` does it on exit)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._depth = 0


def _pre_hook(point: HookPoint, where: int | str) -> Any:
    def hook(_module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if isinstance(where, int):
            x = args[where]
            new = point(x)
            return None if new is x else ((*args[:where], new, *args[where + 1:]), kwargs)
        x = kwargs[where]
        new = point(x)
        return None if new is x else (args, {**kwargs, where: new})

    return hook


def _post_hook(point: HookPoint) -> Any:
    def hook(_module: nn.Module, _args: tuple, output: Any) -> Any:
        if isinstance(output, torch.Tensor):
            new = point(output)
            return None if new is output else new
        x = output[0]
        new = point(x)
        if new is x:
            return None
        return type(output)((new, *output[1:])) if type(output) in (tuple, list) else (new, *output[1:])

    return hook


def output_tensor(output: Any) -> torch.Tensor | None:
    """A layer's output tensor: the output when it is a tensor, else the first element of a returned tuple or
    list when that is a tensor (``nn.GRU``: ``(output, h_n)``), else ``None``."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


def _stream_input(args: tuple, kwargs: dict) -> tuple[int | str, torch.Tensor] | None:
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            return i, a
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            return k, v
    return None


def _has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


@dataclass(frozen=True)
class _Candidate:
    path: str
    layers: tuple[nn.Module, ...]


def candidates(net: nn.Module) -> list[_Candidate]:
    """The candidate lists of layers of ``net`` (rule 1 of the module docstring), in the order they are tried
    (rule 2: longest first, then module order)."""
    own = getattr(net, "blocks", None)
    if isinstance(own, (nn.ModuleList, nn.Sequential)):
        children = list(own)
        return [_Candidate("blocks", tuple(children))] if children else []
    found: list[_Candidate] = []
    for path, module in net.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(module.named_children())
        if not children:
            continue
        where = path or "(the model itself)"
        if len({type(m) for _, m in children}) == 1 and all(_has_params(m) for _, m in children):
            found.append(_Candidate(where, tuple(m for _, m in children)))
            continue
        if isinstance(module, nn.Sequential):
            start = 0
            for i in range(1, len(children) + 1):
                if i == len(children) or type(children[i][1]) is not type(children[start][1]):
                    run = [m for _, m in children[start:i]]
                    if len(run) >= 2 and all(_has_params(m) for m in run):
                        found.append(_Candidate(f"{path}[{start}:{i}]" if path else f"[{start}:{i}]", tuple(run)))
                    start = i
    order = {id(c): i for i, c in enumerate(found)}
    return sorted(found, key=lambda c: (-len(c.layers), order[id(c)]))


def _multi_layer_rnns(net: nn.Module) -> list[str]:
    return [f"{path or 'the model'} ({type(m).__name__}, num_layers={m.num_layers})"
            for path, m in net.named_modules() if isinstance(m, nn.RNNBase) and m.num_layers > 1]


def _run(model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs)


def _probe(model: nn.Module, cand: _Candidate, inputs: dict[str, torch.Tensor]) -> tuple[str | None, dict[str, Any]]:
    """Run the path test (rule 3) on one candidate: ``(None, what was seen)`` when it passes, else
    ``(reason, {})``."""
    B, T = inputs["tokens"].shape
    calls: list[list[Any]] = [[] for _ in cand.layers]
    order: list[int] = []
    handles = []
    try:
        for l, layer in enumerate(cand.layers):
            def pre(_m: nn.Module, args: tuple, kwargs: dict, l: int = l) -> None:
                order.append(l)
                calls[l].append({"input": _stream_input(args, kwargs)})

            def post(_m: nn.Module, _args: tuple, output: Any, l: int = l) -> None:
                calls[l][-1]["output"] = output_tensor(output)
                calls[l][-1]["raw"] = type(output).__name__

            handles.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(layer.register_forward_hook(post))
        logits = _run(model, inputs)
    finally:
        for h in handles:
            h.remove()
    for l, seen in enumerate(calls):
        if len(seen) != 1:
            return f"layer {l} ran {len(seen)} times in one forward pass (each layer must run once)", {}
    if order != sorted(order):
        return f"the layers ran in the order {order}, not in list order", {}
    ins, outs = [], []
    for l, seen in enumerate(calls):
        got = seen[0]
        if got["input"] is None:
            return f"layer {l} takes no tensor argument", {}
        where, x = got["input"]
        y = got.get("output")
        if y is None:
            return f"layer {l} returns a {got.get('raw', '?')}, not a tensor or a tuple starting with one", {}
        for what, t in (("input", x), ("output", y)):
            if t.dim() != 3 or tuple(t.shape[:2]) != (B, T) or not t.is_floating_point():
                return (f"layer {l}'s {what} has shape {list(t.shape)} ({t.dtype}), not a floating "
                        f"[B, T, d] = [{B}, {T}, d] stream"), {}
        ins.append((where, x))
        outs.append(y)
    for l in range(1, len(cand.layers)):
        x, y = ins[l][1], outs[l - 1]
        if x.shape != y.shape or not torch.equal(x, y):
            return (f"the layers are not chained: layer {l}'s input is not layer {l - 1}'s output (something runs "
                    "between them, e.g. a residual added outside the layer, a norm or an activation; move it into "
                    "the layer)"), {}
    gen = torch.Generator(device="cpu").manual_seed(0)
    last = cand.layers[-1]

    def shake(_m: nn.Module, _args: tuple, output: Any) -> Any:
        y = output_tensor(output)
        assert y is not None
        moved = y + torch.randn(y.shape, generator=gen, dtype=y.dtype).to(y.device)
        return moved if isinstance(output, torch.Tensor) else (moved, *output[1:])

    handle = last.register_forward_hook(shake)
    try:
        shaken = _run(model, inputs)
    finally:
        handle.remove()
    if torch.equal(shaken, logits):
        return "the last layer's output does not reach the logits (the list is not on the path to the output)", {}
    return None, {"inputs": [w for w, _ in ins], "in": [x for _, x in ins], "out": outs, "logits": logits}


def _readout(net: nn.Module, model: nn.Module, cand: _Candidate, inputs: dict[str, torch.Tensor],
             last: torch.Tensor, logits: torch.Tensor) -> tuple[list[nn.Module] | None, list[str], str | None]:
    """The readout of the module docstring: ``(modules, paths, None)``, or ``(None, [], why not)``."""
    inside = {id(m) for layer in cand.layers for m in layer.modules()}
    watched = [(p, m) for p, m in net.named_modules() if m is not net and id(m) not in inside]
    state = {"after": False}
    calls: list[str] = []  # per open module call: "tail" (an outermost call after the last layer), "in", "out"
    tail: list[dict[str, Any]] = []
    handles = []

    def last_done(_m: nn.Module, _args: tuple, _output: Any) -> None:
        state["after"] = True

    try:
        handles.append(cand.layers[-1].register_forward_hook(last_done))
        for path, module in watched:
            def pre(_m: nn.Module, args: tuple, kwargs: dict, path: str = path, module: nn.Module = module) -> None:
                if any(c in ("tail", "in") for c in calls):
                    calls.append("in")
                elif state["after"]:
                    calls.append("tail")
                    tail.append({"path": path, "module": module, "args": args, "kwargs": kwargs})
                else:
                    calls.append("out")

            def post(_m: nn.Module, _args: tuple, output: Any) -> None:
                if calls.pop() == "tail":
                    tail[-1]["output"] = output

            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(module.register_forward_hook(post))
        _run(model, inputs)
    finally:
        for h in handles:
            h.remove()
    x = last
    for call in tail:
        if call["kwargs"] or len(call["args"]) != 1 or not isinstance(call["args"][0], torch.Tensor):
            return None, [], f"{call['path']} after the last layer takes more than the stream"
        if call["args"][0].shape != x.shape or not torch.equal(call["args"][0], x):
            return None, [], (f"what {call['path']} reads after the last layer is not the previous step's output "
                              "(the tail reads more than the last layer's output, or runs functional code between "
                              "modules)")
        if not isinstance(call.get("output"), torch.Tensor):
            return None, [], f"{call['path']} after the last layer does not return a tensor"
        x = call["output"]
    if x.shape != logits.shape or not torch.equal(x.float(), logits.float()):
        return None, [], "the modules after the last layer do not end in the logits"
    modules = [c["module"] for c in tail]
    with torch.no_grad():
        y = last
        for m in modules:
            y = m(y)
    if y.shape != logits.shape or not torch.allclose(y.float(), logits.float(), rtol=1e-4, atol=1e-5):
        return None, [], "applying the modules after the last layer to its output does not reproduce the logits"
    return modules, [c["path"] for c in tail], None


def find_stream(model: nn.Module, net: nn.Module, inputs: dict[str, torch.Tensor]) -> Stream | NotFound:
    """The list of layers of the user's module ``net`` and its readout, by the rule of the module docstring,
    tested on ``model(**inputs)`` (``model`` runs ``net``; ``inputs``: ``tokens [B,T]`` and, for tasks with
    real-valued inputs, ``features``).  Every module's train/eval flag is restored and every probing hook
    removed, also on an exception.  :class:`NotFound` with the reason when no candidate passes."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        return _find(model, net, inputs)
    finally:
        for m, mode in modes:
            m.training = mode


def _find(model: nn.Module, net: nn.Module, inputs: dict[str, torch.Tensor]) -> Stream | NotFound:
    rnns = _multi_layer_rnns(net)
    rnn_note = (f"; {', '.join(rnns)} runs its layers inside one call and returns only the last layer's outputs, "
                "so it is not a list of layers (keep one single-layer module per layer in an nn.ModuleList)"
                if rnns else "")
    cands = candidates(net)
    if not cands:
        return NotFound(f"{type(net).__name__} has no nn.ModuleList or nn.Sequential of same-typed modules with "
                        f"parameters (a list of layers){rnn_note}")
    refused: list[str] = []
    for cand in cands:
        try:
            why, seen = _probe(model, cand, inputs)
        except Exception as exc:  # noqa: BLE001 - a forward pass that fails under the probe refuses the candidate
            why, seen = f"the forward pass failed under the probe ({type(exc).__name__}: {exc})", {}
        if why is not None:
            refused.append(f"{cand.path} ({len(cand.layers)} x {type(cand.layers[0]).__name__}): {why}")
            continue
        notes = []
        pre = all(x.shape == y.shape for x, y in zip(seen["in"], seen["out"]))
        if not pre:
            l = next(l for l, (x, y) in enumerate(zip(seen["in"], seen["out"])) if x.shape != y.shape)
            notes.append(f"layer {l} maps width {seen['in'][l].shape[-1]} to {seen['out'][l].shape[-1]}, so the "
                         "stream before each layer (hook_resid_pre) and layer bypass are not exposed")
        try:
            readout, paths, why_not = _readout(net, model, cand, inputs, seen["out"][-1], seen["logits"])
        except Exception as exc:  # noqa: BLE001 - a readout that cannot be replayed is no readout
            readout, paths, why_not = None, [], f"replaying the modules after the last layer failed ({exc})"
        if why_not is not None:
            notes.append(f"no readout: {why_not}")
        return Stream(path=cand.path, layers=list(cand.layers), inputs=seen["inputs"], pre=pre, readout=readout,
                      readout_paths=paths, notes=notes)
    return NotFound(f"no candidate list of layers in {type(net).__name__} passed the path test: "
                    + "; ".join(refused) + rnn_note)


def hooks_on(modules: Sequence[nn.Module]) -> int:
    """How many forward and forward-pre hooks are registered on ``modules`` (a test that none is left over)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in modules)
