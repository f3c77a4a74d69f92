"""``clustertwin sweep``: writes Parquet, prints Pareto fronts, bad input is one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]

SPACE = """name: cli
model: [llama3-8b]
node: [dgx-h100, dgx-b200]
nodes: [2, 4]
fabric: [ib-ndr]
topology: [fat-tree]
global_batch: [128]
tokens: 1.0e11
layout: [{tp: 8}, {tp: 4, pp: 2}]
checkpoint: [{policy: restart}]
"""


def test_sweep_writes_parquet_and_pareto_fronts(cli, tmp_path: Path) -> None:
    """The JSON summary counts the points, the file holds them, and the fronts are non-dominated."""
    space = tmp_path / "s.yaml"
    space.write_text(SPACE)
    out = tmp_path / "s.parquet"
    r = cli("sweep", str(space), "--out", str(out), "--processes", "1", "--json")
    assert r.code == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["points"] == 8 == pq.read_metadata(out).num_rows
    front = summary["pareto"]["time_vs_cost"]
    assert front and [p["wall_days"] for p in front] == sorted(p["wall_days"] for p in front)
    costs = [p["cost_usd"] for p in front]
    assert costs == sorted(costs, reverse=True)


def test_sweep_prints_tables(cli, tmp_path: Path) -> None:
    """Without --json the summary line and both fronts are printed."""
    space = tmp_path / "s.yaml"
    space.write_text(SPACE)
    r = cli("sweep", str(space), "--out", str(tmp_path / "o.parquet"), "--processes", "1")
    assert r.code == 0, r.stderr
    assert "cli: 8 points on local" in r.stdout
    assert "Pareto front: wall_days vs cost_usd" in r.stdout and "Pareto front: wall_days vs energy_mwh" in r.stdout


def test_example_space_loads() -> None:
    """The shipped GPU-type x scale x fabric study is a valid space."""
    from clustertwin.sweep import load_space

    space = load_space(ROOT / "examples" / "sweeps" / "gpu-scale-fabric-70b.yaml")
    assert space.model == ["llama3-70b"] and len(space.node) >= 3 and len(space.fabric) >= 2


@pytest.mark.parametrize(("args", "message"), [
    (("--executor", "dask"), "unknown executor 'dask'"),
    (("--address", "auto"), "--address applies to --executor ray only"),
    (("--processes", "0"), "processes must be >= 1"),
])
def test_bad_options_exit_2(cli, tmp_path: Path, args, message) -> None:
    """Bad options are one line on stderr and exit code 2."""
    space = tmp_path / "s.yaml"
    space.write_text(SPACE)
    r = cli("sweep", str(space), "--out", str(tmp_path / "o.parquet"), *args)
    assert r.code == 2 and message in r.stderr and r.stderr.count("\n") == 1


def test_bad_space_file_exit_2(cli, tmp_path: Path) -> None:
    """A typo in the space names the file, the field and the nearest valid name."""
    space = tmp_path / "s.yaml"
    space.write_text(SPACE.replace("fabric:", "fabrik:"))
    r = cli("sweep", str(space))
    assert r.code == 2
    assert r.stderr.strip() == f"error: {space}: fabrik: unknown key 'fabrik'; did you mean 'fabric'?"
