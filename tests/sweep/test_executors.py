"""Executors give identical tables; results round-trip through Parquet and answer DuckDB queries."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from clustertwin.sweep import COLUMNS, load_space, run_local, run_ray, write_parquet

SPACE = {"name": "tiny", "model": ["llama3-8b"], "node": ["dgx-h100", "mi300x-8"], "nodes": [2, 4],
         "fabric": ["ib-ndr", "roce-400g"], "topology": ["fat-tree"], "global_batch": [128], "tokens": 1e11,
         "layout": [{"tp": 8}, {"tp": 4, "pp": 2}, {"tp": 2, "micro_batch": 2, "recompute": "full"}],
         "checkpoint": [{"policy": "restart"}, {"policy": "spares", "async_checkpoint": True}]}


@pytest.fixture(scope="module")
def space():
    return load_space(SPACE)


@pytest.fixture(scope="module")
def local_table(space):
    return run_local(space, processes=1, batch_points=5).table


def test_two_processes_equal_one(space, local_table) -> None:
    """A two-process pool with other batch sizes produces the same table as one process (batches of at most 13
    points cut between designs of 6 points: two designs per batch)."""
    run = run_local(space, processes=2, batch_points=13)
    assert run.workers == 2 and run.batches == 4
    assert run.table.equals(local_table)


def test_parquet_has_the_documented_schema_and_answers_duckdb(space, local_table, tmp_path: Path) -> None:
    """The file carries every documented column with its description and the space; DuckDB can query it."""
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "r.parquet"
    write_parquet(local_table, path)
    schema = pq.read_schema(path)
    assert schema.names == [c[0] for c in COLUMNS]
    assert schema.field("wall_days").metadata[b"description"].startswith(b"expected wall time")
    assert json.loads(schema.metadata[b"clustertwin.space"])["name"] == "tiny"
    rows = duckdb.sql(f"select node, count(*) as n, min(wall_days) as best from '{path}' where status = 'ok' "
                      "group by node order by node").fetchall()
    assert [r[0] for r in rows] == ["dgx-h100", "mi300x-8"]
    assert sum(r[1] for r in rows) == sum(s == "ok" for s in local_table["status"].to_pylist())
    assert all(r[2] > 0 for r in rows)


def test_ray_executor_equals_local(space, local_table) -> None:
    """The same sweep on a local Ray started here gives a table equal to the local executor's."""
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI"):
            pytest.fail("ray is not installed (CI installs the 'ray' extra)")
        pytest.skip("ray is not installed")
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        run = run_ray(space, batch_points=8)
    finally:
        ray.shutdown()
    assert run.executor == "ray" and run.batches == 8  # 8 designs of 6 points, one per batch of <= 8
    assert run.table.equals(local_table)
