"""Domain errors. The CLI alone turns them into a message and an exit code.

- `SpecError`: bad input (unknown name, missing file, syntax error, unknown/missing key, impossible
  value). Exit code 2. The message is one line naming the file, the key, the value and what is allowed.
- `InfeasibleError`: a well-formed request that no plan satisfies. Exit code 1. The message names
  the binding constraint and what would relax it.
- `OutputError`: a file named by the user that could be opened but not written (full disk, quota,
  I/O error). Exit code 1, as for stdout that cannot be written; `write_failure` sorts an OSError
  into it or into a SpecError (a path that cannot be opened: missing folder, a directory, no
  permission).
"""

from __future__ import annotations

import errno
import math
import re

LONG_WORD = 200
"""Characters past which a run without whitespace in an error message (a value the user gave, echoed
back: a 5,000-character option value, a pasted blob) is shortened to its start and its length."""
_LONG = re.compile(rf"\S{{{LONG_WORD + 1},}}")


def shorten(message: str) -> str:
    """`message` with every run of more than LONG_WORD non-space characters cut to its first 60 and
    its length: `'xxxx...(5,002 characters)`. Shorter text is returned unchanged."""
    return _LONG.sub(lambda m: f"{m.group()[:60]}...({len(m.group()):,} characters)", message)


class PlannerError(Exception):
    """Base of the errors the CLI reports without a traceback."""

    exit_code = 2


class SpecError(PlannerError):
    """Bad input: exit code 2.

    Args:
        message: what is wrong and what is allowed.
        file: the file (or catalog name) the value came from, if any.
        key: the key holding the bad value, if any.
        line: the 1-based line of `file` the error is at (a syntax error), if known.
    """

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None,
                 line: int | None = None):
        self.file = file
        self.key = key
        self.line = line
        self.message = message = shorten(message)
        """What is wrong and what is allowed, without the `file: key: ` prefix (long values cut:
        `shorten`)."""
        where = shorten(": ".join(part for part in (file, key) if part))
        super().__init__(f"{where}: {message}" if where else message)


SEVERAL = "\nerror: "
"""What separates the errors of one `several` SpecError: the CLI prints each as a line of its own
(`planner.report.error`); JSON keeps the one string."""


def several(errors: list[SpecError]) -> SpecError:
    """One SpecError of all `errors` (every bad value of one file, so one CI run reports them all), each
    "FILE: KEY: message" as it would print alone, separated by `SEVERAL`; `file` and `key` those of the
    first (the line an annotation points at)."""
    out = SpecError(SEVERAL.join(str(e) for e in errors))
    out.file, out.key, out.line = errors[0].file, errors[0].key, errors[0].line
    return out


class InfeasibleError(PlannerError):
    """No plan satisfies the request: exit code 1.

    Args:
        message: the binding constraint and the smallest change that would relax it, with numbers.
        details: optional structured data (for `--format json`).
    """

    exit_code = 1

    def __init__(self, message: str, *, details: dict | None = None):
        self.details = details or {}
        super().__init__(message)


class OutputError(PlannerError):
    """Output that cannot be written though its path is good (full disk, quota, I/O): exit code 1.

    Args:
        message: one line naming the file and the system's reason.
    """

    exit_code = 1


PATH_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM,
                         errno.ENAMETOOLONG, errno.ELOOP, errno.EROFS, errno.EINVAL})
"""Errors of the path itself (it cannot be opened for writing as given): bad input. Any other
errno of a write (ENOSPC, EDQUOT, EFBIG, EIO, ...) is a failure of the output, not of the input."""


def write_failure(path: str, exc: OSError, key: str) -> PlannerError:
    """The error for a failed write of the user's file `path` (option `key`): SpecError (exit 2)
    when the path cannot be opened as given (`PATH_ERRNOS`), else OutputError (exit 1)."""
    reason = exc.strerror or str(exc)
    if exc.errno in PATH_ERRNOS:
        return SpecError(f"cannot write {path}: {reason}", key=key)
    return OutputError(f"{key}: cannot write {path}: {reason}")


def shown(value: object) -> str:
    """A value echoed in a message as the YAML / JSON file spells it: true, false, null, [1, 2] for a list or
    tuple; text quoted ('abc'); numbers as written by Python (4096, 0.5)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{shown(k)}: {shown(v)}" for k, v in value.items()) + "}"
    return repr(value)


def number(x: float) -> str:
    """A count or rate for a message: 1000000 -> '1,000,000', 42949672960.0 -> '42,949,672,960', 0.25 -> '0.25',
    180447137.4 -> '180,447,137': as `:g` writes it (6 significant digits, trailing zeros dropped) but with thousands
    separators, every digit of the integer part kept, and never in scientific notation (fresh-user review 10
    finding 13)."""
    if not math.isfinite(x):
        return f"{x:g}"
    if float(x).is_integer():
        return f"{int(x):,}"
    text = f"{x:,.{max(0, 5 - math.floor(math.log10(abs(x))))}f}"
    return text.rstrip("0").rstrip(".")


def counted(n: int, noun: str) -> str:
    """'1 GPU', '8 GPUs', '1,024 sequences': `n` with `noun` in the singular or plural (noun + s)."""
    return f"{n:,} {noun if n == 1 else noun + 's'}"
