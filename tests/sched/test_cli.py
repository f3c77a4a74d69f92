"""``clustertwin sched simulate|fill``: tables, JSON contract, timeline CSV, one-line errors with exit 2."""

from __future__ import annotations

import csv
import json

from tests.conftest import EXAMPLES, FIXTURES, TRACES, need_shared

F = FIXTURES / "sched"
PAI = TRACES / "alibaba-pai-2023"
METRIC_KEYS = {"gpu_utilization", "avg_queue_s", "median_queue_s", "p99_queue_s", "avg_jct_s", "bounded_slowdown",
               "fragmented_gpus", "multi_leaf_jobs", "completed", "killed", "queued", "skipped_lines"}


def test_simulate_json_contract(cli, tmp_path):
    tl = tmp_path / "tl.csv"
    r = cli("sched", "simulate", "--trace", str(F / "small.swf"), "--format", "swf", "--cluster", "ref-1k-h100",
            "--policy", "fifo,sjf,backfill", "--placement", "first-fit,best-fit", "--jobs", "--json",
            "--timeline", str(tl))
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(p["policy"], p["placement"]) for p in doc["policies"]] == [
        (a, b) for a in ("fifo", "sjf", "backfill") for b in ("first-fit", "best-fit")]
    first = doc["policies"][0]
    assert set(first["metrics"]) >= METRIC_KEYS
    assert first["metrics"]["skipped_lines"] == 1
    assert first["metrics"]["completed"] == 4
    assert set(first["jobs"][0]) == {"id", "submit_s", "start_s", "end_s", "state", "nodes"}
    assert doc["trace"]["excluded"] == {"no runtime": 1}
    rows = list(csv.DictReader(tl.open()))
    assert rows and set(rows[0]) >= {"policy", "placement", "time_s", "allocated_gpus", "utilization"}
    assert {r["policy"] for r in rows} == {"fifo", "sjf", "backfill"}


def test_simulate_table_mentions_skipped_lines(cli):
    r = cli("sched", "simulate", "--trace", str(F / "small.swf"), "--format", "swf", "--policy", "backfill")
    assert r.code == 0, r.stderr
    assert "1 malformed lines skipped" in r.stdout and "line 11" in r.stdout
    assert "backfill" in r.stdout


def test_strict_is_fatal_with_exit_2(cli):
    r = cli("sched", "simulate", "--trace", str(F / "small.swf"), "--format", "swf", "--strict")
    assert r.code == 2
    assert r.stderr.count("\n") == 1 and "line 11" in r.stderr


def test_bad_inputs_exit_2(cli):
    for args in (["--format", "pai"], ["--format", "swf", "--policy", "lifo"],
                 ["--format", "swf", "--placement", "scatter"]):
        r = cli("sched", "simulate", "--trace", str(F / "small.swf"), *args)
        assert r.code == 2, args
        assert "Traceback" not in r.stderr and r.stderr.startswith("error:")
    r = cli("sched", "simulate", "--trace", str(F / "missing.csv"), "--format", "helios")
    assert r.code == 2 and "not found" in r.stderr
    r = cli("sched", "simulate", "--trace", str(F / "pai2023_pods.csv"), "--format", "pai2023", "--node-list",
            str(F / "pai2023_nodes.csv"), "--nodes-per-leaf", "0")
    assert r.code == 2 and "nodes_per_leaf" in r.stderr
    r = cli("sched", "fill", "--trace", str(F / "pai2023_pods.csv"), "--format", "pai2023", "--loads", "x")
    assert r.code == 2 and "--loads" in r.stderr


def test_node_list_pai_fixture_with_failures(cli):
    r = cli("sched", "simulate", "--trace", str(F / "pai2023_pods.csv"), "--format", "pai2023", "--node-list",
            str(F / "pai2023_nodes.csv"), "--policy", "backfill,priority-preempt", "--placement", "fgd",
            "--node-mtbf-h", "0.05", "--node-mttr-h", "0.01", "--seed", "2", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["cluster"]["gpus"] == 22 and doc["failures"]["events"] > 0
    for p in doc["policies"]:
        m = p["metrics"]
        assert m["completed"] + m["killed"] + m["queued"] + m["running"] + m["unschedulable"] == m["submitted"] == 5


def test_synthetic_example(cli):
    r = cli("sched", "simulate", "--trace", str(EXAMPLES / "traces" / "synthetic-small.yaml"), "--format",
            "synthetic", "--cluster", str(EXAMPLES / "traces" / "small-cluster.yaml"), "--max-jobs", "300",
            "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["policies"][0]["metrics"]["completed"] == 300
    assert doc["trace"]["excluded"] == {"beyond --max-jobs": 1700}


def test_fill_on_real_pai_node_list(cli):
    pods = need_shared(PAI / "openb_pod_list_default.csv")
    nodes = need_shared(PAI / "openb_node_list_gpu_node.csv")
    r = cli("sched", "fill", "--trace", str(pods), "--format", "pai2023", "--node-list", str(nodes),
            "--placement", "first-fit,best-fit", "--loads", "0.5,1.0", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    pts = doc["placements"][0]["points"]
    assert [p["load"] for p in pts] == [0.5, 1.0]
    assert pts[0]["unallocated_gpus"] > pts[1]["unallocated_gpus"] > 0


def test_federate_json_contract(cli):
    r = cli("sched", "federate", "--member", str(EXAMPLES / "traces" / "small-cluster.yaml") + ":backfill",
            "--member", "a100-512-1gbe:multifactor", "--trace", str(EXAMPLES / "traces" / "synthetic-small.yaml"),
            "--format", "synthetic", "--federation", "first-start,round-robin", "--max-jobs", "300", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["federation"] for x in doc["results"]] == ["first-start", "round-robin"]
    for x in doc["results"]:
        assert sum(m["jobs_run"] for m in x["members"]) == x["global"]["completed"] == 300
    bad = cli("sched", "federate", "--member", "a100-512-1gbe:nope", "--trace",
              str(EXAMPLES / "traces" / "synthetic-small.yaml"), "--format", "synthetic")
    assert bad.code == 2 and "nope" in bad.stderr
