"""CLI tables never truncate a number: at 80 columns a wide table keeps every figure whole (it wraps text
columns, or prints one block per row when even that cannot fit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from clustertwin.cli.common import table

BIN = Path(sys.executable).parent / "clustertwin"
SIZE_ARGS = ["infer", "size", "-m", "llama3-70b", "--qps", "10", "--input-len", "512", "--output-len", "256",
             "--slo-ttft-ms", "500", "--slo-tpot-ms", "50"]


def _render(t, width: int) -> str:
    c = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    c.print(t)
    return c.export_text()


def test_numbers_stay_whole_in_a_narrow_table() -> None:
    cols = ["name", *[f"metric number {i}" for i in range(10)]]
    rows = [["a fairly long text cell", *[1234567.0 + i for i in range(10)]]]
    out = _render(table("wide", cols, rows), 80)
    assert "…" not in out
    for i in range(10):
        assert f"{1234567 + i:,}" in out


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
        assert f"{c['replica_qps']:.2f}" in text
