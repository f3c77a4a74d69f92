"""``sched simulate --workload MIX.yaml --network contention --placement ...``: the interface as the issue
writes it, the JSON record per policy x placement, one-line errors."""

from __future__ import annotations

import json

from tests.conftest import EXAMPLES

MIX = EXAMPLES / "workloads" / "llm-mix.yaml"
FAT_TREE = EXAMPLES / "clusters" / "ref-1k-h100-fat-tree-4to1.yaml"
RECORD_KEYS = {"policy", "placement", "utilization", "goodput_gpu_hours", "interference_gpu_hours", "slowdown_p95",
               "queue_mean_s"}


def test_workload_contention_placements_json(cli):
    r = cli("sched", "simulate", "--workload", str(MIX), "--network", "contention", "--placement",
            "topology,random", "--policy", "backfill", "--cluster", str(FAT_TREE), "--max-jobs", "120",
            "--failures-from-reliability", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    recs = doc["policies"]
    assert [(x["policy"], x["placement"]) for x in recs] == [("backfill", "topology"), ("backfill", "random")]
    for x in recs:
        assert set(x) >= RECORD_KEYS
        assert 0 < x["utilization"] <= 1 and x["goodput_gpu_hours"] > 0 and x["slowdown_p95"] >= 1
    assert doc["workload"]["jobs"] == 120 and doc["fabric"]["oversubscription"] == 4.0
    assert doc["failures"]["events"] >= 0


def test_workload_table(cli):
    r = cli("sched", "simulate", "--workload", str(MIX), "--network", "contention", "--placement",
            "first-fit,leaf-packed", "-p", "backfill", "--cluster", str(FAT_TREE), "--max-jobs", "60")
    assert r.code == 0, r.stderr
    assert "the cluster as a whole" in r.stdout and "leaf-packed" in r.stdout


def test_errors_are_one_line(cli, tmp_path):
    r = cli("sched", "simulate", "--workload", str(MIX), "--network", "congested")
    assert r.code == 2 and "--network must be one of ideal, contention" in r.stderr
    r = cli("sched", "simulate", "--trace", str(MIX), "--format", "swf", "--network", "contention")
    assert r.code == 2 and "needs --workload" in r.stderr
    r = cli("sched", "simulate", "--policy", "backfill")
    assert r.code == 2 and "--trace and --format, or --workload" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs: 5\narrival: {mean_interarrival_s: 5}\nclasses:\n"
                   "  - {name: a, model: llama3-8bb, gpus: 8, global_batch: 8, share: 1, duration: {steps: 5}}\n")
    r = cli("sched", "simulate", "--workload", str(bad))
    assert r.code == 2 and "llama3-8bb" in r.stderr and "Traceback" not in r.stderr
