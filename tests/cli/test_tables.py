"""CLI tables never truncate a number and stay tables: at 80 columns (or piped) a wide table keeps every
figure whole, wrapping text columns and headers, or splitting its columns into parts that each repeat the
row-label columns; never one ``column: value`` block per row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from clustertwin.cli.common import fmt, table

BIN = Path(sys.executable).parent / "clustertwin"
SIZE_ARGS = ["infer", "size", "-m", "llama3-70b", "--qps", "10", "--input-len", "512", "--output-len", "256",
             "--slo-ttft-ms", "500", "--slo-tpot-ms", "50"]


def _render(t, width: int) -> str:
    c = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    c.print(t)
    return c.export_text()


def _assert_tables_fit(text: str, width: int = 80) -> None:
    """Every line fits ``width``, and every line is part of a table (borders, header or row) or plain text
    without the ``name  value`` shape of a stacked record."""
    lines = text.splitlines()
    assert max(len(x.rstrip()) for x in lines) <= width
    assert sum(x.startswith("┏") for x in lines) >= 1


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in x.strip("│").split("│")] for x in text.splitlines() if x.startswith("│")]


def test_numbers_stay_whole_in_a_narrow_table() -> None:
    cols = ["name", *[f"metric number {i}" for i in range(10)]]
    rows = [["a fairly long text cell", *[1234567.0 + i for i in range(10)]]]
    out = _render(table("wide", cols, rows), 80)
    assert "…" not in out
    _assert_tables_fit(out)
    for i in range(10):
        assert f"{1234567 + i:,}" in out


def test_a_table_too_wide_splits_into_parts_that_repeat_the_row_labels() -> None:
    cols = ["node", "tp", "precision", *[f"figure {i}" for i in range(8)]]
    rows = [["dgx-h100", tp, prec, *[1000.5 * (i + 1) + tp for i in range(8)]]
            for tp in (1, 2) for prec in ("fp8", "bf16")]
    out = _render(table("wide", cols, rows), 80)
    _assert_tables_fit(out)
    parts = out.count("┏")
    assert parts >= 2
    got = _rows(out)
    assert len(got) == parts * len(rows)
    # node alone repeats across rows, (node, tp, precision) tells them apart: every part starts with the three
    labels = [tuple(str(v) for v in r[:3]) for r in rows]
    assert [tuple(r[:3]) for r in got] == labels * parts
    for r in rows:
        for v in r[3:]:
            assert f"{v:,.1f}" in out


def test_a_table_that_fits_stays_a_table() -> None:
    out = _render(table("small", ["key", "value"], [["GPUs", 1024], ["MFU", 0.412]]), 80)
    assert "┃" in out and "1,024" not in out and "1024" in out and "0.412" in out


def test_infer_size_at_80_columns_prints_every_number_whole() -> None:
    env = {**os.environ, "COLUMNS": "80"}
    text = subprocess.run([str(BIN), *SIZE_ARGS], capture_output=True, text=True, env=env, check=True).stdout
    data = json.loads(subprocess.run([str(BIN), *SIZE_ARGS, "--json"], capture_output=True, text=True, env=env,
                                     check=True).stdout)
    assert "…" not in text
    feasible = [c for c in data["candidates"] if c["feasible"]]
    assert feasible
    for c in feasible:
        assert fmt(float(c["replica_qps"])) in text


def _run(args: list[str], columns: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, env=env, check=True).stdout


def test_comm_table_at_80_columns_is_a_table_with_every_row_whole() -> None:
    args = ["comm", "all_reduce", "--gpus", "1024", "-b", "1M", "-e", "1G", "-f", "8"]
    text = _run(args, "80")
    _assert_tables_fit(text)
    data = json.loads(_run([*args, "--json"], "80"))
    sizes = [str(r.get("size_bytes", r.get("size"))) for r in data["rows"]]
    # the size column labels every part: each size appears once per part
    assert [r[0] for r in _rows(text)] == sizes * text.count("┏")


def test_infer_size_piped_is_a_table_that_fits_80_columns() -> None:
    text = _run(SIZE_ARGS, None)  # stdout is a pipe: rich lays out for 80 columns
    _assert_tables_fit(text)
    candidates = json.loads(_run([*SIZE_ARGS, "--json"], None))["candidates"]
    # one table row per candidate in every part (a stacked record would print no table rows at all)
    assert len(_rows(text)) == len(candidates) * text.count("┏")
