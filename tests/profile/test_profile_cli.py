"""``clustertwin profile``: tables and JSON from the command line, the keys the issue names, help listing."""

from __future__ import annotations

import json

from tests.conftest import FIXTURES, run_cli

GLOO = FIXTURES / "profile" / "gloo_tp2dp2" / "extra_dp"
A100 = FIXTURES / "profile" / "hta" / "a100x2_nccl_rank0.json.gz"
KEYS = {"wall_s", "gpu_busy_s", "compute_s", "compute_by_class_s", "comm_s", "exposed_comm_s", "idle_s",
        "comm_by_kind_s", "exposed_comm_by_kind_s", "memcpy_s", "host_bound_s", "data_wait_s", "rank_wait_s",
        "partial", "breakdown", "collectives"}


def test_json_carries_every_term_per_rank_and_step():
    r = run_cli("profile", str(GLOO), "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["files"] == 4 and len(d["skew"]) == 3
    for rank in d["ranks"]:
        for s in rank["steps"]:
            assert set(s) >= KEYS
            assert set(s["breakdown"]) >= {"compute", "optimizer", "tp_comm", "dp_comm", "host_overhead",
                                           "data_stall", "stragglers"}


def test_tables_name_groups_counts_and_hta():
    r = run_cli("profile", str(GLOO))
    assert r.code == 0, r.stderr
    assert "2/2/2" in r.stdout and "8/8/8" in r.stdout and "17052928" in r.stdout
    assert "4 file(s)" in r.stdout and "CPU-only" in r.stdout
    r = run_cli("profile", str(A100))
    assert "HTA temporal breakdown compute 17.26%" in r.stdout and "comm-comp overlap 14.31%" in r.stdout


def test_step_range_picks_named_ranges():
    r = run_cli("profile", str(GLOO / "rank0.json.gz"), "--step-range", "Optimizer.step", "--json")
    assert r.code == 0, r.stderr
    steps = json.loads(r.stdout)["ranks"][0]["steps"]
    assert len(steps) == 3 and all(s["name"].startswith("Optimizer.step") for s in steps)
    assert all(s["compute_by_class_s"]["optimizer"] > 0 for s in steps)


def test_listed_in_help():
    r = run_cli("--help")
    assert "profile" in r.stdout
