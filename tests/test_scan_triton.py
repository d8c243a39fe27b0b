"""The Triton selective scan held to the step-by-step reference without a GPU: Triton's interpreter
(``TRITON_INTERPRET=1``, which must be set before the kernels are defined, hence a fresh process) runs the very kernels a
GPU compiles.  Values and all six gradients at uneven sizes, huge decays, a Mamba trained through it against the same
Mamba through the PyTorch scan, and its own self-check; in this process, the one-line refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from windtunnel.models.scans import selective_scan

pytest.importorskip("triton")

CHECKS = r"""
import json, torch
from windtunnel import models, tasks
from windtunnel.models.scans import selective_scan, selective_scan_ref, triton_self_check

def inputs(B, T, Di, N, scale, seed):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(B, T, Di, generator=g)
    delta = torch.nn.functional.softplus(torch.randn(B, T, Di, generator=g)) * scale
    A = -torch.exp(torch.randn(Di, N, generator=g))
    Bm, C = torch.randn(B, T, N, generator=g), torch.randn(B, T, N, generator=g)
    return [u, delta, A, Bm, C, torch.randn(Di, generator=g)]

out = {}
for name, shape in {"uneven": (3, 9, 70, 5, 1.0), "one_step": (2, 1, 8, 16, 1.0), "long": (1, 130, 33, 16, 1.0),
                    "huge_decay": (2, 11, 6, 4, 200.0)}.items():
    base = inputs(*shape, seed=len(name))
    w = torch.randn(*base[0].shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    got, ref = [x.clone().requires_grad_() for x in base], [x.clone().double().requires_grad_() for x in base]
    y = selective_scan(*got, method="triton")
    y0 = selective_scan_ref(*ref)
    gs = torch.autograd.grad((y.double() * w).sum(), got)
    g0 = torch.autograd.grad((y0 * w).sum(), ref)
    out[name] = {k: float((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-12))
                 for k, a, b in zip(["y", "u", "delta", "A", "B", "C", "D"], [y, *gs], [y0, *g0])}
    out[name]["finite"] = bool(all(torch.isfinite(g).all() for g in gs))

from windtunnel.models.scan_triton import CHUNK, TritonScan
x = inputs(2, 130, 33, 16, 1.0, seed=1)
kept = TritonScan.apply(*(t.float().contiguous() for t in (x[0], x[1], x[2].unsqueeze(0), x[3], x[4], x[5].unsqueeze(0))))[1]
out["kept"] = {"shape": list(kept.shape), "chunk": CHUNK}

task = tasks.make("bijection", V=6, L=5)
torch.manual_seed(0)
model = models.make("mamba", task, params=20_000)
ep = task.sample(4, seed=0)
losses = {}
for method in ("loop", "triton"):
    for m in model.modules():
        if hasattr(m, "scan_method"):
            m.scan_method = method
    model.zero_grad()
    logits = model(**ep.inputs)
    logits.float().logsumexp(-1).sum().backward()
    losses[method] = (logits.detach().double(), [p.grad.detach().double().clone() for p in model.parameters()])
out["model"] = {"logits": float((losses["triton"][0] - losses["loop"][0]).abs().max()),
                "grads": max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))
                             for a, b in zip(losses["triton"][1], losses["loop"][1]))}
with torch.autocast("cpu", dtype=torch.bfloat16):
    mixed = model(**ep.inputs)
out["model"]["bf16_finite"] = bool(torch.isfinite(mixed.float()).all())
out["self_check"] = triton_self_check("cpu")

# stacked members (torch.func.vmap over the stacked parameters, as windtunnel.training.stacked runs them): one launch
# per layer for the whole stack, each member's logits and gradients those of the same model alone
import copy
from torch.func import functional_call, stack_module_state, vmap
from windtunnel.models import scan_triton
members = [models.make("mamba", task, params=20_000) for _ in range(3)]
for i, m in enumerate(members):
    for mod in m.modules():
        if hasattr(mod, "scan_method"):
            mod.scan_method = "triton"
            with torch.no_grad():  # A and D start equal in every model: each member its own, as training makes them
                mod.A_log.add_(0.3 * i * torch.randn(mod.A_log.shape))
                mod.D.add_(0.5 * i)
params, buffers = stack_module_state(members)
base = copy.deepcopy(members[0])
launches = []
forward = scan_triton.TritonScan.forward
scan_triton.TritonScan.forward = staticmethod(lambda *a: launches.append(a[0].shape[0]) or forward(*a))
stacked = vmap(lambda p, b, x: functional_call(base, (p, b), (), x))(
    params, buffers, {k: torch.stack([v] * 3) for k, v in ep.inputs.items()})
scan_triton.TritonScan.forward = staticmethod(forward)
stacked.float().logsumexp(-1).sum().backward()
errors = []
for i, m in enumerate(members):
    alone = m(**ep.inputs)
    alone.float().logsumexp(-1).sum().backward()
    errors.append(float((stacked[i] - alone).abs().max()))
    errors.extend(float((params[n].grad[i] - p.grad).abs().max() / p.grad.abs().max().clamp_min(1e-12))
                  for n, p in m.named_parameters())
out["stacked"] = {"error": max(errors), "launches": launches, "layers": len(members[0].blocks)}
# the self-check, first asked for inside the stacked forward pass, still runs (a GPU would otherwise fall back to the
# loop scan for the whole process)
from windtunnel.models.scans import _checked_outside_transforms
inside = []
vmap(lambda x: inside.append(_checked_outside_transforms("cpu")) or x * 2, randomness="different")(torch.randn(3, 2))
out["checked_inside_vmap"] = inside
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "WINDTUNNEL_NO_KERNEL": "1"}
    done = subprocess.run([sys.executable, "-c", CHECKS], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["uneven", "one_step", "long", "huge_decay"])
def test_the_triton_scan_equals_the_reference(interpreted: dict, case: str) -> None:
    """Values and all six gradients, relative to each one's largest magnitude, in float32 against float64: channels
    not a multiple of the block, ``N`` not a power of two, one step, 130 steps, decays in the hundreds."""
    errors = interpreted[case]
    assert errors.pop("finite")
    assert max(errors.values()) < 2e-5, errors


def test_the_forward_pass_keeps_the_state_of_each_chunk_not_of_each_position(interpreted: dict) -> None:
    """The states the backward pass needs are recomputed from one kept at the end of each chunk: ``⌈T/CHUNK⌉`` states
    a sequence and channel, not ``T`` (130 positions: 9 chunks of 16, the last one short — and the "long" case above
    holds the gradients recomputed across those chunks to the reference)."""
    kept = interpreted["kept"]
    chunks = -(-130 // kept["chunk"])
    assert kept["shape"] == [2, chunks, 33, 16] and 1 < chunks < 130


def test_a_mamba_through_the_triton_scan_is_the_same_mamba(interpreted: dict) -> None:
    assert interpreted["model"]["logits"] < 1e-4 and interpreted["model"]["grads"] < 1e-4, interpreted["model"]
    assert interpreted["model"]["bf16_finite"]  # autocast hands it bf16 projections: it scans in float32


def test_stacked_mambas_scan_in_one_launch_each_member_its_own_model(interpreted: dict) -> None:
    """Under ``vmap`` (a stack of three Mambas) the scan folds the members into its sequences: one launch per layer
    of 3 × 4 sequences, not the forward pass member by member, and each member's logits and gradients are those
    of the same model alone (fails if the kernels read member 0's ``A`` and ``D`` for every sequence, or if the
    gradients of ``A`` and ``D`` are summed across members)."""
    stacked = interpreted["stacked"]
    assert stacked["launches"] == [12] * stacked["layers"]
    assert stacked["error"] < 1e-4, stacked


def test_the_self_check_passes_where_the_kernels_are_right(interpreted: dict) -> None:
    assert interpreted["self_check"] is None
    assert interpreted["checked_inside_vmap"] == [True]


def test_the_triton_scan_refuses_what_it_cannot_do_in_one_line() -> None:
    xs = [torch.randn(2, 3, 4), torch.rand(2, 3, 4), -torch.rand(4, 2), torch.randn(2, 3, 2), torch.randn(2, 3, 2),
          torch.randn(4)]
    if os.environ.get("TRITON_INTERPRET") != "1":
        with pytest.raises(ValueError, match="'triton' needs a CUDA device"):
            selective_scan(*xs, method="triton")
    with pytest.raises(ValueError, match="does not return the states"):
        selective_scan(*xs, method="triton", return_states=True)


def test_a_mamba_asking_for_the_triton_scan_where_nothing_runs_it_is_refused_before_its_folder(tmp_path) -> None:
    """``scan_method = "triton"`` on a machine with no CUDA device (and no interpreter asked for): one line, exit 2,
    and no run folder left behind."""
    from windtunnel.cli import main

    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("a device here runs the Triton scan")
    config = tmp_path / "c.toml"
    config.write_text('task = "bijection"\narch = "mamba"\nsteps = 5\n[model]\nscan_method = "triton"\n')
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()
