r"""Mamba's selective scans and causal convolution, and the fused C++ CPU kernel behind them.

Every scan computes, with ``h_{-1} = 0``,

.. math:: h_t = \exp(\Delta_t A) \odot h_{t-1} + (\Delta_t u_t) \otimes B_t, \qquad y_t = h_t C_t + D \odot u_t

on ``u, delta [B,T,Di]``, ``A [Di,N]``, ``B, C [B,T,N]``, ``D [Di]``.  Five implementations:
:func:`selective_scan_ref` (the recurrence, one step at a time under autograd — the reference the
tests hold the others to); :class:`SelectiveScan` (``method="loop"`` or ``"doubling"``), which
computes every decay ``exp(Δ_t A)``, input ``Δ_t u_t B_t`` and read-out ``h_t C_t`` for all ``t`` at
once, walks only the linear recurrence ``h_t = a_t h_{t-1} + b_t`` in time (:func:`linear_scan`:
step by step, or Hillis–Steele doubling) and has a hand-written backward pass;
:class:`FusedScanCPU` (``method="fused"``), the same maths in one C++ pass over time per sequence; and,
on a GPU, the same pass as two Triton kernels (``method="triton"``, :mod:`windtunnel.models.scan_triton`).
All decays are ``exp`` of non-positive numbers, so nothing can overflow however large ``ΔA`` grows.
:func:`selective_scan` picks one (``method="auto"``); the Mamba block (:mod:`windtunnel.models.mamba`)
calls it, or the gated form below, and asks for the states ``[B,T,d_inner,d_state]`` only when its
``hook_state`` is hooked.

On CPU the default path is the fused C++ kernel (``selective_scan_cpu.cpp``, compiled on first use by
:func:`cpu_kernel`, ``WINDTUNNEL_NO_KERNEL=1`` turns it off): :func:`gated_selective_scan` takes the
mixer from the raw ``W_{dt}`` output to the gated output — softplus, the recurrence, the read-out and
the SiLU gate — in one pass over time per sequence, forward and backward, with the state laid out so
the inner loops run over channels; the causal convolution is shift-and-add on the ``[B,T,d_inner]``
layout (:func:`causal_depthwise_conv`), fused with its SiLU in the same kernel (:func:`conv_silu`).
All are tested against the reference (values and every gradient).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import warnings

import torch
import torch.nn.functional as F

from ..errors import InvalidValue

SCAN_METHODS = ("auto", "fused", "loop", "doubling", "triton")


# --- selective scans -----------------------------------------------------------------------------
def selective_scan_ref(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    return_states: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Reference selective scan, one time step at a time (``h_0 = 0``).

    ``u, delta [B,T,Di]``, ``A [Di,N]``, ``B, C [B,T,N]``, ``D [Di]`` ->
    ``y [B,T,Di]`` (and states ``h [B,T,Di,N]`` if ``return_states``), with
    :math:`h_t = \exp(\Delta_t A) h_{t-1} + \Delta_t u_t B_t`, :math:`y_t = h_t C_t + D u_t`.
    """
    Bsz, T, Di = u.shape
    h = u.new_zeros(Bsz, Di, A.shape[1])
    ys, hs = [], []
    for t in range(T):
        dA = torch.exp(delta[:, t, :, None] * A)
        h = dA * h + (delta[:, t] * u[:, t])[:, :, None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1))
        if return_states:
            hs.append(h)
    y = torch.stack(ys, dim=1) + D * u
    return (y, torch.stack(hs, dim=1)) if return_states else y


def linear_scan(a: torch.Tensor, b: torch.Tensor, method: str = "loop") -> torch.Tensor:
    r"""The first-order linear recurrence along dim 0: :math:`h_t = a_t \odot h_{t-1} + b_t`, ``h_{-1} = 0``.

    ``method="loop"`` walks time with one fused multiply-add per step into a preallocated
    output (each step's slice is contiguous, so it stays in cache); ``"doubling"`` is the
    Hillis–Steele parallel scan: ``ceil(log2 T)`` passes over the whole tensor, each combining
    element ``t`` with element ``t - d`` by :math:`(a, b) \circ (a', b') = (a a', a b' + b)`.
    Every coefficient product stays a product of decays in ``[0, 1]`` (no division, no
    exponent of a sum), so neither method can overflow.  Not differentiable by itself: it is the
    kernel of :class:`SelectiveScan`'s forward and backward passes.
    """
    T = a.shape[0]
    if method == "doubling":
        h, a = b.clone(), a.clone()
        d = 1
        while d < T:
            h[d:] = torch.addcmul(h[d:], a[d:], h[:-d])
            a[d:] = a[d:] * a[:-d]
            d *= 2
        return h
    h = torch.empty_like(b)
    h[0] = b[0]
    for t in range(1, T):
        torch.addcmul(b[t], a[t], h[t - 1], out=h[t])
    return h


class SelectiveScan(torch.autograd.Function):
    r"""The selective scan with a hand-written backward pass, vectorised over time.

    Forward, in time-major layout (``[T,B,Di,N]``): the decays :math:`a_t = e^{\Delta_t A}` and
    inputs :math:`b_t = \Delta_t u_t B_t` for all ``t`` at once (one ``exp``, one outer
    product), the recurrence :math:`h_t = a_t h_{t-1} + b_t` (:func:`linear_scan`, the only
    sequential part), then :math:`y_t = h_t C_t + D u_t` as a batched matmul.  Backward, with
    :math:`g_t = \partial L / \partial h_t` (total) obeying the reverse recurrence
    :math:`g_t = \bar g_t + a_{t+1} g_{t+1}` where :math:`\bar g_t = (\partial L/\partial y_t) C_t^\top`
    plus any gradient arriving through the returned states:

    .. math::

        \partial_{C_t} = h_t^\top \partial_{y_t}, \quad
        \partial_{(\Delta u)_t} = g_t B_t, \quad \partial_{B_t} = g_t^\top (\Delta u)_t, \quad
        Z_t = g_t \odot h_{t-1} \odot a_t, \quad
        \partial_{\Delta_t} \mathrel{+}= \textstyle\sum_n Z_t A, \quad
        \partial_A = \textstyle\sum_{t,b} Z_t \Delta_t .

    Autograd never sees the ``T`` per-step operations, which is what made the step-by-step
    recurrence slow to train (a graph node per step and per operation).
    """

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, method):  # type: ignore[override]
        dt = delta.transpose(0, 1)  # [T,B,Di]
        du = (delta * u).transpose(0, 1)
        Bt, Ct = B.transpose(0, 1), C.transpose(0, 1)  # [T,B,N]
        a = torch.exp(dt[..., None] * A)  # [T,B,Di,N]
        b = du[..., None] * Bt[:, :, None, :]
        H = linear_scan(a, b, method)
        y = torch.matmul(H, Ct[..., None]).squeeze(-1).transpose(0, 1) + D * u
        ctx.save_for_backward(u, delta, A, B, C, D, a, H)
        ctx.method = method
        ctx.set_materialize_grads(False)  # the states are usually not used: no zero gradient for them
        return y, H.transpose(0, 1)

    @staticmethod
    def backward(ctx, gy, gH_out):  # type: ignore[override]
        u, delta, A, B, C, D, a, H = ctx.saved_tensors
        if gy is None:
            gy = torch.zeros_like(u)
        gyt = gy.transpose(0, 1)  # [T,B,Di]
        Bt, Ct = B.transpose(0, 1), C.transpose(0, 1)
        dt, du = delta.transpose(0, 1), (delta * u).transpose(0, 1)
        gbar = gyt[..., None] * Ct[:, :, None, :]  # [T,B,Di,N]
        if gH_out is not None:
            gbar = gbar + gH_out.transpose(0, 1)
        # reverse recurrence g_t = gbar_t + a_{t+1} g_{t+1}: a forward scan on the flipped sequence
        a_next = torch.zeros_like(a)
        a_next[:-1] = a[1:]
        g = linear_scan(a_next.flip(0), gbar.flip(0), ctx.method).flip(0)
        gC = torch.matmul(H.transpose(-1, -2), gyt[..., None]).squeeze(-1)  # [T,B,N]
        gdu = torch.matmul(g, Bt[..., None]).squeeze(-1)  # [T,B,Di]
        gB = torch.matmul(g.transpose(-1, -2), du[..., None]).squeeze(-1)  # [T,B,N]
        Z = torch.zeros_like(g)
        torch.mul(g[1:], H[:-1], out=Z[1:])
        Z.mul_(a)  # dL/d(Delta A)
        gdelta = (Z * A).sum(-1) + gdu * u.transpose(0, 1)  # [T,B,Di]
        gA = (Z * dt[..., None]).sum((0, 1))
        gu = gdu * dt
        gD = (gy * u).sum((0, 1))
        gu = gu.transpose(0, 1) + gy * D
        return gu, gdelta.transpose(0, 1), gA, gB.transpose(0, 1), gC.transpose(0, 1), gD, None


_KERNEL: dict[str, object] = {}


def cpu_kernel() -> object | None:
    """The fused C++ scan (``selective_scan_cpu.cpp``), compiled on first use with the PyTorch
    C++ extension tools and cached by them; ``None`` where it cannot be built (no compiler or
    ninja) or ``WINDTUNNEL_NO_KERNEL=1`` is set — then the pure-PyTorch scan is used instead.

    Built with OpenMP: ``at::parallel_for`` is a header template, so an extension compiled without
    ``-fopenmp`` runs its loop over sequences on one thread whatever ``torch.get_num_threads()``
    says (measured: the same 36 ms on one and two threads; 19 ms on two with OpenMP).  It links
    the ``libgomp.so.1`` PyTorch has already loaded.  A compiler without OpenMP gets the serial build."""
    if "mod" not in _KERNEL:
        mod = None
        if os.environ.get("WINDTUNNEL_NO_KERNEL", "") in ("", "0"):
            from torch.utils.cpp_extension import load

            src = os.path.join(os.path.dirname(__file__), "selective_scan_cpu.cpp")
            flags = ["-O3", "-ffast-math", "-march=native"]
            errors = []
            if not _kernel_built("windtunnel_selective_scan_omp"):  # the first use waits for a compiler: say so
                print("windtunnel: compiling the fused Mamba scan for this machine (once, about 30 s; "
                      "cached by PyTorch's extension builder)", file=sys.stderr, flush=True)
            for omp in (["-fopenmp"], []):
                try:
                    mod = load("windtunnel_selective_scan" + ("_omp" if omp else ""), [src], extra_cflags=flags + omp,
                               extra_ldflags=omp, verbose=False)
                    break
                except Exception as exc:  # a build failure must not stop training: fall back, say so once
                    errors.append(f"{type(exc).__name__}: {exc}")
            if mod is None:
                warnings.warn(f"windtunnel: fused CPU scan unavailable ({errors[-1]}); using the pure-PyTorch scan",
                              stacklevel=2)
        _KERNEL["mod"] = mod
    return _KERNEL["mod"]


def _kernel_built(name: str) -> bool:
    """Whether PyTorch's extension cache already holds the compiled module ``name``."""
    try:
        from torch.utils.cpp_extension import _get_build_directory

        folder = _get_build_directory(name, verbose=False)
    except Exception:  # noqa: BLE001 - a private helper: when it moves, assume a build is needed
        return False
    return any(f.endswith(".so") for f in os.listdir(folder)) if os.path.isdir(folder) else False


def kernel_threads() -> int:
    """How many threads the fused kernel's loop over 64 sequences runs on (asked of the kernel
    itself): ``torch.get_num_threads()`` when it was built with OpenMP, else 1; 0 without a kernel."""
    mod = cpu_kernel()
    return 0 if mod is None else int(mod.parallel_width(64))  # type: ignore[attr-defined]


def _scan_precision(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    r"""The scan's inputs in the one dtype it runs in: float64 where any input is (a float64 model), else
    float32 — also the bf16 that autocast makes of the projections on a GPU.  The hand-written backward
    passes need one dtype across their saved tensors, and the decays :math:`e^{\Delta A}` compound over
    every step, so the scan keeps float32 as Mamba's own kernels do."""
    dtype = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
    return tuple(t.to(dtype) for t in tensors)


def _kernel_takes(*tensors: torch.Tensor) -> bool:
    """Whether the fused CPU kernel handles these tensors: CPU, one float dtype (32 or 64 bit)."""
    dtype = tensors[0].dtype
    return all(t.device.type == "cpu" and t.dtype == dtype for t in tensors) and dtype in (torch.float32, torch.float64)


class FusedScanCPU(torch.autograd.Function):
    """:class:`SelectiveScan`'s maths in one C++ pass over time per sequence, forward and backward
    (the state stays in cache instead of a dozen full-size tensors per step; the backward pass
    recomputes one sequence's states at a time rather than storing them all).  ``gated``: the
    arguments are ``(u, delta_raw, A, B, C, D, z)`` and the kernel also applies softplus on the
    way in and the SiLU gate on the way out (:func:`gated_selective_scan`)."""

    @staticmethod
    def forward(ctx, gated, *tensors):  # type: ignore[override]
        kernel = cpu_kernel()
        args = [t.contiguous() for t in tensors]
        ctx.save_for_backward(*args)
        ctx.gated = gated
        return (kernel.forward_gated if gated else kernel.forward)(*args)  # type: ignore[attr-defined]

    @staticmethod
    def backward(ctx, gout):  # type: ignore[override]
        kernel = cpu_kernel()
        backward = kernel.backward_gated if ctx.gated else kernel.backward  # type: ignore[attr-defined]
        return (None, *backward(*ctx.saved_tensors, gout.contiguous()))


_RAN: dict[str, None] = {}
"""The scans run in this process since :func:`scans_run` last reset it, in the order first run (an ordered set)."""
_TRITON_VERDICTS: dict[str, str | None] = {}
"""Per device, why the Triton scan was refused there (``None``: it passed its self-check)."""


def scans_run(reset: bool = False) -> list[str]:
    """The scans this process ran since the last reset — ``fused C++ kernel``, ``PyTorch reference``, ``Triton
    kernels``, ``loop``, ``doubling``, a GPU's ``loop`` saying why Triton was refused there — and, with ``reset``,
    forget them (a training loop resets before its first step and reads after it: what that run's model ran)."""
    ran = list(_RAN)
    if reset:
        _RAN.clear()
    return ran


def _ran(name: str) -> None:
    _RAN.setdefault(name, None)


def gated_selective_scan(
    u: torch.Tensor,
    delta_raw: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    z: torch.Tensor,
    method: str = "auto",
) -> torch.Tensor:
    r"""The mixer's middle in one call: :math:`\mathrm{scan}(u, \mathrm{softplus}(\delta_{raw}), A, B, C, D)
    \odot \mathrm{SiLU}(z)` (the official kernels' ``delta_softplus`` and ``z`` options).

    On CPU float tensors with the fused kernel available (``method`` ``auto`` or ``fused``) it is
    one C++ pass per sequence; otherwise the same maths composed from :func:`selective_scan`."""
    with torch.autocast(u.device.type, enabled=False):  # the scan runs in its own precision (_scan_precision)
        u, delta_raw, A, B, C, D, z = _scan_precision(u, delta_raw, A, B, C, D, z)
        if method in ("auto", "fused") and _kernel_takes(u) and cpu_kernel() is not None:
            _ran("fused C++ kernel")
            return FusedScanCPU.apply(True, u, delta_raw, A, B, C, D, z)
        return selective_scan(u, F.softplus(delta_raw), A, B, C, D, method=method) * F.silu(z)


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    return_states: bool = False,
    method: str = "auto",
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Fast selective scan (same contract as :func:`selective_scan_ref`).

    ``method``: ``"fused"`` — the C++ kernel (:class:`FusedScanCPU`; CPU tensors, states not
    returned); ``"loop"`` / ``"doubling"`` — :class:`SelectiveScan` with that recurrence walk
    (:func:`linear_scan`); ``"triton"`` — the Triton kernels (:mod:`windtunnel.models.scan_triton`:
    one launch per pass instead of one per position; a GPU, states not returned); ``"auto"``
    (default) — ``fused`` where it applies and can be built, else the reference on a CPU (which
    beats ``loop`` there), ``triton`` on a GPU where it passes its self-check against the
    reference, and ``loop`` elsewhere.  Measured
    with ``benchmarks/mamba_scan.py``: on one CPU thread at the quick HMM shape, fused 5.2× the
    reference, ``loop`` 0.36×, ``doubling`` 0.19×; no GPU has measured ``loop`` yet.
    """
    if method not in SCAN_METHODS:
        raise InvalidValue(f"invalid method: must be one of {', '.join(SCAN_METHODS)}, got {method!r}")
    with torch.autocast(u.device.type, enabled=False):  # the scan runs in its own precision (_scan_precision)
        return _selective_scan(*_scan_precision(u, delta, A, B, C, D), return_states, method)


def _selective_scan(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                    D: torch.Tensor, return_states: bool, method: str) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    fusable = not return_states and _kernel_takes(u)
    if method == "fused" and not fusable:
        raise InvalidValue("invalid method: 'fused' needs CPU float tensors and return_states=False")
    if method in ("auto", "fused") and fusable and cpu_kernel() is not None:
        _ran("fused C++ kernel")
        return FusedScanCPU.apply(False, u, delta, A, B, C, D)
    if method == "fused":
        raise RuntimeError("the fused CPU scan could not be built (see the warning above)")
    if method == "triton" or (method == "auto" and _triton_takes(u, A, return_states)):
        from .scan_triton import selective_scan_triton

        if return_states:
            raise InvalidValue("invalid method: 'triton' does not return the states (return_states=False)")
        if u.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise InvalidValue("invalid method: 'triton' needs a CUDA device (or TRITON_INTERPRET=1, Triton's CPU "
                               "interpreter)")
        _ran("Triton kernels")
        return selective_scan_triton(u, delta, A, B, C, D)
    if method == "auto" and u.device.type == "cpu":  # measured faster than SelectiveScan on a CPU
        _ran("PyTorch reference")
        return selective_scan_ref(u, delta, A, B, C, D, return_states=return_states)
    walk = "doubling" if method == "doubling" else "loop"
    refused = _TRITON_VERDICTS.get(str(u.device)) if method == "auto" else None
    _ran(f"{walk} (Triton refused: {refused})" if refused else walk)
    y, H = SelectiveScan.apply(u, delta, A, B, C, D, walk)
    return (y, H) if return_states else y


def _triton_takes(u: torch.Tensor, A: torch.Tensor, return_states: bool) -> bool:
    """Whether ``auto`` takes the Triton scan: float32 on a GPU where it passed its self-check, no states asked
    for, and every state's index within 32 bits."""
    if return_states or u.device.type != "cuda" or u.dtype != torch.float32 or u.numel() * A.shape[1] >= 2**31:
        return False
    return triton_available(str(u.device))


def _triton_scan(*args: torch.Tensor) -> torch.Tensor:
    from .scan_triton import selective_scan_triton  # Triton imports only where it is used

    return selective_scan_triton(*args)


def triton_self_check(device: torch.device | str, tolerance: float = 1e-3) -> str | None:
    """``None`` when the Triton scan (:mod:`windtunnel.models.scan_triton`) reproduces the reference scan on
    ``device`` — values and every gradient, on a small random problem with uneven sizes (37 channels, not a multiple
    of a block; ``N`` = 5, not a power of two; 37 positions, two whole chunks of the kernels' recomputation and a
    short one) — else what differed, relative to each output's largest magnitude."""
    g = torch.Generator().manual_seed(0)
    Bsz, T, Di, N = 2, 37, 37, 5
    shapes = {"u": (Bsz, T, Di), "delta": (Bsz, T, Di), "A": (Di, N), "B": (Bsz, T, N), "C": (Bsz, T, N), "D": (Di,)}
    base = {k: torch.randn(*s, generator=g, dtype=torch.float64) for k, s in shapes.items()}
    base["delta"] = torch.nn.functional.softplus(base["delta"])
    base["A"] = -torch.exp(base["A"])
    weight = torch.randn(Bsz, T, Di, generator=g, dtype=torch.float64)
    grads = []
    for fn, dev, dtype in ((selective_scan_ref, "cpu", torch.float64), (_triton_scan, device, torch.float32)):
        xs = {k: v.to(dev, dtype, copy=True).requires_grad_() for k, v in base.items()}
        y = fn(*xs.values())
        (y * weight.to(dev, dtype)).sum().backward()
        grads.append({"y": y.detach().double().cpu(), **{k: v.grad.double().cpu() for k, v in xs.items()}})
    for k, ref in grads[0].items():
        err = float((grads[1][k] - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
        if not err <= tolerance:
            return f"{k} differs from the reference by {err:.2g} (relative)"
    return None


@functools.lru_cache(maxsize=None)
def triton_available(device: str) -> bool:
    """Whether ``device`` runs the Triton scan: a GPU, Triton importable, and :func:`triton_self_check` passed there
    (once per device and process; :func:`triton_refusal` says why not)."""
    if not device.startswith("cuda"):
        return False
    return _checked_outside_transforms(device)


def triton_refusal(device: str) -> str | None:
    """Why ``auto`` does not take the Triton scan on ``device`` (checking it there first): ``None`` where it does,
    else the reason — not a GPU, Triton failing to import or compile, or the self-check's difference."""
    if not device.startswith("cuda"):
        return "not a CUDA device"
    if triton_available(device):
        return None
    return _TRITON_VERDICTS.get(device) or "its self-check failed"


def _checked_outside_transforms(device: str) -> bool:
    """:func:`triton_self_check` passed on ``device``.  The first scan of a stacked model runs inside
    ``torch.func.vmap``, where the check's random inputs would be batched and its ``backward`` refused: there it
    runs in a thread of its own, which no transform of this one reaches (the transforms are per thread)."""
    verdict: list[bool] = []

    def check() -> None:
        try:
            with torch.cuda.device(device) if device.startswith("cuda") else contextlib.nullcontext():
                # a new thread starts on device 0, and Triton launches on the current device, not the tensors'
                differs = triton_self_check(device)
            _TRITON_VERDICTS[device] = None if differs is None else f"its self-check: {differs}"
        except Exception as exc:  # noqa: BLE001 - any failure to compile or run means: use the PyTorch scan
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")[:120]
            _TRITON_VERDICTS[device] = f"{type(exc).__name__}: {first}"
        verdict.append(_TRITON_VERDICTS[device] is None)

    if torch._C._are_functorch_transforms_active():
        worker = threading.Thread(target=check)
        worker.start()
        worker.join()
    else:
        check()
    return verdict[0]


# --- the causal convolution ------------------------------------------------------------------------
def causal_depthwise_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    r"""Mamba's short causal convolution per channel, on ``x [B,T,Di]`` in place of
    ``conv1d(x.transpose(1, 2))[..., :T]`` with ``weight [Di,1,K]``:

    .. math:: \mathrm{out}_{t,c} = b_c + \sum_{k=0}^{K-1} w_{c,k}\, x_{t-K+1+k,\,c}\quad (x_{<0} = 0).

    K shifted multiply-adds on the ``[B,T,Di]`` layout the block already has: no transposes, no
    copies, and measured 1.6× faster than the grouped ``Conv1d`` forward + backward on one CPU thread
    at the quick shape (the same function to float rounding; tested)."""
    T, K = x.shape[1], weight.shape[-1]
    xp = F.pad(x, (0, 0, K - 1, 0))
    w = weight[:, 0, :]
    out = xp[:, 0:T] * w[:, 0]
    for k in range(1, K):
        out = out + xp[:, k:k + T] * w[:, k]
    return out if bias is None else out + bias


class ConvSiLUCPU(torch.autograd.Function):
    """:func:`conv_silu` in one C++ pass per sequence, forward and backward (the backward pass
    recomputes the pre-activation instead of storing it)."""

    @staticmethod
    def forward(ctx, x, weight, bias):  # type: ignore[override]
        x, wT = x.contiguous(), weight[:, 0, :].t().contiguous()  # [B,T,Di], [K,Di]
        ctx.save_for_backward(x, wT, bias)
        return cpu_kernel().conv_silu_forward(x, wT, bias)  # type: ignore[attr-defined]

    @staticmethod
    def backward(ctx, gout):  # type: ignore[override]
        x, wT, bias = ctx.saved_tensors
        gx, gwT, gbias = cpu_kernel().conv_silu_backward(x, wT, bias, gout.contiguous())  # type: ignore[attr-defined]
        return gx, gwT.t().unsqueeze(1), gbias


def conv_silu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    r""":math:`\mathrm{SiLU}(\mathrm{conv}(x))` with :func:`causal_depthwise_conv`: the fused C++
    pass on CPU float tensors where the kernel is available, else the two composed."""
    if _kernel_takes(x, weight) and cpu_kernel() is not None:
        return ConvSiLUCPU.apply(x, weight, bias)
    return F.silu(causal_depthwise_conv(x, weight, bias))
