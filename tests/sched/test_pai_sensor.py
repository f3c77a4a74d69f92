"""PAI 2020 sensor table: each task's own GPU utilisation joins the task table, so work utilisation is
allocation x the job's measured utilisation (issue: utilisation that means work)."""

from __future__ import annotations

import json
import math

import pytest

from clustertwin.errors import SpecError
from clustertwin.sched import readers
from clustertwin.sched.pai_sensor import read_sensor_util, task_fraction
from tests.conftest import run_cli

# rows in the published column order (alibaba/clusterdata cluster-trace-gpu-v2020)
TASKS = """job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type
ja,worker,2,Terminated,0,3600,600,29.3,100,MISC
jb,worker,1,Terminated,60,1860,600,29.3,50,MISC
jc,tensorflow,1,Terminated,120,7320,600,29.3,800,MISC
jd,worker,1,Terminated,180,600,600,29.3,100,MISC
"""
S = "/dev/nvidia0,120.5,{u},1.2,1.5,0.8,1.1,1000,2000,10,20"
SENSOR = "\n".join([
    "ja,worker,w1,i1,m1," + S.format(u="40"),
    "ja,worker,w2,i2,m2," + S.format(u="60"),      # task ja: mean 50% of a 100% plan -> 0.5
    "jb,worker,w3,i3,m3," + S.format(u="75"),      # 75% on a half-GPU plan: more than its plan -> 1.0
    "jc,tensorflow,w4,i4,m4," + S.format(u="200"),  # 2 of 8 GPUs busy -> 0.25
    "jd,worker,w5,i5,m5," + S.format(u=""),        # no GPU sample: excluded, jd stays unmeasured
    "broken,row",
]) + "\n"


@pytest.fixture
def files(tmp_path):
    t, s = tmp_path / "pai_task_table.csv", tmp_path / "pai_sensor_table.csv"
    t.write_text(TASKS)
    s.write_text(SENSOR)
    return t, s


def test_tasks_get_their_measured_fraction_of_the_allocation(files):
    t, s = files
    tr = readers.read_trace(t, "pai2020", sensor=s)
    util = dict(zip(tr.jobs.ids, tr.jobs.gpu_util, strict=True))
    assert util["ja/worker"] == pytest.approx(0.5)
    assert util["jb/worker"] == 1.0
    assert util["jc/tensorflow"] == pytest.approx(0.25)
    assert math.isnan(util["jd/worker"])
    u = tr.report.utilisation
    assert (u["lines"], u["tasks_measured"], u["jobs_with_util"], u["skipped_lines"]) == (6, 3, 3, 1)
    assert u["excluded"] == {"worker without gpu_wrk_util": 1}
    assert readers.read_trace(t, "pai2020").report.utilisation is None


def test_bad_sensor_input_is_counted_or_refused(files):
    t, s = files
    with pytest.raises(SpecError, match="line 6"):
        read_sensor_util(s, strict=True)
    with pytest.raises(SpecError, match="does not apply to format 'swf'"):
        readers.read_trace(t, "swf", sensor=s)
    assert math.isnan(task_fraction(None, 100.0)) and task_fraction(30.0, 100.0) == pytest.approx(0.3)


def test_cli_reports_the_join_and_work_utilisation_falls_below_allocation(files):
    t, s = files
    r = run_cli("sched", "simulate", "--trace", str(t), "--format", "pai2020", "--sensor", str(s),
                "--policy", "backfill")
    assert r.code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "3 tasks measured, 3 of 4 jobs joined, 1 malformed rows skipped" in text

    doc = json.loads(run_cli("sched", "simulate", "--trace", str(t), "--format", "pai2020", "--sensor", str(s),
                             "--policy", "backfill", "--json").stdout)
    m = doc["policies"][0]["metrics"]
    assert m["work_utilization"] < m["gpu_utilization"]
