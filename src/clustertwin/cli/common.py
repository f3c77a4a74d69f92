"""Shared CLI helpers: loading specs from ids or files, JSON output, rich console."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import typing
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from clustertwin import specs
from clustertwin.cli.terminal import SafeConsole, safe_text
from clustertwin.errors import SpecError
from clustertwin.safety import terminal_safe

console = SafeConsole()
err_console = SafeConsole(stderr=True)

DEFAULT_CLUSTER = "ref-1k-h100"

ClusterOpt = typer.Option(DEFAULT_CLUSTER, "--cluster", "-c", help="Cluster catalog id or YAML/JSON file.")
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")


# ------------------------------------------------------------------------- options from spec fields
def literal_choices(spec: type[BaseModel], name: str) -> tuple[str, ...]:
    """The values a Literal field of ``spec`` (or a tuple / optional of Literals) admits; () for a free value."""
    ann = spec.model_fields[name].annotation
    while typing.get_origin(ann) is not typing.Literal and typing.get_args(ann):
        ann = typing.get_args(ann)[0]
    return tuple(str(a) for a in typing.get_args(ann)) if typing.get_origin(ann) is typing.Literal else ()


def spec_help(spec: type[BaseModel], name: str, *, not_given: str | None = None) -> str:
    """Help text of the option that sets ``spec.name``: the field's docstring (inline code marks dropped), its
    choices when the docstring does not name them all, and its default (or ``not_given``: what a value not
    given becomes)."""
    f = spec.model_fields[name]
    text = " ".join((f.description or "").replace("``", "").split())
    choices = literal_choices(spec, name)
    if choices and not all(c in text for c in choices):
        text = text.rstrip(".") + f". One of: {', '.join(choices)}."
    default = not_given or (None if f.default in (None, (), "") else f"default {f.default}")
    return f"{text} ({default})" if default else text


def spec_option(spec: type[BaseModel], name: str, *decls: str, **kw: Any) -> Any:
    """A typer option for ``spec.name`` whose default and help are the field's (``kw`` adds typer settings)."""
    f = spec.model_fields[name]
    default = kw.pop("default", None if f.is_required() else f.default)
    return typer.Option(default, *decls, help=kw.pop("help", None) or spec_help(spec, name), **kw)


def load_cluster(ref: str | Path) -> specs.ClusterSpec:
    return specs.load(specs.ClusterSpec, str(ref), kind="cluster")


def load_model(ref: str | Path) -> specs.ModelSpec:
    return specs.load(specs.ModelSpec, str(ref), kind="model")


def load_calibration(ref: str | Path | None, cluster: specs.ClusterSpec | None = None,
                     force: bool = False) -> specs.Calibration | None:
    """The Calibration in ``ref`` (None: none given), every section range-checked by its layer's parameters
    (importing the three parameter modules registers their checks, ``specs.calibration.SECTION_CHECKS``);
    with ``cluster``, refused (exit 2, one line) when it was measured on another GPU than the cluster's,
    unless ``force``."""
    if ref is None:
        return None
    import clustertwin.comm.params
    import clustertwin.infer.params
    import clustertwin.train.params  # noqa: F401

    cal = specs.load(specs.Calibration, str(ref))
    if cluster is not None:
        gpu = cluster.node.gpu
        cal.check_gpu(gpu.id or gpu.name, force=force, file=str(ref))
    return cal


def require_gpus(value: int | None, flag: str = "--gpus") -> int | None:
    """``value`` unchanged (None = not given: the whole cluster); SpecError for a count below 1, which
    would otherwise fall through to the whole-cluster default."""
    if value is not None and value < 1:
        raise SpecError(f"{flag} must be >= 1 (got {value}); omit {flag} for the whole cluster")
    return value


ForceCalOpt = typer.Option(False, "--force", help="Apply a calibration measured on another GPU than the cluster's.")


def check_output_path(path: Path, option: str = "--output") -> Path:
    """``path`` if a file can be created there; a missing directory or a directory in its place is a
    one-line SpecError naming the option, raised before any work starts."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise SpecError(f"{option} {path}: is a directory, expected a file name")
    if not parent.is_dir():
        raise SpecError(f"{option} {path}: directory {parent} does not exist")
    return path


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """``typer.echo`` for lines that carry user strings (file names, messages): terminal controls escaped."""
    typer.echo(terminal_safe(text), err=err, nl=nl)


def jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return jsonable(obj.model_dump(mode="json"))
    if hasattr(obj, "to_dict"):
        return jsonable(obj.to_dict())
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return jsonable(obj.item())
    if isinstance(obj, Path):
        return str(obj)
    return obj


def print_json(obj: Any) -> None:
    """Print stable JSON (numpy scalars and specs converted) to stdout."""
    typer.echo(json.dumps(jsonable(obj), indent=2))


_NUMBER_CHARS = frozenset("0123456789.,+-%$e×x|/ infa")
"""Characters of a formatted number cell (``1,234.5``, ``-3.2e+05``, ``$1.69``, ``12%``, ``33.5 | 1.1``, ``inf``)."""


def _is_number(cell: str) -> bool:
    return (bool(cell) and any(c.isdigit() for c in cell) and set(cell) <= _NUMBER_CHARS) or cell in ("-", "inf", "nan")


class FitTable(Table):
    """A rich table that never truncates a number and always stays a table.

    Columns whose cells are all numbers keep their full width (``min_width`` = longest cell or header word);
    text columns and headers fold. When even that cannot fit the terminal (``COLUMNS=80``, or a pipe, which
    rich treats as 80 columns), the table drops to a narrower layout: its columns are split into consecutive
    parts, each a table that fits and repeats the leading columns that label a row, so every figure prints
    whole and each row keeps its label.
    """

    def _min_widths(self) -> list[int]:
        widths = []
        for col in self.columns:
            cells = [str(c) for c in col._cells]
            header_word = max((len(w) for w in str(col.header).split()), default=1)
            if cells and all(_is_number(c) for c in cells):
                widths.append(max(header_word, *(len(c) for c in cells)))
            else:
                longest_word = max((len(w) for c in cells for w in c.split()), default=1)
                widths.append(max(min(header_word, 12), min(longest_word, 12)))
        return widths

    def _key_count(self, mins: list[int], max_width: int) -> int:
        """How many leading columns label a row: the shortest prefix (at most 3 columns, half the width)
        whose cells tell every row apart; 1 when none does."""
        cells = [[str(c) for c in col._cells] for col in self.columns]
        for k in range(1, min(3, len(mins) - 1) + 1):
            if sum(mins[:k]) + 3 * k > max_width // 2:
                break
            if len(set(zip(*cells[:k], strict=True))) == len(cells[0]):
                return k
        return 1

    @staticmethod
    def _parts(mins: list[int], keys: int, max_width: int) -> list[list[int]]:
        """Column indices of each part: the ``keys`` label columns plus as many following columns as fit (at
        least one)."""
        parts: list[list[int]] = []
        label = list(range(keys))
        cur = list(label)
        for i in range(keys, len(mins)):
            width = sum(mins[j] for j in cur) + mins[i] + 3 * (len(cur) + 1) + 1
            if width > max_width and len(cur) > keys:
                parts.append(cur)
                cur = list(label)
            cur.append(i)
        parts.append(cur)
        return parts

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        mins = self._min_widths()
        chrome = 3 * len(mins) + 1  # borders and one space of padding each side
        if sum(mins) + chrome <= options.max_width or len(mins) <= 2:
            for col, width in zip(self.columns, mins, strict=True):
                col.min_width = width
            yield from super().__rich_console__(console, options)
            return
        keys = self._key_count(mins, options.max_width)
        for n, part in enumerate(self._parts(mins, keys, options.max_width)):
            sub = copy.copy(self)
            sub.columns = [dataclasses.replace(self.columns[i], min_width=mins[i]) for i in part]
            if n:
                sub.title = None
            yield sub


def table(title: str | None, columns: list[str], rows: list[list[Any]], **kw: Any) -> Table:
    """A table of formatted cells; numbers are never truncated (:class:`FitTable`). Title, headers and cells are
    plain text, never rich markup, with terminal controls escaped (``cli/terminal.py``), so a value such as
    ``pip install 'clustertwin[nvml]'`` prints with its brackets and a name cannot restyle the screen."""
    t = FitTable(title=None if title is None else safe_text(title), title_justify="left", **kw)
    for i, c in enumerate(columns):
        t.add_column(safe_text(c), justify="left" if i == 0 else "right", overflow="fold")
    for r in rows:
        t.add_row(*[v if isinstance(v, Text) else safe_text(fmt(v)) for v in r])
    return t


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    if isinstance(v, float):
        if v == 0:
            return "0"
        a = abs(v)
        if a >= 1e5:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:,.1f}"
        if a >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    return str(v)


# ------------------------------------------------------------------------------------- numeric options
#: Numeric options that count things, degrees of parallelism, sizes, rates and durations that cannot be
#: zero; every other int/float option must be finite and >= 0 (see :func:`check_number_option`).
POSITIVE_OPTIONS: frozenset[str] = frozenset({
    "--gpus", "--tp", "--pp", "--dp", "--cp", "--ep", "--vpp", "--micro-batch", "--global-batch", "--seq-len",
    "--num-requests", "--nodes", "--top", "--processes", "--batch-points", "--ranks-per-node",
    "--nprocs", "--input-len", "--output-len", "--batch", "--concurrency", "--request-rate", "--qps",
    "--slo-ttft-ms", "--slo-tpot-ms", "--percentile", "--tokens", "--tokens-per-s", "--days", "--window-days",
    "--checkpoint-gb", "--node-mtbf-h", "--node-mttr-h", "--max-jobs", "--cpu-procs",
    "--gpus-per-host", "--step-factor", "--start-gpus", "--gemm-n", "--memory-mib", "--storage-mib", "--iodepth",
    "--port",
})


#: Physical upper bounds of options whose value sizes an allocation or an exponent, far above any real
#: figure (largest published runs: ~10^5 GPUs, 10^13-10^14 tokens, checkpoints of tens of TB, months).
OPTION_MAX: dict[str, float] = {
    "--gpus": 1e8, "--start-gpus": 1e8, "--nodes": 1e7, "--hot-spares": 1e7, "--trials": 1e8,
    "--num-requests": 1e7, "--concurrency": 1e6, "--batch": 1e6, "--input-len": 2**30, "--output-len": 2**30,
    "--seq-len": 2**30, "--tokens": 1e18, "--tokens-per-s": 1e12, "--days": 36_500.0, "--window-days": 36_500.0,
    "--checkpoint-gb": 1e6, "--max-jobs": 1e9,
}
MAX_OPTION_INT = 2**53
"""Largest integer any option takes (exact in float64; products of a few stay within int64)."""


def check_number_option(name: str, value: Any) -> str | None:
    """Why ``value`` is not acceptable for the numeric option ``name``, or None: every numeric option is
    finite (no NaN/inf), at least 0 and, for integers, at most 2^53 (so int64 arithmetic cannot overflow);
    the options in :data:`POSITIVE_OPTIONS` are > 0 and those in :data:`OPTION_MAX` below their bound."""
    if value is None or isinstance(value, bool):
        return None
    values = value if isinstance(value, list | tuple) else (value,)
    for v in values:
        if isinstance(v, float) and not math.isfinite(v):
            return f"{name} must be a finite number (got {v})"
        if isinstance(v, int | float):
            if isinstance(v, int) and abs(v) > MAX_OPTION_INT:
                return f"{name} must be at most 2^53 (got {v})"
            if name in OPTION_MAX and v > OPTION_MAX[name]:
                return f"{name} must be at most {OPTION_MAX[name]:,.0f} (got {v:g})"
            if name in POSITIVE_OPTIONS and v <= 0:
                if name == "--gpus":  # 0 once meant the whole cluster silently
                    return f"--gpus must be >= 1 (got {v:g}); omit --gpus for the whole cluster"
                return f"{name} must be > 0 (got {v:g})" if isinstance(v, float) else f"{name} must be >= 1 (got {v})"
            if v < 0:
                return f"{name} must be >= 0 (got {v:g})"
    return None
