"""Where every run folder under a root stands (``windtunnel runs``): its task and architecture, its newest checkpoint
against its recipe's steps, and which results are missing or stale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UserError
from .runs import RunDir


def survey(root: str | Path) -> list[dict[str, Any]]:
    """Every run folder under ``root`` (``root`` itself included; checkpoints and figures not searched), in path
    order: its task, architecture, the step of its newest checkpoint against its recipe's steps, whether it is
    finished, and which of ``eval.json``, ``geometry.json`` and ``report.html`` are missing or stale (of another
    checkpoint or configuration).  A folder whose files cannot be read is listed with the reason."""
    root = Path(root)
    found = sorted({p.parent for p in root.rglob(RunDir.CONFIG) if not set(RunDir.FOLDERS) & set(p.parts)})
    out = []
    for path in found:
        rd = RunDir(path)
        row: dict[str, Any] = {"run": str(path)}
        try:
            cfg = rd.read_config()
            train = cfg.get("train") or {}
            step, steps = rd.latest_step(), train.get("steps")
            exported = not rd.checkpoints.is_dir() and rd.eval_path.is_file()  # an exported cell: results, no weights
            if exported:
                step = (rd.read_eval().get("provenance") or {}).get("step") or step
                row["exported"] = True
            row.update(task=(cfg.get("task") or {}).get("name"), arch=train.get("arch"), step=step, steps=steps,
                       finished=isinstance(steps, int) and step >= steps, diverged=rd.divergence() is not None)
            states = rd.result_states()
            if exported:  # no checkpoint to be stale against
                states = {k: "current" if v == "stale" and k != RunDir.REPORT else v for k, v in states.items()}
            row["results"] = states
        except (UserError, OSError, ValueError) as exc:
            row["error"] = str(exc)
        out.append(row)
    return out
