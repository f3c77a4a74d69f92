"""Request traces for serving simulation: the public LLM-inference trace formats and their checks.

Formats (column layouts as published):

- ``azure``: Azure LLM inference traces 2023/2024 (Splitwise, DynamoLLM), CSV
  ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` is wall-clock time with up to 7 fractional
  digits (``2023-11-16 18:15:46.6805900``), optionally with a UTC offset (2024: ``…+00:00``);
- ``burstgpt``: BurstGPT, CSV ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``
  (v2 files add ``Session ID,Elapsed time``); ``Timestamp`` is seconds from the start of collection; a
  response of 0 tokens is a failed request, counted under ``excluded``;
- ``mooncake``: Mooncake/Kimi JSONL, one object per line
  ``{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}``; ``hash_ids`` name the
  prompt's 512-token blocks (equal ids = equal prefix blocks, for prefix-cache routing).

A line that cannot be parsed is counted by reason in :class:`TraceReport` (first reasons kept with
their line numbers), never dropped silently; ``lines == requests + bad + excluded`` always holds.
Each line is parsed on its own, so a stray quote damages one row, not the rest of the file; files are
streamed line by line into compact arrays (24 bytes per request; the 16.8M-request Azure 2024 code week
holds ~400 MB). Arrival
times are sorted and rebased to start at 0. Synthetic traces: :mod:`clustertwin.infer.synthetic`.
"""

from __future__ import annotations

import csv
import json
import math
import re
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from clustertwin.errors import SpecError, did_you_mean

FORMATS = ("azure", "burstgpt", "mooncake")
MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per ``hash_ids`` block in the Mooncake traces (FAST'25 release README)."""
MAX_TRACE_BYTES = 2 * 1024**3
"""Largest trace file read into memory (the Azure 2024 week-long code trace is 692 MB)."""
_KEEP_REASONS = 5

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
_TS = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?")


@dataclass
class TraceReport:
    """What a reader saw: data lines, requests kept, malformed lines by reason, excluded records."""

    path: str
    format: str
    lines: int = 0
    requests: int = 0
    bad: Counter = field(default_factory=Counter)
    excluded: Counter = field(default_factory=Counter)
    first_bad: list[str] = field(default_factory=list)

    def add_bad(self, line_no: int, reason: str) -> None:
        key = reason.split(":")[0]
        self.bad[key] += 1
        if len(self.first_bad) < _KEEP_REASONS:
            self.first_bad.append(f"line {line_no}: {reason}")

    @property
    def bad_lines(self) -> int:
        return int(sum(self.bad.values()))

    def summary(self) -> str:
        """One line: ``N requests from L lines (B malformed: reasons; E excluded: reasons)``."""
        s = f"{self.requests:,} requests from {self.lines:,} lines of {self.path} ({self.format})"
        if self.bad:
            s += f"; {self.bad_lines:,} malformed ({', '.join(f'{k} {v}' for k, v in self.bad.most_common())})"
        if self.excluded:
            s += f"; {sum(self.excluded.values()):,} excluded ({', '.join(f'{k} {v}' for k, v in self.excluded.items())})"
        return s

    def to_dict(self) -> dict:
        return {"path": self.path, "format": self.format, "lines": self.lines, "requests": self.requests,
                "malformed": dict(self.bad), "excluded": dict(self.excluded), "first_malformed": self.first_bad}


@dataclass
class RequestTrace:
    """Requests sorted by arrival (seconds from the first), with token lengths and optional prefix blocks."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    report: TraceReport
    prefix_blocks: list[tuple[int, ...]] | None = None
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0

    @property
    def mean_rate(self) -> float:
        """Requests/s over the span (n − 1 gaps over the duration)."""
        return (len(self) - 1) / self.duration_s if self.duration_s > 0 else math.inf

    def rate_per_window(self, window_s: float) -> np.ndarray:
        """Arrivals per second in consecutive windows of ``window_s``; the span is cut into
        ``round(duration / window_s)`` windows, the last one taking the remainder (0.5-1.5 windows
        long) and its rate over its real length."""
        n_w = max(1, round(self.duration_s / window_s))
        idx = np.minimum((self.arrival_s // window_s).astype(np.int64), n_w - 1)
        counts = np.bincount(idx, minlength=n_w)
        lengths = np.full(n_w, float(window_s))
        lengths[-1] = max(self.duration_s - (n_w - 1) * window_s, 1e-9)
        return counts / lengths

    def peak_to_mean(self, window_s: float = 60.0) -> float:
        """Largest window rate over the mean window rate (the burstiness figure of the trace notes)."""
        r = self.rate_per_window(window_s)
        return float(r.max() / r.mean()) if r.mean() > 0 else math.nan

    def select(self, keep: np.ndarray | slice) -> RequestTrace:
        idx = np.arange(len(self))[keep]
        pre = [self.prefix_blocks[i] for i in idx] if self.prefix_blocks is not None else None
        arr = self.arrival_s[idx]
        return RequestTrace(arr - (arr[0] if len(arr) else 0.0), self.input_len[idx], self.output_len[idx],
                            self.report, pre, self.block_tokens)

    def head(self, n: int) -> RequestTrace:
        """The first ``n`` requests (vLLM ``--num-prompts``)."""
        return self.select(slice(0, n))

    def with_rate(self, rate: float) -> RequestTrace:
        """Arrival times scaled so the mean rate is ``rate`` requests/s (same burst shape)."""
        if not math.isfinite(self.mean_rate):
            raise SpecError("a trace needs two arrival times to be rescaled to a request rate")
        return RequestTrace(self.arrival_s * (self.mean_rate / rate), self.input_len, self.output_len,
                            self.report, self.prefix_blocks, self.block_tokens)

    def stats(self) -> dict:
        q = lambda x: {"mean": float(np.mean(x)), "p50": float(np.median(x)),  # noqa: E731
                       "p99": float(np.percentile(x, 99))}
        return {"requests": len(self), "duration_s": self.duration_s, "mean_rate": self.mean_rate,
                "peak_to_mean_60s": self.peak_to_mean(60.0), "input_len": q(self.input_len),
                "output_len": q(self.output_len)}


def _check_file(path: Path) -> None:
    if not path.exists():
        raise SpecError(f"trace not found: {path}")
    if path.is_dir():
        raise SpecError(f"trace is a directory, expected a file: {path}")
    if path.stat().st_size > MAX_TRACE_BYTES:
        raise SpecError(f"trace is larger than {MAX_TRACE_BYTES // 1024**3} GiB; split it first", file=str(path))


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` streamed from a UTF-8 file (a BOM is skipped; CR, LF and CRLF all end a
    line); bytes that are not UTF-8 stop the read with the byte offset."""
    _check_file(path)
    offset = 0
    n = 0
    with path.open("rb") as fh:
        for raw in fh:
            try:
                text = raw.decode("utf-8-sig" if offset == 0 else "utf-8")
            except UnicodeDecodeError as e:
                raise SpecError(f"not UTF-8 text: byte 0x{raw[e.start]:02x} at offset {offset + e.start}",
                                file=str(path)) from None
            offset += len(raw)
            for part in text.splitlines() or [""]:
                n += 1
                yield n, part


def _int(text: str, name: str) -> int:
    """A token count in [0, 2^31) from a field's text; anything else (not a number, NaN/inf, a fraction, a
    400-digit integer) is a ValueError the reader counts against the line."""
    t = text.strip()
    if len(t) > 40:
        raise ValueError(f"bad {name}: '{t[:40]}...' ({len(t)} characters) is not a token count in [0, 2^31)")
    try:
        v = float(t) if ("." in t or "e" in t.lower()) else int(t)
    except ValueError:
        raise ValueError(f"bad {name}: '{t[:40]}' is not a number") from None
    if isinstance(v, float) and (not math.isfinite(v) or v != int(v)):
        raise ValueError(f"bad {name}: '{t[:40]}' is not a token count in [0, 2^31)")
    if not 0 <= v < 2**31:
        raise ValueError(f"bad {name}: '{t[:40]}' is not a token count in [0, 2^31)")
    return int(v)


def _timestamp(value: object) -> float:
    """A finite timestamp (ms) from a JSON value; a bool, a string that is not a number, an infinity or an
    integer beyond float range is a ValueError counted against the line."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"bad timestamp: {str(value)[:40]}")
    try:
        t = float(value)
    except (ValueError, OverflowError):
        raise ValueError(f"bad timestamp: {str(value)[:40]}") from None
    if not math.isfinite(t):
        raise ValueError(f"bad timestamp: {str(value)[:40]}")
    return t


_DAYS: dict[tuple[int, int, int], float] = {}


def azure_timestamp(text: str) -> float:
    """Seconds since the epoch of an Azure trace timestamp (naive times read as UTC)."""
    m = _TS.fullmatch(text.strip())
    if not m:
        raise ValueError(f"bad TIMESTAMP: '{text.strip()[:40]}' is not 'YYYY-MM-DD HH:MM:SS[.fffffff]'")
    y, mo, d, hh, mm, ss, frac, tz = m.groups()
    if int(hh) > 23 or int(mm) > 59 or int(ss) > 60:
        raise ValueError(f"bad TIMESTAMP: '{text.strip()[:40]}' has no such time of day")
    key = (int(y), int(mo), int(d))
    day = _DAYS.get(key)
    if day is None:
        try:
            day = _DAYS[key] = datetime(*key, tzinfo=UTC).timestamp()
        except ValueError:
            raise ValueError(f"bad TIMESTAMP: '{text.strip()[:40]}' is not a date") from None
    t = day + int(hh) * 3600 + int(mm) * 60 + int(ss) + (float("0." + frac) if frac else 0.0)
    if tz and tz != "Z":
        sign = -1 if tz[0] == "+" else 1
        digits = tz[1:].replace(":", "")
        t += sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return t


def _fields(line: str) -> list[str]:
    if '"' not in line:
        return line.split(",")
    return next(csv.reader([line]))


def _read_csv(path: Path, fmt: str, required: tuple[str, ...]) -> RequestTrace:
    lines = _lines(path)
    rep = TraceReport(str(path), fmt)
    first = next(lines, None)
    if first is None:
        raise SpecError("empty trace", file=str(path))
    header = [h.strip() for h in _fields(first[1])]
    col = {h.lower(): i for i, h in enumerate(header)}
    missing = [c for c in required if c.lower() not in col]
    if missing:
        raise SpecError(f"missing column '{missing[0]}'{did_you_mean(missing[0], header)}; expected "
                        f"{', '.join(required)}", file=str(path))
    i_t, i_in, i_out = (col[c.lower()] for c in required)
    n_f = len(header)
    arr, isl, osl = array("d"), array("q"), array("q")
    for line_no, line in lines:
        if not line.strip():
            continue
        rep.lines += 1
        try:
            f = _fields(line)
        except csv.Error as e:
            rep.add_bad(line_no, f"unparseable CSV: {e}")
            continue
        if len(f) != n_f:
            rep.add_bad(line_no, f"wrong field count: expected {n_f} fields, got {len(f)}")
            continue
        try:
            t = azure_timestamp(f[i_t]) if fmt == "azure" else float(f[i_t])
            if not math.isfinite(t):
                raise ValueError(f"bad {required[0]}: '{f[i_t][:40]}' is not finite")
            a, b = _int(f[i_in], required[1]), _int(f[i_out], required[2])
        except ValueError as e:
            rep.add_bad(line_no, str(e))
            continue
        if _excluded(rep, a, b):
            continue
        arr.append(t)
        isl.append(a)
        osl.append(b)
    return _finish(rep, arr, isl, osl, None)


def _excluded(rep: TraceReport, input_tokens: int, output_tokens: int) -> bool:
    """Count and skip requests that did no serving work: 0 output tokens (a failed request) or an empty
    prompt. They are excluded by cause in the report, never dropped silently."""
    if output_tokens == 0:
        rep.excluded["failed request (0 output tokens)"] += 1
        return True
    if input_tokens == 0:
        rep.excluded["empty prompt (0 input tokens)"] += 1
        return True
    return False


def _finish(rep: TraceReport, arr: array, isl: array, osl: array,
            blocks: list[tuple[int, ...]] | None) -> RequestTrace:
    if not arr:
        raise SpecError(f"no usable requests: {rep.summary()}"
                        + (f"; first: {rep.first_bad[0]}" if rep.first_bad else ""), file=rep.path)
    a = np.frombuffer(arr, dtype=np.float64)
    order = np.argsort(a, kind="stable")
    a = a[order] - a[order[0]]
    rep.requests = len(a)
    pre = [blocks[i] for i in order] if blocks is not None else None
    return RequestTrace(a, np.frombuffer(isl, dtype=np.int64)[order], np.frombuffer(osl, dtype=np.int64)[order],
                        rep, pre)


def read_azure(path: str | Path) -> RequestTrace:
    return _read_csv(Path(path), "azure", AZURE_COLUMNS)


def read_burstgpt(path: str | Path) -> RequestTrace:
    return _read_csv(Path(path), "burstgpt", BURSTGPT_COLUMNS)


def read_mooncake(path: str | Path) -> RequestTrace:
    p = Path(path)
    rep = TraceReport(str(p), "mooncake")
    arr, isl, osl = array("d"), array("q"), array("q")
    blocks: list[tuple[int, ...]] = []
    for line_no, line in _lines(p):
        if not line.strip():
            continue
        rep.lines += 1
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            rep.add_bad(line_no, f"bad JSON: {str(e)[:60]}")
            continue
        if not isinstance(obj, dict):
            rep.add_bad(line_no, "bad JSON: a line must be an object")
            continue
        miss = [k for k in ("timestamp", "input_length", "output_length") if k not in obj]
        if miss:
            rep.add_bad(line_no, f"missing key: '{miss[0]}'{did_you_mean(miss[0], [str(k) for k in obj])}")
            continue
        try:
            t = _timestamp(obj["timestamp"])
            a, b = _int(str(obj["input_length"]), "input_length"), _int(str(obj["output_length"]), "output_length")
            h = obj.get("hash_ids", [])
            if not isinstance(h, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in h):
                raise ValueError("bad hash_ids: expected a list of integers")
        except (TypeError, ValueError) as e:
            rep.add_bad(line_no, str(e))
            continue
        if _excluded(rep, a, b):
            continue
        arr.append(t / 1e3)
        isl.append(a)
        osl.append(b)
        blocks.append(tuple(h))
    return _finish(rep, arr, isl, osl, blocks)


def detect(path: Path) -> str:
    """Format from the file: JSON lines are Mooncake, a CSV header names Azure or BurstGPT columns."""
    with path.open("rb") as fh:
        head = fh.read(4096).decode("utf-8-sig", errors="replace").lstrip()
    if head.startswith("{"):
        return "mooncake"
    first = head.splitlines()[0].lower() if head else ""
    if "contexttokens" in first:
        return "azure"
    if "request tokens" in first:
        return "burstgpt"
    raise SpecError("unknown trace format: expected an Azure LLM CSV (TIMESTAMP,ContextTokens,GeneratedTokens), "
                    "a BurstGPT CSV (Timestamp,Model,Request tokens,...) or Mooncake JSONL; give --format",
                    file=str(path))


def read_trace(path: str | Path, fmt: str | None = None) -> RequestTrace:
    """Read a trace file in ``fmt`` (``azure``, ``burstgpt``, ``mooncake``; None: detected)."""
    p = Path(path)
    if fmt is None:
        _check_file(p)
        fmt = detect(p)
    if fmt not in FORMATS:
        raise SpecError(f"unknown trace format '{fmt}'{did_you_mean(fmt, FORMATS)} (choose from {', '.join(FORMATS)})")
    return {"azure": read_azure, "burstgpt": read_burstgpt, "mooncake": read_mooncake}[fmt](p)
