"""Input layer: every file clustertwin reads goes through here, so bad bytes, absurd sizes and hostile numbers
become one-line :class:`~clustertwin.errors.SpecError` messages (exit code 2) naming the file, instead of
``UnicodeDecodeError``, ``RecursionError`` or a numpy overflow deep inside a model.

- Text: :func:`read_text` decodes UTF-8 (a UTF-8 BOM is dropped); other bytes are an error naming the byte
  offset, or, for logs that may be dirty (``dirty=True``), replaced with U+FFFD and counted.
- Documents: :func:`parse_document` reads YAML (:mod:`clustertwin.yaml_load`: safe loader, alias expansion
  budgeted, duplicate keys refused) or JSON (numbers longer than :data:`MAX_NUMBER_CHARS` refused), then
  :func:`check_tree` limits the nesting depth (:data:`MAX_DEPTH`) and integers to int64; Python's 4,300-digit
  integer limit and deep recursion are reported as such.
- CSV: :func:`csv_rows` parses one physical line at a time, so a stray quote damages one row and the reader
  resynchronises at the next line; rows with the wrong field count or an oversize field are rejected and
  counted by cause (:class:`RowDamage`).
- Numbers: :func:`parse_int` / :func:`parse_float` check finiteness, the int64 range and sign before a value
  reaches numpy.
"""

from __future__ import annotations

import csv
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clustertwin.errors import SpecError
from clustertwin.yaml_load import load_yaml

MAX_DOCUMENT_BYTES = 256 * 2**20
"""Largest spec/calibration/sweep/case document read (256 MiB; the largest shipped case file is ~1 MiB)."""
MAX_DEPTH = 64
"""Deepest nesting of mappings/lists in a document (specs nest 4-5 levels)."""
MAX_FIELD_BYTES = 128 * 2**10
"""Longest CSV field accepted (128 KiB, csv's default limit); a longer one damages only its row."""
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

MAX_NUMBER_CHARS = 100
"""Longest number literal in a JSON document (int64 has 19 digits, a float's shortest repr at most 24)."""

_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
         (b"\xfe\xff", "UTF-16"))


def read_bytes(path: str | Path, *, max_bytes: int | None = MAX_DOCUMENT_BYTES) -> bytes:
    """The file's bytes; a missing, unreadable or oversize file is a SpecError naming it."""
    p = Path(path)
    try:
        if max_bytes is not None and p.stat().st_size > max_bytes:
            raise SpecError(f"file is {p.stat().st_size:,} bytes, more than the {max_bytes:,}-byte limit",
                            file=str(p))
        return p.read_bytes()
    except FileNotFoundError:
        raise SpecError("file not found", file=str(p)) from None
    except IsADirectoryError:
        raise SpecError("is a directory, expected a file", file=str(p)) from None
    except OSError as e:
        raise SpecError(f"cannot read file: {e.strerror}", file=str(p)) from None


def decode_text(data: bytes, file: str | None = None) -> str:
    """UTF-8 text of ``data`` (BOM dropped); anything else is a SpecError with the first bad byte's offset."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise SpecError(f"{name} text (byte-order mark at offset 0); save it as UTF-8", file=file)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        bad = data[e.start:e.start + 1].hex()
        raise SpecError(f"not UTF-8 text: byte 0x{bad} at offset {e.start} ({e.reason})", file=file) from None


@dataclass(frozen=True)
class DirtyText:
    """Text decoded leniently: undecodable bytes became U+FFFD and are counted."""

    text: str
    bad_bytes: int
    """Bytes that were not UTF-8 (each replaced by U+FFFD)."""
    encoding: str = "utf-8"


def decode_dirty(data: bytes) -> DirtyText:
    """Decode a log that may hold stray bytes: UTF-16/32 by byte-order mark, else UTF-8 with replacement,
    counting the replaced bytes (reported by the caller, never silently dropped)."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            enc = {"UTF-16": "utf-16", "UTF-32": "utf-32"}[name]
            text = data.decode(enc, errors="replace")
            return DirtyText(text, text.count("\ufffd"), enc)
    before = data.count("\ufffd".encode())
    text = data.decode("utf-8-sig", errors="replace")
    return DirtyText(text, text.count("\ufffd") - before)


def read_text(path: str | Path, *, max_bytes: int | None = MAX_DOCUMENT_BYTES) -> str:
    """Strict UTF-8 text of a file (see :func:`decode_text`)."""
    return decode_text(read_bytes(path, max_bytes=max_bytes), str(path))


def read_dirty_text(path: str | Path, *, max_bytes: int | None = None) -> DirtyText:
    """Lenient text of a log file (see :func:`decode_dirty`)."""
    return decode_dirty(read_bytes(path, max_bytes=max_bytes))


def check_tree(data: Any, file: str | None = None, *, max_depth: int = MAX_DEPTH) -> Any:
    """``data`` unchanged if no mapping/list nests deeper than ``max_depth`` and every integer fits int64;
    else a SpecError naming the path. Iterative, so a hostile depth cannot overflow the stack."""
    stack: list[tuple[Any, tuple, int]] = [(data, (), 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth >= max_depth:
                raise SpecError(f"nested deeper than {max_depth} levels", file=file, path=path[:8])
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for k, v in items:
                stack.append((v, (*path, k if isinstance(k, int | str) else str(k)), depth + 1))
        elif isinstance(node, int) and not isinstance(node, bool) and not INT64_MIN <= node <= INT64_MAX:
            raise SpecError(f"integer with {len(str(abs(node)))} digits is out of range (at most 2^63-1)",
                            file=file, path=path)
    return data


def _json_number(kind: type) -> Any:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise SpecError(f"a number of {len(text):,} characters (at most {MAX_NUMBER_CHARS})")
        return kind(text)

    return parse


_JSON_DECODER = json.JSONDecoder(parse_int=_json_number(int), parse_float=_json_number(float))


def parse_document(text: str, file: str | None = None, *, json_format: bool = False, limits: bool = True) -> Any:
    """YAML (:func:`clustertwin.yaml_load.load_yaml`) or JSON ``text`` as Python data, with :func:`check_tree`
    limits applied (``limits=False`` leaves them to the caller, e.g. per validation case so one bad case does
    not reject its whole file). Text over :data:`MAX_DOCUMENT_BYTES` is refused before parsing."""
    if len(text) > MAX_DOCUMENT_BYTES:
        raise SpecError(f"document of {len(text):,} characters is over the {MAX_DOCUMENT_BYTES:,} limit", file=file)
    try:
        data = _JSON_DECODER.decode(text) if json_format else load_yaml(text, file)
    except SpecError as e:
        raise e.with_context(file) from None
    except json.JSONDecodeError as e:
        raise SpecError(f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}", file=file) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"invalid {'JSON' if json_format else 'YAML'}{where}: {problem}", file=file) from None
    except RecursionError:
        raise SpecError(f"nested deeper than {MAX_DEPTH} levels", file=file) from None
    except ValueError as e:  # int() of more than sys.get_int_max_str_digits() digits
        msg = str(e).splitlines()[0]
        if "digits" in msg:
            msg = f"an integer with more than {sys.get_int_max_str_digits():,} digits"
        raise SpecError(f"unreadable value: {msg}", file=file) from None
    return check_tree(data, file) if limits else data


def read_document(path: str | Path, *, limits: bool = True) -> Any:
    """A YAML or JSON file (by suffix) as checked Python data (see :func:`parse_document`)."""
    p = Path(path)
    return parse_document(read_text(p), str(p), json_format=p.suffix.lower() == ".json", limits=limits)


# ---------------------------------------------------------------------------------------------- numbers

_INT_RE = re.compile(r"[+-]?\d{1,19}")


def parse_int(text: object, what: str, *, min_value: int | None = 0, max_value: int = INT64_MAX,
              file: str | None = None) -> int:
    """An integer within [min_value, max_value] (default: non-negative int64) from ``text`` (an int, or a
    string of digits; ``'8.0'`` and ``8.0`` are accepted as 8). A bad value is a SpecError naming ``what``."""
    if isinstance(text, bool):
        raise SpecError(f"{what}: expected an integer, got {text!r}", file=file)
    if isinstance(text, int):
        v = text
    elif isinstance(text, float):
        if not math.isfinite(text) or text != int(text):
            raise SpecError(f"{what}: expected an integer, got {text!r}", file=file)
        v = int(text)
    else:
        s = str(text).strip()
        if _INT_RE.fullmatch(s):
            v = int(s)
        else:
            f = parse_float(s, what, min_value=None, file=file)
            if f != int(f):
                raise SpecError(f"{what}: expected an integer, got {s[:40]!r}", file=file)
            v = int(f)
    lo = INT64_MIN if min_value is None else min_value
    if not lo <= v <= max_value:
        raise SpecError(f"{what}: {v} is out of range ({lo}..{max_value})", file=file)
    return v


def parse_float(text: object, what: str, *, min_value: float | None = 0.0, max_value: float | None = None,
                positive: bool = False, file: str | None = None) -> float:
    """A finite float (not NaN or infinite) within the bounds, from a number or its text."""
    s = text if isinstance(text, int | float) and not isinstance(text, bool) else str(text).strip()
    if isinstance(s, str) and len(s) > 64:
        raise SpecError(f"{what}: expected a number, got {len(s)} characters", file=file)
    try:
        v = float(s)
    except (TypeError, ValueError, OverflowError):
        raise SpecError(f"{what}: expected a number, got {str(text)[:40]!r}", file=file) from None
    if not math.isfinite(v):
        raise SpecError(f"{what}: expected a finite number, got {str(text)[:40]!r}", file=file)
    if positive and v <= 0:
        raise SpecError(f"{what}: must be > 0, got {v:g}", file=file)
    if min_value is not None and v < min_value:
        raise SpecError(f"{what}: must be >= {min_value:g}, got {v:g}", file=file)
    if max_value is not None and v > max_value:
        raise SpecError(f"{what}: must be <= {max_value:g}, got {v:g}", file=file)
    return v


# ---------------------------------------------------------------------------------------------- CSV


@dataclass
class RowDamage:
    """Rows a reader rejected, by cause; ``read + sum(causes) == input rows`` is the no-silent-drop rule."""

    causes: Counter = field(default_factory=Counter)
    first: dict[str, int] = field(default_factory=dict)
    """Line number of the first row of each cause (for the message)."""

    def add(self, cause: str, line: int) -> None:
        self.causes[cause] += 1
        self.first.setdefault(cause, line)

    @property
    def total(self) -> int:
        return sum(self.causes.values())

    def summary(self) -> str:
        """``'2 broken quote (first at line 69), 1 wrong field count (first at line 3)'``, or ``''``."""
        return ", ".join(f"{n} {c} (first at line {self.first[c]})" for c, n in self.causes.most_common())


def csv_rows(lines: Iterable[str], *, fields: int | None = None, min_fields: int | None = None,
             damage: RowDamage | None = None, start_line: int = 1, delimiter: str = ",",
             max_field_bytes: int = MAX_FIELD_BYTES) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of each well-formed CSV line.

    Each physical line is parsed on its own (trace CSVs have no multi-line fields), so an unbalanced quote
    damages only its line. Rejected lines are counted in ``damage`` by cause: ``broken quote``, ``wrong
    field count`` (``fields`` exact, or fewer than ``min_fields``), ``field too large``. Blank lines are
    skipped and not counted."""
    damage = damage if damage is not None else RowDamage()
    for n, raw in enumerate(lines, start=start_line):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        if len(line) > max_field_bytes and any(len(f) > max_field_bytes for f in line.split(delimiter)):
            damage.add("field too large", n)
            continue
        if line.count('"') % 2:
            damage.add("broken quote", n)
            continue
        try:
            row = next(csv.reader([line], delimiter=delimiter, strict=True))
        except csv.Error:
            damage.add("broken quote", n)
            continue
        if (fields is not None and len(row) != fields) or (min_fields is not None and len(row) < min_fields):
            damage.add("wrong field count", n)
            continue
        yield n, row


CASE_METADATA_KEYS = frozenset({"id", "kind", "source", "notes", "measured", "confidence", "date", "url", "tags"})
"""Keys every validation case may carry besides its kind's inputs (validation/README.md): identity, provenance
and the measured values; ``confidence`` (high, medium, low), ``date``, ``url`` and ``tags`` describe the
source and change no prediction."""
