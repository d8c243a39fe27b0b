"""The one distinction the command line relies on: a user's mistake versus a bug.

:class:`UserError` (and its subclasses, e.g. ``train.ConfigError``, ``checkpoint.CheckpointError``,
``runs.RunError``) is something the user can fix — a bad name or value, a damaged or busy run
folder, an output path that cannot be written, a size that cannot be allocated.  The CLI prints
its message as one line and exits with status 2.  Every other exception is a bug in windtunnel:
it keeps its traceback and the interpreter's own exit status (1).
"""

from __future__ import annotations

from typing import Any


class UserError(Exception):
    """A mistake in what was asked for; reported as one line, exit status 2."""


class InvalidValue(UserError, ValueError):
    """An invalid name or parameter value given to the library (also a ``ValueError``)."""


class DiagnosticFailed(RuntimeError):
    """Diagnostics raised while the others completed: a bug, not a user error.  ``geometry.json`` holds the
    others and an ``error`` entry for each failed one; the command exits 1 after writing it."""


def is_int(x: Any) -> bool:
    """Whether ``x`` is an integer and not a bool (JSON's ``true`` is not a count): the one test every
    validator applies to a count, a seed or an index."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_real(x: Any) -> bool:
    """Whether ``x`` is an int or a float and not a bool (finiteness is the caller's test)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def did_you_mean(word: str, choices: Any) -> str:
    """``" (did you mean 'bijection'?)"`` when one of ``choices`` is close to ``word`` (difflib's ratio ≥ 0.6),
    else ``""``: the end of a refusal that names an unknown name."""
    import difflib

    by_lower = {str(c).lower(): str(c) for c in choices}  # case is a slip too: 'k' for 'K'
    close = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""
