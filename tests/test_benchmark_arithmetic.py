"""The arithmetic the GPU and reproduction projections rest on (``benchmarks/paper_gpu.py``,
``benchmarks/reproduce_budget.py``), each on a case worked by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import paper_gpu  # noqa: E402
import paper_stacked  # noqa: E402
import step_ops  # noqa: E402
import reproduce_budget  # noqa: E402


def test_longest_first_makespan() -> None:
    # LPT on 2 machines: 3 | 3, then 2 → 5 | 3, 2 → 5 | 5, 2 → 7 | 5 (the optimum, 6, is 3+3 | 2+2+2)
    assert paper_gpu._lpt([2, 3, 2, 3, 2], 2) == 7
    assert paper_gpu._lpt([4.0], 8) == 4.0


def test_list_schedule_makespan_follows_the_given_order() -> None:
    # a long job first keeps one worker while the other takes the five short ones
    assert reproduce_budget.makespan([5, 1, 1, 1, 1, 1], 2) == 5
    # the long job last: the five short ones share out as 3 | 2, then it goes to the worker free first, 2 + 5
    assert reproduce_budget.makespan([1, 1, 1, 1, 1, 5], 2) == 7


def test_step_seconds_and_train_gap_read_the_logged_lines() -> None:
    metrics = [{"step": 25, "time": 1.0, "bayes_gap": 9.0}, {"step": 50, "eval": {"kl": 1.0}},
               {"step": 100, "time": 4.0, "bayes_gap": 1.0}, {"step": 600, "time": 14.0, "bayes_gap": 3.0},
               {"step": 1000, "time": 22.0, "bayes_gap": 5.0}]
    sec, timed = paper_gpu.step_seconds(metrics)
    assert (sec, timed) == (pytest.approx(21.0 / 975), 975)  # first to last logged training line
    assert paper_gpu.train_gap(metrics, 1000) == 4.0  # steps 600 and 1000 lie in (500, 1000]
    assert paper_gpu.train_gap(metrics, 100, window=50) == 1.0  # (50, 100]: step 100 alone
    assert paper_gpu.train_gap(metrics, 100, window=100) == 5.0  # (0, 100]: steps 25 and 100
    assert paper_gpu.train_gap(metrics, 2000) is None
    with pytest.raises(ValueError):
        paper_gpu.step_seconds(metrics[:2])


def test_pairing_attention_under_uniform_attention_is_the_hand_computed_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """``regression_diagnosis.pairing_attention``: with every layer's attention the causal mean, each y-position
    ``2j+1`` pays ``1/(2j+2)`` to its input; over 5 points that is (1/2 + 1/4 + 1/6 + 1/8 + 1/10) / 5."""
    from windtunnel import models, tasks
    from windtunnel.tasks import base

    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))  # the script's readout task, registered here only
    import regression_diagnosis

    task = tasks.make("regression", d=2, points=5, C=8)
    model = models.make("transformer", task, d_model=16, n_layers=2, n_heads=2, uniform_attn=[0, 1])
    shares, uniform = regression_diagnosis.pairing_attention(model, task, n=4)
    want = (1 / 2 + 1 / 4 + 1 / 6 + 1 / 8 + 1 / 10) / 5
    assert uniform == pytest.approx(want, rel=1e-12)
    assert shares == pytest.approx([want, want], rel=1e-6)
    # a pattern built by hand: head 1 puts 0.7 on each y's own input, head 0 0.3, and the diagonal 0.9 (which
    # a wrong index would read): the share is head 1's 0.7
    T = task.seq_len
    pattern = torch.zeros(4, 2, T, T)
    pattern[:, :, torch.arange(T), torch.arange(T)] = 0.9
    y = torch.arange(1, T, 2)
    pattern[:, 0, y, y - 1], pattern[:, 1, y, y - 1] = 0.3, 0.7

    class Fixed:
        config = type("C", (), {"n_layers": 1})

        def run_with_cache(self, tokens, features, names):
            return None, {names[0]: pattern}

    assert regression_diagnosis.pairing_attention(Fixed(), task, n=4)[0] == pytest.approx([0.7])


def test_ridge_r2_and_the_pair_probe_on_cases_known_by_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    """``regression_diagnosis.ridge_r2``: 1 for a target that is a linear map of the features, about 0 for one
    independent of them, and the hand-computed 1 − σ²/(1 + σ²) for a linear target plus noise; ``pair_probe`` on an
    untrained model: the embedding of a y-position holds its own ``x`` linearly in the paired layout (R² 1) and not
    in the interleaved one (R² 0), and never the product ``y·x`` (a nonlinear function of what it holds)."""
    from windtunnel import models, tasks
    from windtunnel.tasks import base

    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    import regression_diagnosis

    g = torch.Generator().manual_seed(0)
    X = torch.randn(20_000, 3, generator=g, dtype=torch.float64)
    W = torch.tensor([[1.0, -2.0], [0.5, 0.0], [0.0, 3.0]], dtype=torch.float64)
    assert regression_diagnosis.ridge_r2(X, X @ W, ridge=1e-9) == pytest.approx(1.0, abs=1e-9)
    assert abs(regression_diagnosis.ridge_r2(X, torch.randn(20_000, 2, generator=g, dtype=torch.float64))) < 0.01
    w = torch.tensor([[1.0], [0.0], [0.0]], dtype=torch.float64)  # signal variance 1, noise variance 0.25
    noisy = X @ w + 0.5 * torch.randn(20_000, 1, generator=g, dtype=torch.float64)
    assert regression_diagnosis.ridge_r2(X, noisy, ridge=1e-9) == pytest.approx(1 - 0.25 / 1.25, abs=0.01)
    for paired, want_x in ((True, 1.0), (False, 0.0)):
        task = tasks.make("regression", d=2, points=6, C=8, paired=paired)
        model = models.make("transformer", task, d_model=16, n_layers=2, n_heads=2)
        probe = regression_diagnosis.pair_probe(model, task, n=2048)
        assert len(probe["x"]) == len(probe["yx"]) == 3  # the embedding, then each block's output
        assert probe["x"][0] == pytest.approx(want_x, abs=0.01)
        assert abs(probe["yx"][0]) < 0.02


def test_a_cell_trained_on_a_gpu_is_estimated_not_read() -> None:
    """A committed cell's seconds count as CPU work only where it was trained on the CPU: the GPU-trained
    paper-size main job is estimated like a missing cell, the CPU-trained main job read from its timings."""
    from windtunnel.orchestration import reproduce

    results = Path(__file__).resolve().parents[1] / "results"
    jobs = {(j.cell.preset, j.cell.folder): j for t, p in (("paper1", "quick"), ("scale", "paper"))
            for j in reproduce.plan(t, p)}
    gpu, cpu = jobs["paper", "main_paper_size-transformer-s0"], jobs["quick", "main-transformer-s0"]
    if not (reproduce.cell_dir(results, gpu.cell) / "config.json").is_file():
        pytest.skip("main_paper_size not committed")
    assert reproduce_budget.trained_on_gpu(results, gpu) and reproduce_budget.cell_seconds(results, gpu) is None
    assert not reproduce_budget.trained_on_gpu(results, cpu)
    seconds = reproduce_budget.cell_seconds(results, cpu)
    assert seconds is not None and seconds > 0


@pytest.mark.parametrize("argv, says", [
    (["--workers", "0"], "--workers must be at least 1"),
    (["--results", "no/such/folder"], "is not a folder"),
    (["--json", "no/such/folder/budget.json"], "its folder does not exist"),
    (["--json", "."], "is a folder, not a file"),
])
def test_reproduce_budget_refuses_bad_input_in_one_line(argv: list, says: str, monkeypatch, capsys) -> None:
    """Bad arguments are refused before any work: one line on stderr, exit status 2, no traceback."""
    monkeypatch.setattr(sys, "argv", ["reproduce_budget.py", *argv])
    with pytest.raises(SystemExit) as exit_:
        reproduce_budget.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_the_stacked_paper_table_projection_by_hand() -> None:
    """Stacked: each cell's fastest way; alone: the cell's seeds one after another; the slowest row by stacked hours."""
    rows = [{"column": "hmm", "arch": "transformer", "graph": {"cell_h": 0.5, "member_speedup": 4.0},
             "eager": {"cell_h": 0.75, "member_speedup": 2.0}, "alone": {"cell_h": 2.0}},
            {"column": "hmm", "arch": "mamba", "graph": {"error": "RuntimeError: no"},
             "eager": {"cell_h": 1.25, "member_speedup": 1.5}, "alone": {"cell_h": 1.5}}]
    got = paper_stacked.summary(rows, {"device": "x"})
    assert got["table_h_stacked"] == 0.5 + 1.25 and got["table_h_alone"] == 3.5
    assert got["stacked_h_by_arch"] == {"transformer": 0.5, "mamba": 1.25} and got["slowest_arch"] == "mamba"
    assert (got["member_speedup_min"], got["member_speedup_max"]) == (1.5, 4.0) and got["graphed_cells"] == 0
    # the compiled way counts where it is the fastest, and a cell is "compiled" only where its forward said so
    rows[0]["compiled"] = {"cell_h": 0.25, "member_speedup": 8.0, "forward": "vmapped, compiled"}
    rows[1]["compiled"] = {"cell_h": 2.0, "member_speedup": 1.0, "forward": "vmapped (not compiled: X: y)"}
    got = paper_stacked.summary(rows, {})
    assert got["table_h_stacked"] == 0.25 + 1.25 and got["member_speedup_max"] == 8.0 and got["compiled_cells"] == 1
    del rows[0]["compiled"], rows[1]["compiled"]
    rows[1]["eager"] = {"error": "RuntimeError: no"}
    assert paper_stacked.summary(rows, {})["table_h_stacked"] is None  # a cell not measured: no table figure
    # a column trained in another's stack adds its seeds alone, and nothing to the stacked hours
    shared = [rows[0], {"column": "bijection_replacement", "arch": "transformer", "in_stack_of": "bijection",
                        "alone": {"cell_h": 1.0}}]
    got = paper_stacked.summary(shared, {})
    assert got["table_h_stacked"] == 0.5 and got["table_h_alone"] == 3.0 and got["stacked_h_by_arch"] == {
        "transformer": 0.5}


def test_the_columns_the_table_stacks_together_are_measured_as_one_stack() -> None:
    """At the paper preset bijection with and without replacement share a stack (as ``windtunnel table`` groups
    them); HMM and recall, of other shapes, are stacks of their own."""
    assert paper_stacked.stacks("paper", ["bijection", "hmm", "bijection_replacement", "recall"], "transformer") == [
        ["bijection", "bijection_replacement"], ["hmm"], ["recall"]]


@pytest.mark.slow
def test_the_stacked_paper_table_measures_on_a_cpu_and_resumes(tmp_path: Path) -> None:
    """The GPU script runs here as it will there (the graph way eager, and said so), writes a row per cell and a
    summary, and a second command measures only what the first did not."""
    import subprocess
    import sys as _sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "paper_stacked.py"
    cmd = [_sys.executable, str(script), "--preset", "quick", "--steps", "4", "--seeds", "2", "--columns", "recall",
           "--modes", "graph", "compiled", "alone", "--device", "cpu", "--out", str(tmp_path)]
    subprocess.run([*cmd, "--archs", "mlp"], check=True, capture_output=True, cwd=script.parent)
    subprocess.run([*cmd, "--archs", "mlp", "mlp_pointwise"], check=True, capture_output=True, cwd=script.parent)
    rows = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [(r["arch"], r["seeds"]) for r in rows] == [("mlp", 2), ("mlp_pointwise", 2)]
    import shutil

    compiles = any(shutil.which(c) for c in ("g++", "c++", "clang++"))  # inductor's CPU code needs a compiler
    for r in rows:
        assert r["graph"]["step_program"] == "eager" and r["graph"]["ms_per_step"] > 0
        assert r["graph"]["forward"] == "vmapped"  # the MLPs' forward pass vmaps: said, not assumed
        assert r["compiled"]["forward"].startswith("vmapped, compiled" if compiles else "vmapped (not compiled: ")
        assert r["graph"]["member_speedup"] == pytest.approx(2 * r["alone"]["ms_per_step"] / r["graph"]["ms_per_step"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["cells"] == 2 and summary["table_h_stacked"] > 0 and summary["compiled_cells"] == 2 * compiles


def test_the_step_is_counted_by_part_and_its_update_does_not_grow_with_the_parameters() -> None:
    """A quick cell's stacked step counted through the real training loop: every part of the step is there, the
    parts add up, and clipping with AdamW on the group buffers is a few operations where the loop over the stacked
    parameters (the baseline counted on the same gradients) takes about ten a parameter."""
    small = step_ops.count("quick", "hmm", "mlp_pointwise", 2)
    assert all(small["ops"][part] > 0 for part in step_ops.PARTS), small["ops"]
    assert small["total"] == sum(small["ops"].values())
    assert small["clip_and_update_per_parameter"] >= 8 * small["parameters"]
    assert small["clip_and_update"] < small["clip_and_update_per_parameter"] / 5
    assert small["total_per_parameter"] == small["total"] - small["clip_and_update"] + small["clip_and_update_per_parameter"]


@pytest.mark.slow
def test_two_columns_of_one_shape_are_timed_as_one_stack_on_a_cpu(tmp_path: Path) -> None:
    """The paper preset's two bijection columns, one seed each: the first row times both as one stack of two members
    (its speed-up counts both), the second only its seed alone, and the table's stacked hours are the stack's once."""
    import subprocess
    import sys as _sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "paper_stacked.py"
    subprocess.run([_sys.executable, str(script), "--preset", "paper", "--steps", "4", "--seeds", "1", "--columns",
                    "bijection", "bijection_replacement", "--archs", "mlp_pointwise", "--modes", "graph", "alone",
                    "--device", "cpu", "--out", str(tmp_path)], check=True, capture_output=True, cwd=script.parent)
    lead, other = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert lead["stack_columns"] == ["bijection", "bijection_replacement"] and lead["graph"]["forward"] == "vmapped"
    assert lead["graph"]["member_speedup"] == pytest.approx(2 * lead["alone"]["ms_per_step"] / lead["graph"]["ms_per_step"])
    assert other["in_stack_of"] == "bijection" and "graph" not in other and other["alone"]["ms_per_step"] > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["table_h_stacked"] == pytest.approx(lead["graph"]["cell_h"])


GENERATED = '''
cpp_fused_add_0 = async_compile.cpp_pybinding(['float*'], """ ... """)

class Runner:
    def call(self, args):
        arg0_1, = args
        buf0 = empty_strided_cpu((3, 8), (8, 1), torch.float32)
        extern_kernels.bmm(arg0_1, arg0_1, out=buf0)
        cpp_fused_add_0(buf0)
        buf1 = reinterpret_tensor(buf0, (24, ), (1, ), 0)
        triton_poi_fused_gelu_1.run(buf1, 24, stream=stream0)
        buf2 = torch.ops.aten.lstm.input(buf1)
        return (buf1, )

def benchmark_compiled_module(args, times=10, repeat=10):
    extern_kernels.mm(a, b)
    cpp_fused_add_0(a)
'''


def test_the_kernels_of_a_generated_program_are_its_calls_launches_by_hand() -> None:
    """In inductor's generated module: the fused kernels (C++ and Triton), the library kernel and the operation left to
    ATen in ``call`` are four launches; allocations and views launch nothing; the benchmark harness is not the call."""
    assert step_ops.launches(GENERATED) == 4
    assert step_ops.launches("no program here") == 0


@pytest.mark.skipif(not any(__import__("shutil").which(c) for c in ("g++", "c++", "clang++")),
                    reason="torch.compile's CPU code generation needs a C++ compiler")
def test_the_launches_of_a_compiled_function_are_counted_by_hand() -> None:
    """``relu(a @ b) * 2 + 1`` compiled, with gradients: the forward program is the matmul (a library kernel) and
    one fused elementwise kernel (2); the backward is one fused kernel (the relu mask times the incoming gradient)
    and the two matmuls of the gradients of ``a`` and ``b`` (3)."""
    import torch._dynamo as dynamo

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ b) * 2 + 1

    dynamo.reset()
    a, b = torch.randn(8, 16, requires_grad=True), torch.randn(16, 4, requires_grad=True)
    with step_ops.generated_modules() as modules:
        torch.compile(f)(a, b).sum().backward()
    assert [step_ops.launches(m) for m in modules if "def call(" in m] == [2, 3]
    dynamo.reset()


@pytest.mark.skipif(not any(__import__("shutil").which(c) for c in ("g++", "c++", "clang++")),
                    reason="torch.compile's CPU code generation needs a C++ compiler")
@pytest.mark.slow
def test_a_compiled_stack_launches_fewer_kernels_than_its_eager_forward_and_backward() -> None:
    """A quick cell's stack trained compiled through the real loop: two programs (the forward pass, then its
    backward), each launching something, together fewer kernels than the eager forward and backward operations."""
    eager = step_ops.count("quick", "bijection", "mlp", 2)
    got = step_ops.compiled_count("quick", "bijection", "mlp", 2)
    assert got["forward"] == "vmapped, compiled" and len(got["kernels"]) == 2 and min(got["kernels"]) > 0
    assert got["total"] == sum(got["kernels"]) < eager["ops"]["forward"] + eager["ops"]["backward"]
