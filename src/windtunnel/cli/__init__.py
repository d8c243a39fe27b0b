"""The ``windtunnel`` command.

``windtunnel run [TASK]`` is the main job (train → evaluate → report); ``tasks``, ``train``,
``eval``, ``report``, ``analyze`` and ``table`` expose the steps.  Every user error — an unknown
name, an impossible parameter, a missing or corrupt checkpoint, a run folder that would be
overwritten — prints one line on stderr and exits with status 2; earlier results are never
destroyed.

One module per command or group of commands, each adding its own with ``register(subparsers)`` beside
the functions that run them: :mod:`.tasks`, :mod:`.train`, :mod:`.run` (run, eval, report, analyze),
:mod:`.table`, :mod:`.routing`, :mod:`.runs` (runs, compare), :mod:`.results` (reproduce, claims,
diversity), :mod:`.cluster` (status, and the executor options reproduce and table share), :mod:`.llm`.  :mod:`.args` holds the parser and argument types they share, :mod:`.outputs` the
output-file policy, :mod:`.names` the tasks, architectures and defaults the parser shows (read without importing
them).  This module assembles the parser and turns errors into exit statuses.  The parser is built without torch (each command imports the heavy
modules in the function that runs it): ``--help``, ``windtunnel tasks`` and a refused argument answer at once.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import sys
from typing import Sequence

from ..errors import DiagnosticFailed, UserError, did_you_mean
from ..run import stopping
from . import cluster, llm, results, routing, run, runs, table, tasks, train
from .args import Parser, UsageError

EXIT_USAGE = 2

COMMANDS = (tasks, train, run, table, routing, runs, results, cluster, llm)
"""The command modules, in the order ``windtunnel --help`` lists their commands."""

__all__ = ["COMMANDS", "EXIT_USAGE", "UsageError", "main", "make_parser"]


def make_parser() -> argparse.ArgumentParser:
    """The ``windtunnel`` parser: each command module adds its commands, in the order of :data:`COMMANDS`."""
    from .. import __version__

    p = Parser(prog="windtunnel", description="Bayesian wind tunnels: is a sequence model exactly Bayesian? In bits.")
    p.add_argument("--version", action="version", version=f"windtunnel {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=Parser)
    for module in COMMANDS:
        module.register(sub)
    return p


def _resource_error(exc: BaseException) -> bool:
    """An allocation the machine cannot satisfy: the user asked for too much, not a bug."""
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and any(k in text for k in ("can't allocate", "cannot allocate", "out of memory"))
    )


def _bind_task_params(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``run --V 20`` → ``run --V=20``: a task parameter's value bound to its name, so that argparse cannot
    take the value for ``run``'s optional positional TASK (it would read ``--V 20`` as task ``20`` and a
    parameter without a value)."""
    at = next((i for i, item in enumerate(argv) if not item.startswith("-")), None)
    if at is None or argv[at] != "run":  # only the run command has a positional beside its task parameters
        return argv
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    known = set(sub._option_string_actions)
    out, i = argv[: at + 1], at + 1
    while i < len(argv):
        item = argv[i]
        if (item.startswith("--") and "=" not in item and item not in known and item != "--"
                and i + 1 < len(argv) and not argv[i + 1].startswith("--")):
            out.append(f"{item}={argv[i + 1]}")
            i += 2
        else:
            out.append(item)
            i += 1
    return out


def _flag_hint(parser: argparse.ArgumentParser, argv: Sequence[str] | None, message: str) -> str:
    """An unknown task parameter that is a misspelt flag of the command (``--stpes``) says which flag it is near."""
    m = re.match(r"unknown parameter '([^']+)' for task '[^']*'", message)
    words = list(sys.argv[1:] if argv is None else argv)
    if not m or "did you mean" in m.group(0) or not words:
        return message
    subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    sub = subs.choices.get(next((w for w in words if not w.startswith("-")), ""), None) if subs else None
    if sub is None:
        return message
    flags = [o for o in sub._option_string_actions if o.startswith("--")]
    hint = did_you_mean("--" + m.group(1).replace("_", "-"), flags)
    return message.replace(m.group(0), m.group(0) + hint, 1) if hint else message


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 user error, 130 interrupted, 1 when standard
    output was closed by its reader; 128 + the signal's number when asked to stop by SIGTERM, SIGUSR2 or Ctrl-C,
    after checkpointing).

    A bug is not caught: it keeps its traceback and Python's exit status 1.
    """
    parser = make_parser()
    try:
        args, extra = parser.parse_known_args(_bind_task_params(parser, list(sys.argv[1:] if argv is None else argv)))
        if not getattr(args, "command", None):
            if extra:
                raise UsageError(f"unrecognized arguments: {' '.join(extra)}")
            parser.print_help()
            return 0
        if extra and args.command not in ("tasks", "train", "run"):
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}")
        return int(args.func(args, extra) or 0)
    except UserError as exc:
        print(f"windtunnel: error: {_flag_hint(parser, argv, str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except (MemoryError, RuntimeError) as exc:
        if not _resource_error(exc):
            raise
        print(f"windtunnel: error: not enough memory for this request ({str(exc).splitlines()[0][:160]}); "
              "use smaller sizes", file=sys.stderr)
        return EXIT_USAGE
    except DiagnosticFailed as exc:  # the others were written; the tracebacks were printed where they arose
        print(f"windtunnel: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of standard output left (`windtunnel … | head`): nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
        return 1
    except (PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
        # the filesystem is not what the command needs (a folder it cannot write, an entry of the wrong
        # kind): the user's to fix.  Owners check their folders before writing; this is the last line.
        print(f"windtunnel: error: cannot use {exc.filename or 'a path'}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.ENAMETOOLONG):
            raise
        print(f"windtunnel: error: cannot write {exc.filename or 'the output'}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except stopping.TrainingStopped as exc:  # asked to stop (a signal): checkpointed first, so a rerun loses nothing
        print(f"windtunnel: {exc}", file=sys.stderr)
        return exc.exit_status
    except stopping.NotStarted as exc:
        print(f"windtunnel: {exc}; rerun the same command to work it", file=sys.stderr)
        return 128 + int(getattr(signal, stopping.requested() or "SIGTERM", signal.SIGTERM))
    except KeyboardInterrupt:
        print("windtunnel: interrupted; rerun the same command (or --resume) to continue from the last checkpoint", file=sys.stderr)
        return 130
