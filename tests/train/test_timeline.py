"""The predicted step as a Chrome trace: every rank's events span the predicted step, the slowest stage's
events add up to the model's terms, the schedule is 1F1B / interleaved, streams never overlap themselves."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise

import pytest

from clustertwin import catalog, specs
from clustertwin.train import estimate
from clustertwin.train.timeline import STREAMS, schedule_order, step_timeline
from tests.conftest import run_cli

PIPE_TERMS = ("compute", "host_overhead", "tp_comm", "cp_comm", "ep_comm", "pp_comm")


@pytest.fixture(scope="module")
def h100():
    return catalog.get("cluster", "ref-1k-h100")


@pytest.fixture(scope="module")
def l70():
    return catalog.get("model", "llama3-70b")


def par(**kw) -> specs.ParallelismSpec:
    base = dict(tp=8, pp=4, dp=16, micro_batch=1, global_batch=256, sequence_parallel=True, zero=1,
                recompute="selective")
    base.update(kw)
    return specs.ParallelismSpec(**base)


def _by_rank(trace):
    out = defaultdict(list)
    for ev in trace["traceEvents"]:
        if ev["ph"] == "X":
            out[ev["pid"]].append(ev)
    return out


def _work(evs):
    return [e for e in evs if e["tid"] != STREAMS["step"]]


@pytest.mark.parametrize("kw", [{}, {"vpp": 5}, {"pp": 8, "dp": 8, "vpp": 2}, {"pp": 1, "dp": 64, "tp": 8},
                                {"first_stage_layers": 26, "pp": 4}])
def test_every_rank_spans_the_predicted_step(h100, l70, kw):
    e = estimate(l70, h100, par(**kw))
    trace = step_timeline(e, l70.layers)
    ranks = _by_rank(trace)
    pp, stride = e.layout["pp"], e.layout["tp"] * e.layout["cp"] * e.layout["dp"]
    assert sorted(ranks) == sorted({0, (1 if pp > 2 else 0) * stride, (pp - 1) * stride})
    for evs in ranks.values():
        work = _work(evs)
        start = min(ev["ts"] for ev in work)
        end = max(ev["ts"] + ev["dur"] for ev in work)
        assert end / 1e6 == pytest.approx(e.step_time_s, rel=1e-3)
        assert start >= 0
        step = [ev for ev in evs if ev["name"] == "step"]
        assert len(step) == 1 and step[0]["dur"] / 1e6 == pytest.approx(e.step_time_s, rel=1e-3)


@pytest.mark.parametrize("kw", [{}, {"vpp": 5}, {"pp": 8, "dp": 8, "vpp": 2}])
def test_the_slowest_stage_adds_up_to_the_model_terms(h100, l70, kw):
    e = estimate(l70, h100, par(**kw))
    trace = step_timeline(e, l70.layers)
    bd = e.breakdown
    pipe_events = {r: [ev for ev in _work(evs) if "mb" in ev["name"]] for r, evs in _by_rank(trace).items()}
    busy = {r: sum(ev["dur"] for ev in evs) / 1e6 for r, evs in pipe_events.items()}
    slowest = max(busy, key=busy.get)
    od = trace["otherData"]
    scale = od["schedule_scale"]  # 1 unless the schedule outruns the closed form (then within 0.1%)
    assert scale == pytest.approx(1.0, rel=1e-3)
    assert busy[slowest] == pytest.approx(scale * sum(bd[t] for t in PIPE_TERMS), rel=1e-6)
    tp = sum(ev["dur"] for ev in pipe_events[slowest] if ev["tid"] == STREAMS["tp comm"]) / 1e6
    assert tp == pytest.approx(scale * bd["tp_comm"], rel=1e-6)
    # the pipeline window minus the slowest stage's work is the bubble (the closed form holds here:
    # the last stage is the slowest)
    assert od["schedule_pipe_s"] == pytest.approx(od["model_pipe_s"], rel=1e-3)
    assert od["model_pipe_s"] - busy[slowest] == pytest.approx(bd["bubble"], rel=1e-2, abs=1e-9)
    dp = sum(ev["dur"] for ev in _work(_by_rank(trace)[slowest]) if ev["tid"] == STREAMS["dp comm"]) / 1e6
    assert dp == pytest.approx(bd["dp_comm"] + bd["zero3_gather"], rel=1e-9)


def test_streams_never_overlap_themselves(h100, l70):
    trace = step_timeline(estimate(l70, h100, par(vpp=5)), l70.layers)
    lanes = defaultdict(list)
    for ev in _work([ev for ev in trace["traceEvents"] if ev["ph"] == "X"]):
        lanes[(ev["pid"], ev["tid"])].append((ev["ts"], ev["ts"] + ev["dur"]))
    for spans in lanes.values():
        spans.sort()
        for (_, a_end), (b_start, _) in pairwise(spans):
            assert b_start >= a_end - 1e-6


def test_a_slow_first_stage_leaves_the_closed_forms_margin_idle(h100, l70):
    """With the first stage slowest, warm-up forwards hide part of the round trip that the closed form
    charges: the schedule ends earlier and the rest of the window is idle, never overrun."""
    e = estimate(l70, h100, par(first_stage_layers=26))
    od = step_timeline(e, l70.layers)["otherData"]
    assert od["schedule_scale"] == 1.0
    assert od["schedule_pipe_s"] < od["model_pipe_s"]


def test_1f1b_and_interleaved_orders():
    order = schedule_order(0, 4, 1, 8)
    assert [o.kind for o in order[:5]] == ["F", "F", "F", "F", "B"]  # 3 warm-up forwards, then 1F1B
    assert [o.kind for o in schedule_order(3, 4, 1, 8)[:3]] == ["F", "B", "F"]
    inter = schedule_order(0, 2, 2, 4)
    assert [(o.kind, o.chunk, o.microbatch) for o in inter[:4]] == [("F", 0, 0), ("F", 0, 1), ("F", 1, 0),
                                                                   ("F", 1, 1)]
    for s in range(4):
        ops = schedule_order(s, 4, 2, 8)
        assert sorted((o.kind, o.chunk, o.microbatch) for o in ops) == sorted(
            (k, c, mb) for k in "FB" for c in range(2) for mb in range(8))


def test_interleaved_runs_every_chunk_of_every_microbatch(h100, l70):
    e = estimate(l70, h100, par(vpp=5))
    m = round(e.schedule["microbatches"])
    evs = _by_rank(step_timeline(e, l70.layers))[0]
    fwd = [ev for ev in evs if ev["tid"] == STREAMS["compute"] and ev["name"].startswith("F ")]
    assert len(fwd) == m * 5
    assert {(ev["args"]["chunk"], ev["args"]["microbatch"]) for ev in fwd} == {(c, mb) for c in range(5)
                                                                               for mb in range(m)}


def test_cli_writes_the_trace(tmp_path):
    out = tmp_path / "step.json"
    r = run_cli("train", "estimate", "--cluster", "ref-1k-h100", "--model", "llama3-70b", "--gpus", "512",
                "--tp", "8", "--pp", "4", "-b", "256", "--timeline", str(out), "--json")
    assert r.code == 0, r.stderr
    trace = json.loads(out.read_text())
    est = json.loads(r.stdout)
    assert trace["otherData"]["step_time_s"] == pytest.approx(est["step_time_s"])
    assert {ev["ph"] for ev in trace["traceEvents"]} == {"X", "M"}
    bad = run_cli("train", "estimate", "--cluster", "ref-1k-h100", "--model", "llama3-70b", "--gpus", "512",
                  "--tp", "8", "--pp", "4", "-b", "256", "--timeline", str(tmp_path / "no" / "dir" / "x.json"))
    assert bad.code == 2 and "--timeline" in bad.stderr and "Traceback" not in bad.stderr
