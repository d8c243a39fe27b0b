"""Test-session settings: one intra-op thread everywhere.

The tests use tiny tensors, where thread start-up costs more than it saves, and a fixed thread
count keeps float reductions — and so the bitwise-resume checks — identical in this process and
in the subprocesses the crash tests start (they inherit ``OMP_NUM_THREADS``).
"""

import os

os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402

torch.set_num_threads(1)
