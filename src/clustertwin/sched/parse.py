"""Safe reading of trace and node-list files: decoding, line splitting, CSV records, checked numbers.

- Bytes are decoded as UTF-8; a file that is not is refused with the byte offset (exit 2), never a
  traceback.
- Lines end at ``\\r\\n``, ``\\n`` or a lone ``\\r`` (CR-only files); no other character splits a line.
- A CSV record never spans lines (no trace here has newlines inside fields): a line with a broken quote
  is one damaged record and reading resumes at the next line, so one stray ``"`` cannot swallow the
  rest of the file.
- A field longer than ``MAX_FIELD_CHARS`` damages its record only.
- A record with the wrong number of fields is rejected with its cause.
- Numbers are finite, within int64 when they are counts, and within the range the field allows.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from pathlib import Path

from clustertwin.errors import SpecError

MAX_FIELD_CHARS = 128 * 1024
"""Longest field accepted (Python csv's default limit); a longer one damages only its record."""
INT64_MAX = 2**63 - 1
_LINE_END = re.compile(r"\r\n|\r|\n")

# causes of damaged records (TraceReport.causes keys)
BROKEN_QUOTE = "broken quote"
FIELD_COUNT = "wrong field count"
FIELD_TOO_LONG = "field too long"
BAD_NUMBER = "bad number"
OUT_OF_RANGE = "out of range"
TIMES_BACKWARDS = "times out of order"


class Damaged(ValueError):
    """A record that cannot be used, with its cause (one of the constants above)."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


def read_lines(path: str | Path, what: str = "trace") -> list[str]:
    """The file's lines (without terminators), decoded as UTF-8 (a BOM is dropped)."""
    p = Path(path)
    if not p.exists():
        raise SpecError(f"{what} not found: {p}")
    if p.is_dir():
        raise SpecError(f"{what} is a directory, expected a file: {p}")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise SpecError(f"cannot read {what}: {e.strerror}", file=str(p)) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SpecError(f"not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} "
                        f"(expected a UTF-8 {what})", file=str(p)) from None
    lines = _LINE_END.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def split_record(line: str, delimiter: str = ",", *, quoting: bool = True) -> list[str]:
    """Fields of one CSV line; :class:`Damaged` on a broken quote or an over-long field."""
    if len(line) > MAX_FIELD_CHARS and any(len(f) > MAX_FIELD_CHARS for f in line.split(delimiter)):
        raise Damaged(FIELD_TOO_LONG, f"a field is longer than {MAX_FIELD_CHARS:,} characters")
    if not quoting or '"' not in line:
        return line.split(delimiter)
    try:
        rows = list(csv.reader([line], delimiter=delimiter, strict=True))
    except csv.Error as e:
        raise Damaged(BROKEN_QUOTE, f"broken quote ({e})") from None
    if len(rows) != 1:
        raise Damaged(BROKEN_QUOTE, "broken quote")
    return rows[0]


def records(lines: list[str], start: int = 0, delimiter: str = ",", *, quoting: bool = True,
            first_line_no: int = 1) -> Iterator[tuple[int, list[str] | None, Damaged | None]]:
    """``(line number, fields, None)`` per non-blank line from ``start``, or ``(line number, None,
    damage)`` for a damaged one."""
    for i in range(start, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        try:
            yield i + first_line_no, split_record(line, delimiter, quoting=quoting), None
        except Damaged as d:
            yield i + first_line_no, None, d


def number(text: str, name: str, *, lo: float = -math.inf, hi: float = math.inf) -> float:
    """A finite float within ``[lo, hi]``."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise Damaged(BAD_NUMBER, f"{name} '{str(text)[:40]}' is not a number") from None
    if not math.isfinite(v):
        raise Damaged(BAD_NUMBER, f"{name} '{str(text)[:40]}' is not finite")
    if not lo <= v <= hi:
        raise Damaged(OUT_OF_RANGE, f"{name} {v:g} is outside [{lo:g}, {hi:g}]")
    return v


def count(text: str, name: str, *, lo: int = 0, hi: int = INT64_MAX) -> int:
    """A whole number within ``[lo, hi]`` (``hi`` at most int64): ``"8"`` or ``"8.0"``."""
    t = str(text).strip()
    if re.fullmatch(r"[+-]?\d{1,19}", t):
        v = int(t)
    else:
        f = number(t, name)
        if f != math.floor(f):
            raise Damaged(BAD_NUMBER, f"{name} '{t[:40]}' is not a whole number")
        if abs(f) > INT64_MAX:
            raise Damaged(OUT_OF_RANGE, f"{name} {f:g} is outside [{lo}, {hi}]")
        v = int(f)
    if not lo <= v <= min(hi, INT64_MAX):
        raise Damaged(OUT_OF_RANGE, f"{name} {v} is outside [{lo}, {min(hi, INT64_MAX)}]")
    return v
