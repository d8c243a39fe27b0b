"""Standard output closed by its reader (`windtunnel tasks | head -1`): no traceback, exit status 1."""

from __future__ import annotations

import subprocess
import sys


def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "windtunnel", "tasks"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)
    assert proc.stdout is not None and proc.stdout.read(10)
    proc.stdout.close()  # the reader leaves while the command still has lines to write
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = proc.wait(timeout=120)
    assert "Traceback" not in err and code in (0, 1)
