"""Slurm accounting (``sacct -P``) as a trace: columns, job steps, states, time limits, malformed lines.

The fixture ``sacct_parsable2.txt`` follows sacct's ``--parsable2`` output for
``--format=JobID,User,Partition,Submit,Start,End,Timelimit,State,NNodes,AllocTRES,Priority`` (job steps
included, as sacct prints them without ``-X``), with one line of each malformation the reader must count.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustertwin.errors import SpecError
from clustertwin.sched import cluster as C
from clustertwin.sched import engine, readers

F = Path(__file__).resolve().parents[1] / "fixtures" / "sched" / "sacct_parsable2.txt"


def test_jobs_layout_limits_and_priorities():
    tr = readers.read_trace(F, "sacct")
    j = tr.jobs
    assert j.ids == ("2001", "2002", "2003", "2004", "2006", "2007", "2011")
    assert j.submit_s.tolist() == [0, 300, 360, 420, 540, 600, 840]  # rebased to the first submit
    assert j.runtime_s.tolist() == [5400, 86400, 840, 900, 6630, 1790, 50]  # End - Start
    # 02:00:00, 1-00:00:00, 30:00, UNLIMITED (runtime), 2-00 (days-hours), Partition_Limit, 1-06:30
    assert j.limit_s.tolist() == [7200, 86400, 1800, 900, 172800, 1790, 109800]
    # gres/gpu=32 (and its typed twin gres/gpu:h100=32) over 4 nodes: 4 units of 8
    assert (j.gpus_per_unit.tolist(), j.units.tolist()) == ([1, 8, 2, 8, 8, 4, 2], [0, 4, 0, 0, 2, 0, 0])
    assert j.priority.tolist() == [4294, 9000, 4000, 4000, 5000, 100, 4100]
    assert j.users == ("alice", "bob", "carol", "dave", "erin", "grace")


def test_every_line_is_a_job_excluded_or_counted_malformed():
    rep = readers.read_trace(F, "sacct").report
    assert rep.lines == 20 == rep.jobs + rep.malformed + sum(rep.excluded.values())
    assert dict(rep.excluded) == {"job step": 4, "never started": 2, "still running": 1, "cpu-only": 1}
    assert dict(rep.causes) == {"bad number": 2, "unknown state": 1, "times out of order": 1,
                                "wrong field count": 1}
    assert [e.split(":")[0] for e in rep.malformed_examples] == [f"line {n}" for n in (17, 18, 19, 20, 21)]
    # "CANCELLED by 1002" is CANCELLED; every state of a job that ran is replayed and counted
    assert dict(rep.states) == {"COMPLETED": 1, "TIMEOUT": 1, "FAILED": 1, "CANCELLED": 1, "NODE_FAIL": 1,
                                "PREEMPTED": 1, "OUT_OF_MEMORY": 1}
    assert rep.to_dict()["states"]["TIMEOUT"] == 1


def test_strict_stops_at_the_first_malformed_line():
    with pytest.raises(SpecError, match="line 17: Submit '2024-03-01 08:15:00' is not a time"):
        readers.read_trace(F, "sacct", strict=True)


@pytest.mark.parametrize(("text", "seconds"), [
    ("45", 45 * 60), ("05:30", 330), ("02:00:00", 7200), ("1-00:00:00", 86400), ("2-12", 216000),
    ("1-06:30", 109800), ("3-01:02:03", 3 * 86400 + 3723), ("UNLIMITED", None), ("Partition_Limit", None)])
def test_slurm_time_formats(text, seconds):
    assert readers.parse_slurm_duration(text) == seconds


@pytest.mark.parametrize("text", ["ten", "1:2:3:4", "-5", "1-", "1.5"])
def test_bad_time_limits_are_refused(text):
    with pytest.raises(ValueError, match="not a Slurm duration"):
        readers.parse_slurm_duration(text)


def test_missing_columns_name_the_format_to_export(tmp_path):
    p = tmp_path / "s.txt"
    p.write_text("JobID|Submit|Start|End|AllocTRES\n1|2024-03-01T00:00:00|2024-03-01T00:00:00|"
                 "2024-03-01T00:01:00|gres/gpu=1\n")
    with pytest.raises(SpecError, match=r"lacks columns \['Timelimit', 'State'\].*--format=JobID,User"):
        readers.read_trace(p, "sacct")


def test_node_count_from_alloc_tres_when_nnodes_is_absent(tmp_path):
    p = tmp_path / "s.txt"
    p.write_text("JobID|Submit|Start|End|Timelimit|State|AllocTRES\n"
                 "7|2024-03-01T00:00:00|2024-03-01T00:00:00|2024-03-01T01:00:00|01:00:00|COMPLETED|"
                 "cpu=64,gres/gpu=16,node=2\n")
    j = readers.read_trace(p, "sacct").jobs
    assert (j.gpus_per_unit.tolist(), j.units.tolist()) == ([8], [2])


def test_replays_through_the_engine_and_the_cli(cli):
    tr = readers.read_trace(F, "sacct")
    res = engine.simulate(C.uniform(4, 8), tr.jobs, "backfill")
    assert (res.state == engine.COMPLETED).sum() + (res.state == engine.KILLED).sum() == len(tr.jobs)
    r = cli("sched", "simulate", "--trace", str(F), "--format", "sacct", "--policy", "backfill", "--json")
    assert r.code == 0, r.stderr
    rep = json.loads(r.stdout)["trace"]
    assert (rep["jobs"], rep["skipped_lines"], rep["states"]["NODE_FAIL"]) == (7, 5, 1)
