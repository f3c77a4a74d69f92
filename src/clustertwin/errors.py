"""Errors users see. A SpecError names the file, the field path, what was expected and, for typos,
the nearest valid names. The CLI prints ``str(err)`` on one line and exits with code 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence


def nearest(name: str, choices: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """Nearest valid names for a typo (difflib ratio), best first."""
    return difflib.get_close_matches(str(name), list(choices), n=n, cutoff=cutoff)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    close = nearest(name, choices)
    return f"; did you mean '{close[0]}'?" if close else ""


def format_path(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


class ClusterTwinError(Exception):
    """Base class of the errors the CLI turns into a one-line message."""

    exit_code = 1


class SpecError(ClusterTwinError, ValueError):
    """Bad user input: exit code 2, one line naming file, field path and what was expected."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, path: Sequence[str | int] = ()) -> None:
        self.message = message
        self.file = file
        self.path = tuple(path)
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.file:
            where.append(str(self.file))
        if self.path:
            where.append(format_path(self.path))
        prefix = ": ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message

    def with_context(self, file: str | None = None, prefix: Sequence[str | int] = ()) -> SpecError:
        return SpecError(self.message, file=self.file or file, path=(*prefix, *self.path))


class UnknownPresetError(SpecError):
    """A preset id that the catalog does not hold."""

    def __init__(self, kind: str, name: str, choices: Iterable[str], **kw) -> None:
        choices = sorted(choices)
        super().__init__(f"unknown {kind} '{name}'{did_you_mean(name, choices)}", **kw)
        self.kind = kind
        self.name = name
