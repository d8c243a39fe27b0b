"""What every command shares: the parser that answers a mistake in one line, the task parameters given as
``--NAME VALUE`` pairs, and the argument types that check counts and seeds once, at parsing."""

from __future__ import annotations

import argparse
import re
from typing import Any, NoReturn, Sequence

from ..errors import UserError, did_you_mean


class UsageError(UserError):
    """A command-line mistake: reported as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse, with a mistake raised as one line (:class:`UsageError`) naming the nearest choice, and a
    flag's prefix refused rather than taken for the flag."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `--step 1` is not `--steps 1`: a prefix is refused, never guessed
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, not the usage block
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:  # the nearest choice, as for unknown task and architecture names
            hint = did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
            message = message.replace(f"invalid choice: '{m.group(1)}'", f"invalid choice: '{m.group(1)}'{hint}", 1)
        raise UsageError(message)


def parse_value(text: str) -> Any:
    """Parse a command-line parameter value: int, float, bool, or string."""
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_params(extra: Sequence[str]) -> dict[str, Any]:
    """``--V 6 --replacement true`` (or ``--V=6``) → ``{"V": 6, "replacement": True}``."""
    out: dict[str, Any] = {}
    items = list(extra)
    i = 0
    while i < len(items):
        item = items[i]
        if not item.startswith("--") or item == "--":
            raise UsageError(f"unexpected argument {item!r}: task parameters look like --NAME VALUE")
        key = item[2:]
        if "=" in key:
            key, val = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(items):
                raise UsageError(f"task parameter --{key} needs a value")
            val = items[i + 1]
            i += 2
        out[key.replace("-", "_")] = parse_value(val)
    return out


def positive_int(text: str) -> int:
    """An argparse type: a whole number ≥ 1 (every count, size and budget flag), checked once at parsing."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if not 1 <= value < 2**63:  # the largest count a tensor index or a numpy generator holds
        raise argparse.ArgumentTypeError(f"must be a positive integer below 2^63, got {text!r}")
    return value


SEED_LIMIT = 2**31
"""Seeds are integers in [0, 2^31): what ``TrainConfig.seed`` accepts and every generator can hold."""


def seed_int(text: str) -> int:
    """An argparse type: a seed, an integer in [0, 2^31)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer seed, got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be a seed in [0, 2^31), got {text!r}")
    return value


def seed_list(text: str) -> tuple[int, ...]:
    """An argparse type: distinct seeds, comma-separated (``0,1,2``)."""
    seeds = tuple(seed_int(part.strip()) for part in text.split(","))
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"the seeds must be distinct, got {text!r}")
    return seeds
