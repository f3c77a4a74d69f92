"""Streaming results: the Parquet file and fronts written batch by batch equal the in-memory run, and the
executor keeps no rows; work caps refuse oversize spaces with how to raise them; random spaces sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from tests.conftest import run_cli
from tests.sweep.test_executors import SPACE

from clustertwin.errors import SpecError
from clustertwin.sweep import FRONTS, front, load_space, point_ids, run_local
from clustertwin.sweep.stream import ParquetStream


def test_stream_equals_in_memory(tmp_path: Path) -> None:
    space = load_space(SPACE)
    memory = run_local(space, processes=1, batch_points=5)
    out = tmp_path / "r.parquet"
    with ParquetStream(out, space.model_dump_json()) as sink:
        streamed = run_local(space, processes=1, batch_points=5, sink=sink)
    assert streamed.table is None and streamed.points == memory.points == sink.rows
    assert pq.read_table(out).equals(memory.table)
    assert pq.ParquetFile(out).metadata.num_row_groups == streamed.batches  # one row group per batch
    for name, (x, y) in FRONTS.items():
        assert sink.fronts[name].equals(front(memory.table, x, y))


def test_work_cap_and_random_samples() -> None:
    grid = load_space(SPACE).grid_size
    with pytest.raises(SpecError, match="raise it with --max-points"):
        load_space(SPACE, max_points=grid - 1)
    with pytest.raises(SpecError, match="exceeds the grid"):  # never a silent fall-back to the whole grid
        load_space({**SPACE, "mode": "random", "samples": 1e9})
    ids = point_ids(load_space({**SPACE, "mode": "random", "samples": 5, "seed": 2}))
    assert len(ids) == 5 == len(np.unique(ids))


def test_out_in_missing_directory_is_one_line(tmp_path: Path) -> None:
    space = tmp_path / "s.yaml"
    space.write_text("name: s\nmodel: [llama3-8b]\nnode: [dgx-h100]\nnodes: [2]\nfabric: [ib-ndr]\n")
    r = run_cli("sweep", str(space), "--out", str(tmp_path / "nope" / "r.parquet"))
    assert r.code == 2 and len(r.stderr.strip().splitlines()) == 1 and "does not exist" in r.stderr
