"""Scheduler inputs that once lost data, hung, blew up memory or raised internal errors (issue 22): each
is counted and reported, or refused with a one-line message (exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clustertwin.errors import SpecError
from clustertwin.sched import cluster as C
from clustertwin.sched import engine, failures, metrics, readers, synthetic
from clustertwin.sched.jobs import make_jobs
from tests.conftest import FIXTURES

F = FIXTURES / "sched"
PAI23_HEAD = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time," \
             "scheduled_time"
HELIOS_HEAD = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"


def _pai23_rows(n: int) -> list[str]:
    return [f"pod-{i:04d},6000,12288,1,1000,,LS,Running,{i * 10},{i * 10 + 500},{i * 10}" for i in range(n)]


def _helios_rows(n: int) -> list[str]:
    return [f"j{i},u{i % 7},vc1,1,6,1,COMPLETED,{i * 5},{i * 5},{i * 5 + 60},60,0" for i in range(n)]


def _pai20_rows(n: int) -> list[str]:
    return [f"job{i},worker,1,Terminated,{i * 10},{i * 10 + 300},600.0,29.3,100.0,MISC" for i in range(n)]


@pytest.mark.parametrize(("fmt", "head", "rows"), [
    ("pai2023", PAI23_HEAD, _pai23_rows), ("helios", HELIOS_HEAD, _helios_rows), ("pai2020", None, _pai20_rows)])
def test_one_broken_quote_damages_one_row_not_the_rest(tmp_path, fmt, head, rows):
    lines = rows(400)
    lines[68] = lines[68].replace(",", ',"', 1)  # a stray quote opening a field that never closes
    p = tmp_path / "t.csv"
    p.write_text("\n".join(([head] if head else []) + lines) + "\n")
    tr = readers.read_trace(p, fmt)
    assert tr.report.jobs >= 398 and 1 <= tr.report.malformed <= 2
    assert tr.report.lines == 400 and tr.report.causes["broken quote"] == tr.report.malformed
    assert tr.report.jobs + tr.report.malformed + sum(tr.report.excluded.values()) == tr.report.lines


def test_field_over_128_kib_damages_its_row_only(tmp_path):
    lines = _helios_rows(50)
    lines[10] = lines[10].replace("vc1", "v" * 200_000, 1)
    p = tmp_path / "h.csv"
    p.write_text("\n".join([HELIOS_HEAD, *lines]) + "\n")
    tr = readers.read_trace(p, "helios")
    assert (tr.report.jobs, tr.report.malformed, dict(tr.report.causes)) == (49, 1, {"field too long": 1})


def test_cr_only_line_endings(tmp_path):
    p = tmp_path / "h.csv"
    p.write_bytes(("\r".join([HELIOS_HEAD, *_helios_rows(20)]) + "\r").encode())
    assert readers.read_trace(p, "helios").report.jobs == 20


def test_non_utf8_trace_is_a_clear_error(tmp_path):
    p = tmp_path / "h.csv"
    p.write_bytes(HELIOS_HEAD.encode() + b"\n" + b"j1,u\xff,vc,1,6,1,COMPLETED,0,0,60,60,0\n")
    with pytest.raises(SpecError, match=r"not UTF-8.*offset"):
        readers.read_trace(p, "helios")


def test_out_of_range_numbers_are_counted_not_crashes(tmp_path):
    lines = [*_helios_rows(5), "big,u,vc,9223372036854775808,6,1,COMPLETED,0,0,60,60,0"]
    p = tmp_path / "h.csv"
    p.write_text("\n".join([HELIOS_HEAD, *lines]) + "\n")
    tr = readers.read_trace(p, "helios")
    assert (tr.report.jobs, tr.report.causes["out of range"]) == (5, 1)
    sacct = (F / "sacct.txt").read_text().splitlines()
    sacct.append("1099|bob|gpu|normal|9223372036854775808|2024-03-01T10:00:00|2024-03-01T10:00:05|"
                 "2024-03-01T11:00:05|01:00:00|02:00:00|1|gres/gpu=4|COMPLETED")
    p2 = tmp_path / "s.txt"
    p2.write_text("\n".join(sacct) + "\n")
    tr2 = readers.read_trace(p2, "sacct")
    assert tr2.report.causes["out of range"] == 1


def test_pai2020_end_time_1e308_is_out_of_range(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("\n".join([*_pai20_rows(3), "x,worker,1,Terminated,0,1e308,600.0,29.3,100.0,MISC"]) + "\n")
    tr = readers.read_trace(p, "pai2020")
    assert (tr.report.jobs, tr.report.causes["out of range"]) == (3, 1)


def test_node_list_rows_with_extra_field_or_bad_numbers_are_rejected_by_cause(tmp_path):
    p = tmp_path / "nodes.csv"
    p.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                 "n0,96000,393216,8,V100M16\n"
                 "n1,7,96000,393216,8,V100M16\n"          # extra field: columns would shift
                 "n2,inf,393216,8,V100M16\n"
                 "n3,96000,393216,4294967296,V100M16\n"
                 "n4,96000,393216,4,T4\n")
    cl = C.from_node_list(p)
    assert (cl.nodes, cl.total_gpus) == (2, 12)
    assert dict(cl.skipped_rows) == {"wrong field count": 1, "bad number": 1, "out of range": 1}
    assert cl.to_dict()["skipped_rows"] == {"bad number": 1, "out of range": 1, "wrong field count": 1}


def test_swf_partial_execution_lines_are_not_jobs(tmp_path):
    # job 1 ran whole (status 1); job 2 was checkpointed: its job line (status 0) plus two partial lines
    rows = ["1 0 0 100 4 -1 -1 4 200 -1 1 11 -1 -1 1 -1 -1 -1",
            "2 10 0 300 8 -1 -1 8 400 -1 0 12 -1 -1 1 -1 -1 -1",
            "2 10 0 150 8 -1 -1 8 400 -1 2 12 -1 -1 1 -1 -1 -1",
            "2 10 0 150 8 -1 -1 8 400 -1 3 12 -1 -1 1 -1 -1 -1"]
    p = tmp_path / "t.swf"
    p.write_text("; comment\n" + "\n".join(rows) + "\n")
    tr = readers.read_trace(p, "swf")
    assert tr.jobs.ids == ("1", "2") and tr.jobs.runtime_s.tolist() == [100, 300]
    assert tr.report.excluded["partial execution (SWF status 2-4)"] == 2


def test_synthetic_caps_and_ranges():
    with pytest.raises(SpecError, match="cap"):
        synthetic.generate(synthetic.SyntheticSpec(jobs=1_000_000_000), 64)
    for bad in ({"gpu_mix": {1: float("nan")}}, {"seed": -1}, {"users": 2**64}):
        with pytest.raises(ValueError):
            synthetic.SyntheticSpec(**bad)


def test_synthetic_job_cap_is_lifted_by_max_jobs(cli, tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("jobs: 1000000000\ncluster_gpus: 64\n")
    r = cli("sched", "simulate", "--trace", str(p), "--format", "synthetic")
    assert r.code == 2 and "cap" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("sched", "simulate", "--trace", str(p), "--format", "synthetic", "--max-jobs", "200", "--json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["policies"][0]["metrics"]["submitted"] == 200


@pytest.mark.parametrize("args", [
    ["--node-mtbf-h", "nan"], ["--node-mtbf-h", "1", "--node-mttr-h", "nan"], ["--node-mtbf-h", "inf"],
    ["--placement", ","], ["--policy", ","]])
def test_simulate_flags_that_used_to_hang_or_crash(cli, args):
    r = cli("sched", "simulate", "--trace", str(F / "small.swf"), "--format", "swf", *args)
    assert r.code == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [["--placement", ","], ["--loads", "inf"], ["--loads", "nan"], ["--loads", ","]])
def test_fill_flags(cli, args):
    r = cli("sched", "fill", "--trace", str(F / "pai2023_pods.csv"), "--format", "pai2023", "--node-list",
            str(F / "pai2023_nodes.csv"), *args)
    assert r.code == 2, (r.stdout, r.stderr)


def test_failure_generator_caps_events_and_rejects_nan():
    with pytest.raises(SpecError, match="cap"):
        failures.exponential_failures(1000, 1e308, mtbf_h=1.0)
    with pytest.raises(SpecError):
        failures.exponential_failures(4, 1000.0, mtbf_h=float("nan"))


def test_requeue_cap_stops_a_runaway_run():
    jobs = make_jobs([f"j{i}" for i in range(20)], np.zeros(20), np.full(20, 5000.0), np.full(20, 8.0))
    fail = failures.exponential_failures(4, 50_000.0, mtbf_h=0.05, mttr_h=0.001, seed=1)
    with pytest.raises(SpecError, match="requeue"):
        engine.simulate(C.uniform(4, 8), jobs, "fifo", failures=fail, max_requeues=50)
    res = engine.simulate(C.uniform(4, 8), jobs, "fifo", failures=fail)
    m = metrics.compute(res)
    assert m.requeued > 50 and m.completed + m.killed + m.queued + m.running + m.unschedulable == 20


def test_unschedulable_jobs_are_counted_by_cause():
    cl = C.SchedCluster("mixed", np.array([8, 8]), np.array([0, 1]), ("T4", "V100"), np.array([0, 0]))
    jobs = make_jobs(["huge", "a100", "ok"], [0, 0, 0], [10, 10, 10], [64, 1, 1],
                     gpu_types=[frozenset(), frozenset({"A100"}), frozenset()])
    m = metrics.compute(engine.simulate(cl, jobs, "fifo"))
    assert m.unschedulable_by_cause == {"more GPUs than the cluster": 1, "no node of an allowed GPU model": 1}
    assert (m.completed, m.unschedulable) == (1, 2)


def test_philly_json_is_read_item_by_item_and_deep_nesting_is_an_error(tmp_path):
    tr = readers.read_trace(F / "philly_job_log.json", "philly")
    assert tr.report.jobs >= 1
    p = tmp_path / "deep.json"
    p.write_text("[" + "[" * 100_000 + "]" * 100_000 + "]")
    with pytest.raises(SpecError, match=r"deep|not a JSON"):
        readers.read_trace(p, "philly")
    p.write_text('{"jobid": 1}')
    with pytest.raises(SpecError, match="expected '\\['"):
        readers.read_trace(p, "philly")
