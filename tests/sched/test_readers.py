"""Trace readers on small fixtures written in each format's real schema, and on the real PAI 2023 trace."""

from __future__ import annotations

import pytest

from clustertwin.errors import SpecError
from clustertwin.sched import cluster as C
from clustertwin.sched import readers
from tests.conftest import FIXTURES, TRACES, need_shared

F = FIXTURES / "sched"
PAI = TRACES / "alibaba-pai-2023"


def test_swf():
    tr = readers.read_trace(F / "small.swf", "swf")
    j = tr.jobs
    assert j.ids == ("1", "2", "3", "4")
    assert j.gpus_per_unit.tolist() == [4, 8, 2, 16]
    assert j.limit_s.tolist() == [200, 60, 40, 600]
    assert (tr.report.malformed, dict(tr.report.excluded)) == (1, {"no runtime": 1})
    assert "expected 18 fields" in tr.report.malformed_examples[0]


def test_strict_makes_malformed_lines_fatal():
    with pytest.raises(SpecError, match="line 11"):
        readers.read_trace(F / "small.swf", "swf", strict=True)


def test_pai2023_fixture():
    tr = readers.read_trace(F / "pai2023_pods.csv", "pai2023")
    j = tr.jobs
    assert j.gpus_per_unit.tolist() == [1.0, 0.46, 2.0, 0.5, 8.0]
    assert j.runtime_s.tolist() == [1000, 490, 295, 60, 890]  # deletion - scheduled
    assert j.gpu_types[2] == frozenset({"V100M16", "V100M32"})
    assert j.priority.tolist() == [3, 3, 0, 0, 1]  # LS, LS, BE, BE, Burstable
    assert j.cpu_milli.tolist() == [12000, 6000, 12000, 6000, 88000]
    assert dict(tr.report.excluded) == {"cpu-only": 1, "never scheduled": 1}
    assert tr.report.malformed == 1


def test_pai2020_task_table():
    tr = readers.read_trace(F / "pai2020_task.csv", "pai2020")
    j = tr.jobs
    assert j.gpus_per_unit.tolist() == [0.5, 1.0, 8.0]
    assert j.units.tolist() == [0, 2, 0]
    assert j.gpu_types[1] == frozenset({"V100"}) and j.gpu_types[0] == frozenset()
    assert tr.report.malformed == 2


def test_helios():
    tr = readers.read_trace(F / "helios_cluster_log.csv", "helios")
    j = tr.jobs
    assert j.submit_s.tolist() == [0, 54, 174]
    assert (j.gpus_per_unit.tolist(), j.units.tolist()) == ([1, 8, 8], [0, 2, 0])
    assert tr.report.malformed == 1 and tr.report.excluded["cpu-only"] == 1


def test_sacct():
    tr = readers.read_trace(F / "sacct.txt", "sacct")
    j = tr.jobs
    assert j.ids == ("1001", "1002", "1005")  # step 1001.batch skipped and counted
    assert j.limit_s.tolist() == [7200, 86400, 600]  # UNLIMITED -> runtime
    assert (j.gpus_per_unit.tolist(), j.units.tolist()) == ([4, 8, 8], [0, 4, 0])
    assert dict(tr.report.excluded) == {"cpu-only": 1, "never started": 1, "job step": 1}
    assert tr.report.malformed == 1
    assert dict(tr.report.states) == {"COMPLETED": 1, "TIMEOUT": 1, "CANCELLED": 1}


def test_slurm_durations():
    assert readers.parse_slurm_duration("1-02:03:04") == 93784
    assert readers.parse_slurm_duration("30:00") == 1800
    assert readers.parse_slurm_duration("UNLIMITED") is None


def test_philly():
    tr = readers.read_trace(F / "philly_job_log.json", "philly")
    j = tr.jobs
    assert j.runtime_s.tolist() == [1800, 600 + 3600]
    assert (j.gpus_per_unit.tolist(), j.units.tolist()) == ([2, 8], [0, 2])
    assert tr.report.malformed == 1 and tr.report.excluded["no finished attempt"] == 1


def test_unknown_format_and_missing_file():
    with pytest.raises(SpecError, match="did you mean 'helios'"):
        readers.read_trace(F / "small.swf", "helio")
    with pytest.raises(SpecError, match="not found"):
        readers.read_trace(F / "nope.csv", "pai2023")


def test_node_list_fixture():
    cl = C.from_node_list(F / "pai2023_nodes.csv", nodes_per_leaf=2)
    assert cl.gpus.tolist() == [2, 8, 8, 4]  # the CPU-only node is dropped
    assert cl.leaf.tolist() == [0, 0, 1, 1]
    assert cl.to_dict()["gpus_by_model"] == {"G2": 8, "P100": 2, "T4": 4, "V100M16": 8}
    assert cl.cpu_milli.tolist() == [64000, 96000, 96000, 64000]


def test_real_pai2023_trace_counts():
    pods = need_shared(PAI / "openb_pod_list_default.csv")
    tr = readers.read_trace(pods, "pai2023", strict=True)
    # published: 8,152 pods, num_gpu 0 for 1,088; 3,078 GPU-sharing pods
    assert tr.report.lines == 8152
    assert tr.report.excluded["cpu-only"] == 1088
    assert len(tr.jobs) + tr.report.excluded["never scheduled"] == 8152 - 1088
    assert tr.report.malformed == 0
    nodes = C.from_node_list(need_shared(PAI / "openb_node_list_gpu_node.csv"))
    assert (nodes.nodes, nodes.total_gpus) == (1213, 6212)


_SWF_MIXED = """; a well-formed file with every kind of exceptional line
1 0 5 100 8 -1 -1 8 200 -1 1 1 -1 -1 1 -1 -1 -1
2 10 5 nan 8 -1 -1 8 200 -1 1 2 -1 -1 1 -1 -1 -1
3 20 5 100 8 -1 -1 8 200 -1 2 2 -1 -1 1 -1 -1 -1
4 -5 5 100 8 -1 -1 8 200 -1 1 2 -1 -1 1 -1 -1 -1
5 30 5 -1 8 -1 -1 8 200 -1 1 2 -1 -1 1 -1 -1 -1
6 40 5 100 0 -1 -1 0 200 -1 1 3 -1 -1 1 -1 -1 -1
7 60 5 100 8 -1 -1 -1 -1 -1 1 3 -1 -1 -3.7 -1 -1 -1
8 60 5 1e99 8 -1 -1 8 -1 -1 1 3 -1 -1 2 -1 -1 -1
9 0 5 100 8 -1 -1 99999999 200 -1 1 1 -1 -1 1 -1 -1 -1
10 0 5 100 4 -1 -1 16 300 -1 1 1 -1 -1 7 -1 -1 -1
"""


def test_swf_bulk_path_matches_the_per_line_path(tmp_path):
    """The vectorised reader (all lines 18 numbers) and the per-line one (forced by one short line at the
    end) give the same jobs, in the same order, and the same report but for that line."""
    bulk, per_line = tmp_path / "bulk.swf", tmp_path / "per_line.swf"
    bulk.write_text(_SWF_MIXED)
    per_line.write_text(_SWF_MIXED + "11 0 5 100 8 -1 -1 8\n")
    a, b = readers.read_swf(bulk), readers.read_swf(per_line)
    assert a.jobs.ids == b.jobs.ids == ("1", "10", "7")  # sorted by submit time, file order on ties
    for f in ("submit_s", "runtime_s", "limit_s", "gpus_per_unit", "user", "priority"):
        assert getattr(a.jobs, f).tolist() == getattr(b.jobs, f).tolist(), f
    assert a.jobs.priority.tolist() == [1, 7, 0] and a.jobs.limit_s.tolist() == [200.0, 300.0, 100.0]
    assert a.jobs.gpus_per_unit.tolist() == [8.0, 16.0, 8.0]  # requested (field 8), else allocated (field 5)
    assert a.report.excluded == b.report.excluded and sum(a.report.excluded.values()) == 3
    assert a.report.malformed == 4 and b.report.malformed == 5
    assert a.report.malformed_examples == b.report.malformed_examples[:4]
    assert a.report.malformed_examples[0] == "line 3: field 4 'nan' is not finite"
    with pytest.raises(SpecError, match="line 3: field 4"):
        readers.read_swf(bulk, strict=True)
