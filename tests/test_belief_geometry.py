"""The belief-geometry diagnostic: readouts checked on constructed streams, the simplex map by hand, and
the diagnostic on real models of tasks with and without a hidden state."""

from __future__ import annotations

import math

import pytest
import torch

from windtunnel import models, tasks
from windtunnel.geometry.belief_geometry import belief_geometry, belief_geometry_figure, belief_readout, simplex_xy
from windtunnel.geometry.readouts import split_rows

PNG = b"\x89PNG\r\n\x1a\n"


def _mess3_rows(n: int = 200, length: int = 8):
    task = tasks.make("mess3", n=length)
    ep = task.sample(n, 0)
    B = task.belief(ep.tokens)[ep.mask]
    seq, _ = ep.mask.nonzero(as_tuple=True)
    return task, ep, B, seq


def test_simplex_vertices_by_hand() -> None:
    xy = simplex_xy(torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1 / 3, 1 / 3, 1 / 3]]))
    want = torch.tensor([[0, 0], [1, 0], [0.5, math.sqrt(3) / 2], [0.5, math.sqrt(3) / 6]], dtype=torch.float64)
    assert torch.allclose(xy, want, atol=1e-15)


def test_a_stream_that_is_an_affine_image_of_the_belief_reads_it_exactly() -> None:
    """R² = 1 and RMS distance 0 for X = η W + c (W of full rank, extra dimensions of noise-free zeros);
    a stream of noise reads nothing on held-out sequences."""
    _, _, B, seq = _mess3_rows()
    train, test = split_rows(seq)
    g = torch.Generator().manual_seed(0)
    W = torch.randn(3, 12, generator=g, dtype=torch.float64)
    r = belief_readout(B @ W + 0.7, B, seq, train, test)
    assert r["r2"] == pytest.approx(1.0, abs=1e-6) and r["rmse"] < 1e-3
    noise = belief_readout(torch.randn(len(B), 12, generator=g, dtype=torch.float64), B, seq, train, test)
    assert noise["r2"] < 0.02


def test_mess3s_exact_predictive_determines_its_belief() -> None:
    """The predictive is η A E with A E invertible: a linear readout from it recovers the belief (R² 1),
    which is why the readout from a model's output is the reference the stream is compared with."""
    _, ep, B, seq = _mess3_rows()
    train, test = split_rows(seq)
    r = belief_readout(ep.posterior[ep.mask], B, seq, train, test)
    assert r["r2"] == pytest.approx(1.0, abs=1e-6)


def test_the_diagnostic_on_a_real_model(tmp_path) -> None:
    task = tasks.make("mess3", n=8)
    torch.manual_seed(0)
    model = models.make("transformer", task, d_model=16, n_layers=2, n_heads=2)
    ep = task.sample(64, 1)
    r = belief_geometry(model, task, episodes=ep, untrained=models.make("transformer", task, d_model=16, n_layers=2, n_heads=2))
    s = r["summary"]
    assert [l["layer"] for l in r["layers"]] == ["embed", "L0", "L1"] and s["n_states"] == 3
    assert r["n_points"] == 64 * 8 and len(r["points"]["true"]) == len(r["points"]["all_layers"])
    # the embedding layer holds the current symbol only: its readout is the per-symbol mean belief, which the
    # hand computation below gives exactly (at position 0 every sequence holds the uniform prior)
    seq, pos = ep.mask.nonzero(as_tuple=True)
    train, test = split_rows(seq)
    B, sym = task.belief(ep.tokens)[ep.mask], ep.tokens[ep.mask]
    means = torch.stack([B[train & (sym == k)].mean(0) for k in range(4)])
    pred = means[sym[test]]
    r2 = 1 - float(((B[test] - pred) ** 2).sum()) / float(((B[test] - B[test].mean(0)) ** 2).sum())
    assert r["layers"][0]["r2"] == pytest.approx(r2, abs=2e-3)  # ridge on 16-d one-token embeddings ≈ group means
    assert s["all_layers_r2"] >= max(s["r2_by_layer"]) - 0.05  # more features never read much less
    assert s["r2_by_layer_untrained"] and -1 < s["shuffled_r2"] < 0.1
    assert belief_geometry_figure(r, tmp_path / "b.png").read_bytes()[:8] == PNG


def test_hmm_uses_its_posterior_as_the_belief_and_other_tasks_do_not_apply(tmp_path) -> None:
    task = tasks.make("hmm", S=4, O=3, K=6)
    model = models.make("transformer", task, d_model=16, n_layers=1, n_heads=2)
    r = belief_geometry(model, task, n=32)
    assert r["applicable"] and r["summary"]["n_states"] == 4 and len(r["points"]["true"][0].split()) == 4
    assert belief_geometry_figure(r, tmp_path / "h.png").read_bytes()[:8] == PNG  # 4 states: principal axes
    bij = tasks.make("bijection", V=4, L=3)
    r = belief_geometry(models.make("transformer", bij, d_model=16, n_layers=1, n_heads=2), bij, n=8)
    assert r["applicable"] is False and "Task.belief" in r["reason"]
