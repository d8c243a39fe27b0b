"""Test-session settings: one intra-op thread everywhere; the fused C++ kernel as a session fixture.

The tests use tiny tensors, where thread start-up costs more than it saves, and a fixed thread
count keeps float reductions — and so the bitwise-resume checks — identical in this process and
in the subprocesses the crash tests start (they inherit ``OMP_NUM_THREADS``).
"""

import os

os.environ["OMP_NUM_THREADS"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def kernel():
    """The fused C++ scan kernel (``windtunnel.models.scans.cpu_kernel``), built at most once per run and
    only when a test asks for it — never at collection (a first build takes about 30 s); the tests that
    ask are skipped where it cannot be built (no compiler or ninja, or ``WINDTUNNEL_NO_KERNEL=1``)."""
    from windtunnel.models.scans import cpu_kernel

    mod = cpu_kernel()
    if mod is None:
        pytest.skip("the fused CPU kernel cannot be built here")
    return mod


@pytest.fixture
def backward_refused(monkeypatch: pytest.MonkeyPatch):
    """An inductor that compiles forward passes and refuses every backward pass, from an empty cache (so that
    nothing compiled earlier is loaded in place of compiling)."""
    import torch._dynamo as dynamo
    import torch._functorch.config as functorch_config
    import torch._inductor.compile_fx as compile_fx
    import torch._inductor.config as inductor_config

    def refusing(*args, **kwargs):
        raise RuntimeError("this compiler refuses backward passes")

    monkeypatch.setattr(compile_fx, "compile_fx_backward", refusing)
    dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        yield
    dynamo.reset()
