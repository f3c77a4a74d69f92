"""`train estimate --with-failures`: time-to-train including failures, checkpoints and restarts."""

from __future__ import annotations

import json

import pytest
from tests.conftest import run_cli

ARGS = ("train", "estimate", "--cluster", "ref-1k-h100", "--model", "llama3-8b", "--global-batch", "1024",
        "--tp", "1", "--pp", "1", "--tokens", "1e12", "--json")


def test_failures_lengthen_time_to_train_and_ettr_below_one():
    res = run_cli(*ARGS, "--with-failures", "--trials", "50")
    assert res.code == 0, res.stderr
    d = json.loads(res.stdout)
    ideal_days = d["time_to_train"]["days"]
    wf = d["with_failures"]
    assert wf["days"] > ideal_days
    assert 0.5 < wf["ettr"] < 1.0
    assert wf["days"] * wf["ettr"] == pytest.approx(ideal_days, rel=0.02)
    assert wf["days_p10"] <= wf["days_p50"] <= wf["days_p90"]
    assert wf["gpu_hours"] > d["time_to_train"]["gpu_hours"]


def test_async_checkpoints_never_lower_ettr():
    sync = json.loads(run_cli(*ARGS, "--with-failures", "--trials", "0").stdout)["with_failures"]
    asy = json.loads(run_cli(*ARGS, "--with-failures", "--trials", "0", "--async-checkpoint").stdout)
    assert asy["with_failures"]["ettr"] >= sync["ettr"]


def test_with_failures_needs_tokens():
    args = [a for a in ARGS if a not in ("--tokens", "1e12")]
    res = run_cli(*args, "--with-failures")
    assert res.code == 2 and "--tokens" in res.stderr and "Traceback" not in res.stderr
