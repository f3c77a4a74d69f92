"""diagnose's CUDA OOM advice from the training memory model: the job layout's predicted memory next to the
log's figures, suggestions that the model says fit (re-checked with train.estimate), ranking by step time,
the generic advice without the job flags, and bad --layout input (exit 2, one line)."""

from __future__ import annotations

import json

import pytest

from clustertwin.cli.common import load_cluster, load_model
from clustertwin.errors import SpecError
from clustertwin.ops.diagnosis.diagnose import diagnose
from clustertwin.ops.diagnosis.oom_advice import JobContext, OomFinding, parse_layout
from clustertwin.specs.loading import build
from clustertwin.specs.parallelism import ParallelismSpec
from clustertwin.train import estimate
from tests.conftest import FIXTURES

OPS = FIXTURES / "ops"
JOB_LOG = OPS / "oom-job" / "llama3-70b-rank0.log"
JOB_FLAGS = ("--model", "llama3-70b", "--cluster", "ref-1k-h100", "--global-batch", "1024",
             "--layout", "tp=1,pp=1,micro_batch=1,recompute=none,zero=1")


@pytest.fixture(scope="module")
def job70b() -> JobContext:
    return JobContext.build(load_model("llama3-70b"), load_cluster("ref-1k-h100"),
                            "tp=1,pp=1,micro_batch=1,recompute=none,zero=1", 1024)


def test_parse_layout():
    got = parse_layout(" tp=8, pp=4,dp=32,mbs=2,recompute=selective,zero=1,sp=off,precision=fp8 ")
    assert got == {"tp": 8, "pp": 4, "dp": 32, "micro_batch": 2, "recompute": "selective", "zero": 1,
                   "sequence_parallel": False, "precision": "fp8"}
    for bad in ["", "tp8", "tp=eight", "tp=0", "zero=4", "recompute=some", "foo=1", "tp=1,tp=2", "sp=maybe", "pp="]:
        with pytest.raises(SpecError):
            parse_layout(bad)


def test_job_context_completes_the_layout(job70b):
    p = job70b.parallelism
    assert (p.tp, p.pp, p.dp, p.cp, p.micro_batch, p.zero, p.sequence_parallel) == (1, 1, 1024, 1, 1, 1, False)
    tp8 = JobContext.build(load_model("llama3-70b"), load_cluster("ref-1k-h100"), "tp=8,pp=4", 1024)
    assert tp8.parallelism.dp == 32 and tp8.parallelism.sequence_parallel is True


def test_oom_suggestions_fit_per_the_training_model(job70b):
    f = diagnose([JOB_LOG], job70b).findings[0]
    assert isinstance(f, OomFinding) and f.code == "CUDA_OOM" and f.advice is not None
    cur = f.advice.current
    assert not cur.fits and cur.memory_gib_per_gpu > cur.memory.capacity_gib
    # predicted memory and largest term next to the log's figures
    assert f"{cur.memory_gib_per_gpu:.1f} GiB per GPU predicted" in f.action
    assert f"largest term {cur.memory.largest_term}" in f.action
    assert "tried to allocate 2.0 GiB, 1.1 GiB free of 79.2 GiB" in f.action
    sugg = f.advice.suggestions
    assert sugg, f.action
    steps = [s.estimate.step_time_s for s in sugg]
    assert steps == sorted(steps)
    assert len({tuple(s.estimate.layout.values()) for s in sugg}) == len(sugg)
    for s in sugg:
        assert s.changes and all(s.estimate.layout[k] == new for k, (_, new) in s.changes.items())
        lay = s.estimate.layout
        spec = build(ParallelismSpec, {**lay, "global_batch": 1024,
                                       "schedule": "interleaved" if lay["vpp"] > 1 else "1f1b"})
        again = estimate(job70b.model, job70b.cluster, spec)
        assert again.fits and again.gpus == 1024, (lay, again.memory.reason)
        assert again.step_time_s == pytest.approx(s.estimate.step_time_s)
        assert s.describe() in f.action


def test_layout_that_fits_points_outside_the_model():
    job = JobContext.build(load_model("llama3-8b"), load_cluster("ref-1k-h100"),
                           "tp=2,pp=1,micro_batch=1,recompute=selective,zero=1", 1024)
    f = diagnose([OPS / "logs" / "oom-rank0.log"], job).findings[0]
    assert isinstance(f, OomFinding) and f.advice is not None and f.advice.current.fits
    assert f.advice.suggestions == () and "fits" in f.action and "expandable_segments" in f.action


def test_generic_advice_names_the_flags():
    f = diagnose([OPS / "logs" / "oom-old-torch.log"]).findings[0]
    assert f.code == "CUDA_OOM" and "recompute" in f.action
    assert all(flag in f.action for flag in ("--model", "--cluster", "--layout", "--global-batch"))
    d = f.to_dict()
    assert d["suggestions"] == [] and "memory_model" not in d
    assert d["oom"]["requested_bytes"] == pytest.approx(1.5 * 2**30)


def test_cli_json_suggestions(cli):
    res = cli("diagnose", str(JOB_LOG), *JOB_FLAGS, "--json")
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert set(data) == {"findings", "files_read", "lines_read", "files_skipped"}
    (oom,) = data["findings"]
    assert {"severity", "code", "title", "evidence", "action", "suggestions", "memory_model"} <= set(oom)
    assert oom["memory_model"]["fits"] is False and oom["memory_model"]["gpus"] == 1024
    assert oom["suggestions"] and all(s["fits"] and s["memory_gib_per_gpu"] <= s["capacity_gib"]
                                      for s in oom["suggestions"])
    text = cli("diagnose", str(JOB_LOG), *JOB_FLAGS)
    assert text.code == 0 and "CUDA_OOM" in text.stdout


@pytest.mark.parametrize("layout", ["tp=eight", "tp8", "foo=1", "zero=5", "tp=1,tp=2", "", "tp=8,pp=4,dp=64",
                                    "tp=1,pp=1,dp=1024,micro_batch=3"])
def test_cli_bad_layout_exits_2(cli, layout):
    flags = [*JOB_FLAGS[:-1], layout]
    res = cli("diagnose", str(JOB_LOG), *flags)
    assert res.code == 2 and "--layout" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_cli_partial_job_flags_exit_2(cli):
    res = cli("diagnose", str(JOB_LOG), "--layout", "tp=8")
    assert res.code == 2 and "--model" in res.stderr and len(res.stderr.strip().splitlines()) == 1
