r"""Mamba's selective scan as two Triton kernels, for GPUs without Mamba's own CUDA build.

The same recurrence as every scan in :mod:`windtunnel.models.scans`, with ``h_{-1} = 0``,

.. math:: h_t = e^{\Delta_t A} \odot h_{t-1} + (\Delta_t u_t) \otimes B_t, \qquad y_t = h_t C_t + D \odot u_t ,

but walked in one kernel launch instead of one (or several) per position: each program owns one sequence and a
block of channels, keeps their states ``[BLOCK_D, N]`` in registers and steps through time, so a step of a small
Mamba on a GPU is no longer bound by ``T`` kernel launches.  The forward kernel writes ``y`` and the state at the
end of every chunk of :data:`CHUNK` positions only — not the states of every position, ``[B,T,Di,N]`` in float32,
which for the recall stack were gigabytes a layer written and read back each step.  The backward kernel walks the
chunks in reverse: it recomputes a chunk's states from the state before it into a scratch buffer of one chunk per
program, then walks the chunk's positions in reverse with the total state gradient
:math:`g_t = (\partial L/\partial y_t) C_t^\top + e^{\Delta_{t+1} A} g_{t+1}` and writes every input's gradient —
the per-channel ones directly, the ones summed over channels (``B``, ``C``) or over sequences and time (``A``,
``D``) as per-program partial sums that PyTorch adds up (no atomics, so the result does not depend on scheduling).
The recomputation costs one more forward walk of the recurrence; the states kept shrink ``CHUNK``-fold.

Everything is computed in float32.  Triton ships with PyTorch's CUDA wheels; ``TRITON_INTERPRET=1`` runs the same
kernels on a CPU (slowly), which is how the tests hold them to the reference scan on machines without a GPU.
:func:`windtunnel.models.scans.triton_available` says whether a device uses them: Triton imports and, on first use
per device, the kernels reproduce the reference scan's values and gradients on a small random problem.
"""

from __future__ import annotations

from typing import Any

import torch

from .base import members_first

try:  # Triton ships with PyTorch's CUDA wheels; elsewhere it is optional
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where Triton is not installed
    triton = None  # type: ignore[assignment]


if triton is not None:

    @triton.jit
    def _forward_kernel(u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, y_ptr, Hc_ptr, T, Di, N, per,
                        BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr):
        b = tl.program_id(0)
        grp = b // per  # the model this sequence belongs to (its A and D)
        d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
        n = tl.arange(0, BLOCK_N)
        dm, nm = d < Di, n < N
        dn = dm[:, None] & nm[None, :]
        A = tl.load(A_ptr + (grp * Di + d[:, None]) * N + n[None, :], mask=dn, other=0.0)
        Dv = tl.load(D_ptr + grp * Di + d, mask=dm, other=0.0)
        n_chunks = tl.cdiv(T, CHUNK)
        h = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)
        for t in range(T):
            row = b * T + t
            u = tl.load(u_ptr + row * Di + d, mask=dm, other=0.0)
            dl = tl.load(delta_ptr + row * Di + d, mask=dm, other=0.0)
            Bt = tl.load(B_ptr + row * N + n, mask=nm, other=0.0)
            Ct = tl.load(C_ptr + row * N + n, mask=nm, other=0.0)
            h = tl.exp(dl[:, None] * A) * h + (dl * u)[:, None] * Bt[None, :]
            tl.store(y_ptr + row * Di + d, tl.sum(h * Ct[None, :], axis=1) + Dv * u, mask=dm)
            # the state at the end of chunk t // CHUNK: where the backward pass starts recomputing the next chunk
            kept = (b * n_chunks + t // CHUNK) * Di
            tl.store(Hc_ptr + (kept + d[:, None]) * N + n[None, :], h, mask=dn & ((d[:, None] * 0 + t + 1) % CHUNK == 0))

    @triton.jit
    def _backward_kernel(u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, Hc_ptr, S_ptr, gy_ptr,
                         gu_ptr, gdelta_ptr, gA_ptr, gB_ptr, gC_ptr, gD_ptr, T, Di, N, n_blocks, per,
                         BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr):
        b = tl.program_id(0)
        grp = b // per
        blk = tl.program_id(1)
        d = blk * BLOCK_D + tl.arange(0, BLOCK_D)
        n = tl.arange(0, BLOCK_N)
        dm, nm = d < Di, n < N
        dn = dm[:, None] & nm[None, :]
        A = tl.load(A_ptr + (grp * Di + d[:, None]) * N + n[None, :], mask=dn, other=0.0)
        Dv = tl.load(D_ptr + grp * Di + d, mask=dm, other=0.0)
        n_chunks = tl.cdiv(T, CHUNK)
        # this program's scratch: the states of one chunk, [CHUNK, BLOCK_D, BLOCK_N]
        local = tl.arange(0, BLOCK_D)[:, None] * BLOCK_N + n[None, :]
        scratch = S_ptr + (b * n_blocks + blk) * CHUNK * BLOCK_D * BLOCK_N
        carry = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)  # e^{Δ_{t+1} A} g_{t+1}
        gA = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)
        gD = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for ci in range(n_chunks):
            c = n_chunks - 1 - ci
            # the state before the chunk: kept by the forward pass at the end of the chunk before (h_{-1} = 0)
            before = (b * n_chunks + tl.maximum(c - 1, 0)) * Di
            start = tl.load(Hc_ptr + (before + d[:, None]) * N + n[None, :], mask=dn & (d[:, None] * 0 + c > 0), other=0.0)
            h = start
            for k in range(CHUNK):  # recompute the chunk's states (positions past T: masked, never read)
                t = c * CHUNK + k
                live_d, live_n = d * 0 + t < T, n * 0 + t < T  # (masks must be tensors)
                row = b * T + t
                u = tl.load(u_ptr + row * Di + d, mask=dm & live_d, other=0.0)
                dl = tl.load(delta_ptr + row * Di + d, mask=dm & live_d, other=0.0)
                Bt = tl.load(B_ptr + row * N + n, mask=nm & live_n, other=0.0)
                h = tl.exp(dl[:, None] * A) * h + (dl * u)[:, None] * Bt[None, :]
                tl.store(scratch + k * BLOCK_D * BLOCK_N + local, h)
            tl.debug_barrier()  # the chunk's states are written before any thread reads them back
            for kk in range(CHUNK):
                k = CHUNK - 1 - kk
                t = c * CHUNK + k
                live_d, live_n = d * 0 + t < T, n * 0 + t < T  # (masks must be tensors)
                row = b * T + t
                u = tl.load(u_ptr + row * Di + d, mask=dm & live_d, other=0.0)
                dl = tl.load(delta_ptr + row * Di + d, mask=dm & live_d, other=0.0)
                gy = tl.load(gy_ptr + row * Di + d, mask=dm & live_d, other=0.0)
                Bt = tl.load(B_ptr + row * N + n, mask=nm & live_n, other=0.0)
                Ct = tl.load(C_ptr + row * N + n, mask=nm & live_n, other=0.0)
                h = tl.load(scratch + k * BLOCK_D * BLOCK_N + local)
                h_prev = tl.load(scratch + tl.maximum(k - 1, 0) * BLOCK_D * BLOCK_N + local)
                h_prev = tl.where(k > 0, h_prev, start)
                a = tl.exp(dl[:, None] * A)
                g = gy[:, None] * Ct[None, :] + carry
                part = (b * n_blocks + blk) * T + t  # this program's partial sums over its channels
                tl.store(gC_ptr + part * N + n, tl.sum(gy[:, None] * h, axis=0), mask=nm & live_n)
                tl.store(gB_ptr + part * N + n, tl.sum(g * (dl * u)[:, None], axis=0), mask=nm & live_n)
                gdu = tl.sum(g * Bt[None, :], axis=1)
                Z = g * h_prev * a  # ∂L/∂(Δ_t A)
                tl.store(gdelta_ptr + row * Di + d, tl.sum(Z * A, axis=1) + gdu * u, mask=dm & live_d)
                tl.store(gu_ptr + row * Di + d, gdu * dl + gy * Dv, mask=dm & live_d)
                gA += Z * dl[:, None]
                gD += gy * u
                carry = a * g
            tl.debug_barrier()  # every read of this chunk's states is done before the next chunk overwrites them
        tl.store(gA_ptr + (b * Di + d[:, None]) * N + n[None, :], gA, mask=dn)
        tl.store(gD_ptr + b * Di + d, gD, mask=dm)


BLOCK_D = 32
"""Channels per program: one program per (sequence, block of channels)."""
CHUNK = 16
"""Positions per chunk: the forward pass keeps the state at the end of each chunk (``[B, ⌈T/CHUNK⌉, Di, N]``), the
backward pass recomputes one chunk's states at a time per program (``[CHUNK, BLOCK_D, BLOCK_N]``)."""


def _block_n(N: int) -> int:
    return max(16, 1 << (N - 1).bit_length())  # a power of two ≥ N (Triton's blocks are powers of two)


INDEX_LIMIT = 2**31
"""The kernels index their inputs and the states they keep in 32 bits (kept under ``B·T·Di·N``, the states of
every position, which bounds both)."""


class TritonScan(torch.autograd.Function):
    """The selective scan through :func:`_forward_kernel` and :func:`_backward_kernel` (float32, contiguous), for
    ``G`` models at once: ``A [G,Di,N]`` and ``D [G,Di]``, sequence ``b`` of ``u [B,T,Di]`` belonging to model
    ``b // (B/G)``.  One model is ``G = 1``; under ``torch.func.vmap`` (stacked members, each its own ``A`` and
    ``D``) :meth:`vmap` folds the members into the sequences and makes one launch of them all, where a function
    without a vmap rule would run the whole forward pass member by member.  Returns ``y`` and the states kept at the
    ends of the chunks, ``Hc [B, ⌈T/CHUNK⌉, Di, N]`` (which the backward pass recomputes from; not differentiable)."""

    @staticmethod
    def forward(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                D: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        Bsz, T, Di = u.shape
        G, _, N = A.shape
        y = torch.empty_like(u)
        Hc = torch.empty(Bsz, triton.cdiv(T, CHUNK), Di, N, dtype=torch.float32, device=u.device)
        grid = (Bsz, triton.cdiv(Di, BLOCK_D))
        _forward_kernel[grid](u, delta, A, B, C, D, y, Hc, T, Di, N, Bsz // G, BLOCK_D=BLOCK_D, BLOCK_N=_block_n(N),
                              CHUNK=CHUNK)
        return y, Hc

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(*inputs, output[1])

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor, _gH: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        u, delta, A, B, C, D, Hc = ctx.saved_tensors
        Bsz, T, Di = u.shape
        G, _, N = A.shape
        blocks = triton.cdiv(Di, BLOCK_D)
        scratch = torch.empty(Bsz, blocks, CHUNK, BLOCK_D, _block_n(N), dtype=torch.float32, device=u.device)
        gy = gy.float().contiguous()
        gu, gdelta = torch.empty_like(u), torch.empty_like(u)
        gA = torch.empty(Bsz, Di, N, dtype=torch.float32, device=u.device)
        gD = torch.empty(Bsz, Di, dtype=torch.float32, device=u.device)
        gB = torch.empty(Bsz, blocks, T, N, dtype=torch.float32, device=u.device)
        gC = torch.empty_like(gB)
        _backward_kernel[(Bsz, blocks)](u, delta, A, B, C, D, Hc, scratch, gy, gu, gdelta, gA, gB, gC, gD, T, Di, N,
                                        blocks, Bsz // G, BLOCK_D=BLOCK_D, BLOCK_N=_block_n(N), CHUNK=CHUNK)
        # A and D: each model's sum over its own sequences
        return (gu, gdelta, gA.view(G, Bsz // G, Di, N).sum(1), gB.sum(1), gC.sum(1),
                gD.view(G, Bsz // G, Di).sum(1))

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, ...], *args: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], tuple[int, int]]:
        """Members ``M`` folded into the sequences (``u [M,B,T,Di] -> [M·B,T,Di]``) and into the models
        (``A [M,G,Di,N] -> [M·G,Di,N]``): one launch for the whole stack, sequence ``m·B + b`` reading member
        ``m``'s ``A`` and ``D``.  Where the folded states would overflow the kernels' 32-bit index, one launch
        per member."""
        M = info.batch_size
        u, delta, A, B, C, D = members_first(M, in_dims, args)
        Bsz = u.shape[1]
        if M * u[0].numel() * A.shape[-1] >= INDEX_LIMIT:
            outs = [TritonScan.apply(*(x[i].contiguous() for x in (u, delta, A, B, C, D))) for i in range(M)]
            return (torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs])), (0, 0)
        y, H = TritonScan.apply(*(x.reshape(M * x.shape[1], *x.shape[2:]).contiguous() for x in (u, delta, A, B, C, D)))
        return (y.view(M, Bsz, *y.shape[1:]), H.view(M, Bsz, *H.shape[1:])), (0, 0)


def selective_scan_triton(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                          D: torch.Tensor) -> torch.Tensor:
    """``y [B,T,Di]`` of the selective scan (:func:`windtunnel.models.scans.selective_scan_ref`'s contract, states
    not returned), in float32 through the Triton kernels."""
    if triton is None:
        raise RuntimeError("the Triton scan needs Triton (it ships with PyTorch's CUDA wheels)")
    u, delta, A, B, C, D = (t.float().contiguous() for t in (u, delta, A.unsqueeze(0), B, C, D.unsqueeze(0)))
    return TritonScan.apply(u, delta, A, B, C, D)[0]
