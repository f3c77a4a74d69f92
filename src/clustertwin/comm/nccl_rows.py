"""One nccl-tests data row, checked: ``size count type [redop] [root]`` then the out-of-place ``time algbw
busbw #wrong`` block and, when printed, the in-place block (``N/A`` for a block the tool did not run).

Every number is checked before it reaches the fit (:mod:`clustertwin.inputs` rules): sizes, counts, roots and
``#wrong`` are int64, times lie in [:data:`MIN_TIME_US`, :data:`MAX_TIME_US`], bandwidths are finite and >= 0.
A row that breaks a rule raises :class:`BadRow` with its cause, so the reader counts it as malformed (by cause)
and leaves it out, instead of a NaN, an infinity or a denormal time reaching ``log(predicted / measured)``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from clustertwin.inputs import INT64_MAX

MIN_TIME_US = 1e-3
"""Shortest time accepted, us (1 ns; nccl-tests prints two decimals, so a real time is at least 0.01 us)."""
MAX_TIME_US = 1e12
"""Longest time accepted, us (about 11.6 days for one collective)."""
_NUM = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
_INT = re.compile(r"^[+-]?\d{1,19}$")
_DIGITS = re.compile(r"^[+-]?\d+$")


DTYPES = frozenset({"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
                    "fp8_e4m3", "fp8_e5m2", "float16", "float32", "float64", "bf16", "fp16", "fp32", "fp64"})
"""Data types nccl-tests / rccl-tests print in the ``type`` column."""
_NUMBERISH = re.compile(r"^[-+.]?(\d|nan|inf)", re.IGNORECASE)


def looks_like_row(line: str) -> bool:
    """Whether a non-comment line is a data row (then it parses or is counted malformed): it starts with a
    digit, or it has a row's width and a number-like first field (``nan``, ``-1``, ``+8``) or a known type."""
    if line[:1].isdigit():
        return True
    tok = line.split()
    return len(tok) >= 7 and (tok[2].lower() in DTYPES or bool(_NUMBERISH.match(tok[0])))


class BadRow(ValueError):
    """A data line that cannot be used; ``cause`` names the rule it broke (the count key)."""

    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(f"{cause}: {detail}")
        self.cause = cause


@dataclass(frozen=True)
class Block:
    """One timing block of a row (out-of-place or in-place)."""

    time_us: float
    algbw_gb_per_s: float
    busbw_gb_per_s: float
    wrong: int | None
    """``#wrong``; None when the run did not check (``N/A``)."""


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    out_of_place: Block | None
    in_place: Block | None


def _int(text: str, what: str, lo: int = 0) -> int:
    """An int64 in [lo, 2^63-1] from a token (``'8.0'`` is 8); anything else is a :class:`BadRow`."""
    t = text.strip()
    if _INT.match(t):
        v = int(t)
    elif _DIGITS.match(t):  # more than 19 digits: beyond int64 whatever it says
        raise BadRow("out of range", f"{what} of {len(t)} digits (expected {lo}..2^63-1)")
    else:
        f = _float(t, what)
        if f != int(f):
            raise BadRow("not a number", f"{what} {t[:40]!r} is not an integer")
        v = int(f)
    if not lo <= v <= INT64_MAX:
        raise BadRow("out of range", f"{what} {t[:40]!r} (expected {lo}..2^63-1)")
    return v


def _float(text: str, what: str) -> float:
    t = text.strip()
    if len(t) > 64:
        raise BadRow("not a number", f"{what} of {len(t)} characters")
    try:
        v = float(t)
    except ValueError:
        raise BadRow("not a number", f"{what} {t[:40]!r}") from None
    if not math.isfinite(v):
        raise BadRow("not finite", f"{what} {t[:40]!r}")
    return v


def parse_block(tokens: list[str]) -> Block | None:
    """A timing block (4 tokens); None for a block of ``N/A`` (one the tool did not run: ``node bench``
    prints its all_reduce, which torch runs in place, that way)."""
    if tokens[0].upper() == "N/A":
        return None
    time_us = _float(tokens[0], "time")
    if time_us <= 0:
        raise BadRow("time <= 0", f"time {tokens[0][:40]!r}")
    if not MIN_TIME_US <= time_us <= MAX_TIME_US:
        raise BadRow("time out of range", f"time {tokens[0][:40]!r} (expected {MIN_TIME_US:g}..{MAX_TIME_US:g} us)")
    algbw, busbw = _float(tokens[1], "algbw"), _float(tokens[2], "busbw")
    if algbw < 0 or busbw < 0:
        raise BadRow("bandwidth < 0", f"algbw {tokens[1][:20]!r}, busbw {tokens[2][:20]!r}")
    wrong = None if tokens[3].upper() == "N/A" else _int(tokens[3], "#wrong")
    return Block(time_us, algbw, busbw, wrong)


def parse_row(line: str) -> Row:
    """A data line as a :class:`Row`; a line that breaks a rule raises :class:`BadRow`."""
    tok = line.split()
    if len(tok) < 3:
        raise BadRow("wrong field count", f"{len(tok)} fields")
    size, count, dtype = _int(tok[0], "size"), _int(tok[1], "count"), tok[2]
    rest = tok[3:]
    redop = "none"
    if rest and not _NUM.match(rest[0]) and rest[0].upper() != "N/A":
        redop, rest = rest[0], rest[1:]
    root = -1
    if len(rest) in (5, 9):  # a root column precedes the blocks
        root, rest = _int(rest[0], "root", lo=-1), rest[1:]
    if len(rest) not in (4, 8):
        raise BadRow("wrong field count", f"expected 4 or 8 timing fields, found {len(rest)}")
    oop, ip = parse_block(rest[:4]), parse_block(rest[4:8]) if len(rest) == 8 else None
    if oop is None and ip is None:
        raise BadRow("no timing", "N/A in both blocks")
    return Row(size, count, dtype, redop, root, oop, ip)
