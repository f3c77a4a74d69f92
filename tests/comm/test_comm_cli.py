"""``clustertwin comm`` table, JSON and one-line errors; ``validate`` on an inline collective case."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clustertwin.cli.comm_cmd import sweep_sizes
from clustertwin.comm.validation import evaluate
from clustertwin.errors import SpecError


def test_table(cli):
    r = cli("comm", "all_reduce", "--gpus", "16", "-b", "8", "-e", "1M", "-f", "4")
    assert r.code == 0, r.stderr
    assert "busbw" in r.stdout and "all_reduce on 16 GPUs (2 nodes x 8)" in r.stdout
    assert "tree" in r.stdout


def test_json_rows(cli):
    r = cli("comm", "all_gather", "--cluster", "ref-1k-h100", "--gpus", "64", "--min-bytes", "64K",
            "--max-bytes", "8M", "--algorithm", "ring", "--protocol", "simple", "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["gpus"] == 64 and data["nodes"] == 8
    sizes = [row["size_bytes"] for row in data["rows"]]
    assert sizes == [65536 * 2**k for k in range(8)]
    row = data["rows"][-1]
    assert set(row) >= {"size_bytes", "count", "type", "time_us", "algbw_gb_per_s", "busbw_gb_per_s",
                        "algorithm", "protocol"}
    assert row["count"] == row["size_bytes"] // 4
    assert {r["algorithm"] for r in data["rows"]} == {"ring"}
    assert {r["protocol"] for r in data["rows"]} == {"Simple"}


def test_default_gpus_is_whole_cluster(cli):
    r = cli("comm", "broadcast", "-e", "64", "--json")
    assert json.loads(r.stdout)["gpus"] == 1024


@pytest.mark.parametrize("args", [
    ["comm", "allreduce"],
    ["comm", "all_reduce", "--gpus", "2048"],
    ["comm", "all_reduce", "--algorithm", "rign"],
    ["comm", "all_gather", "--algorithm", "nvls"],
    ["comm", "all_reduce", "--step-factor", "1"],
    ["comm", "all_reduce", "-b", "1G", "-e", "1M"],
    ["comm", "all_reduce", "--cluster", "ref-1k-h10"],
])
def test_bad_input_exits_2_with_one_line(cli, args):
    r = cli(*args)
    assert r.code == 2
    assert r.stderr.strip().startswith("error:") and len(r.stderr.strip().splitlines()) == 1


def test_sweep_sizes():
    assert list(sweep_sizes(8, 64, 2)) == [8, 16, 32, 64]
    assert sweep_sizes(8, 8 * 2**30, 2).size == 31
    assert np.all(sweep_sizes(1, 16, 3) % 4 == 0)


def test_validation_case_inline_node_and_errors():
    case = {"id": "x", "kind": "collective", "node": "dgx-h100", "nodes": 2, "op": "all_reduce",
            "bytes": "1G", "algorithm": "ring", "measured": {"busbw_gb_per_s": 300}}
    out = evaluate(case)
    assert out["algorithm"] == "ring" and out["busbw_gb_per_s"] > 0
    with pytest.raises(SpecError, match="did you mean 'bytes'"):
        evaluate({**case, "byte": 8})
    with pytest.raises(SpecError, match="node"):
        evaluate({**case, "node": "dgx-h10"})
