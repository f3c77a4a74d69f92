"""CLI details: ``--gpus 0`` is refused, one GPU trains without ZeRO, train and infer share a default model,
``train scale --tokens``, sweep fronts per model, and a sweep progress that moves per batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import run_cli

ZERO_GPUS = [
    ("train", "estimate", "-b", "8"), ("train", "search", "-b", "8"), ("train", "scale", "-b", "8"),
    ("comm", "all_reduce"), ("explain",), ("infer", "estimate"),
]


@pytest.mark.parametrize("cmd", ZERO_GPUS, ids=lambda c: " ".join(c[:2]))
def test_gpus_zero_is_refused_in_one_line(cmd) -> None:
    r = run_cli(*cmd, "--gpus", "0")
    assert r.code == 2, r.stdout
    err = r.stderr.strip()  # the CLI-wide numeric guard answers first, naming the command
    assert len(err.splitlines()) == 1 and "--gpus must be >= 1 (got 0); omit --gpus for the whole cluster" in err


def test_one_gpu_trains_without_zero() -> None:
    r = run_cli("train", "estimate", "--gpus", "1", "-b", "8", "--recompute", "full", "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["gpus"] == 1 and d["layout"]["zero"] == 0 and d["layout"]["dp"] == 1


def test_train_and_infer_share_the_default_model() -> None:
    t = json.loads(run_cli("train", "estimate", "-g", "8", "-b", "8", "--strict-layout", "--json").stdout)
    i = json.loads(run_cli("infer", "estimate", "--json").stdout)
    assert i["model"] == "llama3-8b"
    assert 14.0 < t["memory"]["breakdown_gib"]["weights"] < 16.0  # 8B x 2 B of BF16 weights per GPU (dp8)


def test_train_scale_tokens_gives_time_to_train_per_point() -> None:
    r = run_cli("train", "scale", "-m", "llama3-8b", "-g", "32", "-b", "256", "--tokens", "1e11", "--json")
    assert r.code == 0, r.stderr
    pts = json.loads(r.stdout)["points"]
    days = [p["time_to_train"]["days"] for p in pts]
    assert [p["gpus"] for p in pts] == [8, 16, 32] and days == sorted(days, reverse=True)
    for p in pts:
        t = p["time_to_train"]
        assert t["days"] == pytest.approx(1e11 / p["tokens_per_s"] / 86400)
    r = run_cli("train", "scale", "-m", "llama3-8b", "-g", "16", "-b", "256", "--tokens", "1e11")
    assert r.code == 0 and "days" in r.stdout and "time to train at 16 GPUs" in r.stdout


SPACE = """name: two-models
model: [llama3-8b, llama2-7b]
node: [dgx-h100]
nodes: [2, 4]
fabric: [ib-ndr]
topology: [fat-tree]
global_batch: [128]
tokens: 1.0e11
layout: [{tp: 8}]
checkpoint: [{policy: restart}]
"""


def test_sweep_fronts_are_per_model_and_labelled(tmp_path: Path) -> None:
    space = tmp_path / "s.yaml"
    space.write_text(SPACE)
    r = run_cli("sweep", str(space), "--out", str(tmp_path / "s.parquet"), "--processes", "1", "--json")
    assert r.code == 0, r.stderr
    by = json.loads(r.stdout)["pareto_by_model"]["time_vs_energy"]
    assert set(by) == {"llama3-8b", "llama2-7b"}
    for model, rows in by.items():
        assert rows and {row["model"] for row in rows} == {model}
    # per model both sizes are on the time-vs-energy front (faster costs energy); mixed, llama3-8b would hide
    # llama2-7b
    assert all(len(rows) == 2 for rows in by.values())
    r = run_cli("sweep", str(space), "--out", str(tmp_path / "s.parquet"), "--processes", "1")
    squeezed = "".join(r.stdout.split())
    assert "Paretofront:wall_daysvscost_usd,llama2-7b" in squeezed
    assert "Paretofront:wall_daysvsenergy_mwh,llama3-8b" in squeezed
    assert any("llama2-7b on" in line for line in r.stdout.splitlines())  # the design label names the model


def test_sweep_progress_moves_per_batch() -> None:
    from clustertwin.sweep import load_space
    from clustertwin.sweep.executors import default_batch_points, run_local

    assert default_batch_points(1000, 2) == 32  # 32 batches for two workers, not 8
    space = load_space({"name": "p", "model": ["llama3-8b"], "node": ["dgx-h100", "dgx-h200"],
                        "nodes": [2, 4, 8, 16], "fabric": ["ib-ndr", "roce-400g"], "topology": ["fat-tree"],
                        "global_batch": [128], "tokens": 1e11, "layout": [{"tp": 8}],
                        "checkpoint": [{"policy": "restart"}]})
    calls: list[tuple[int, int]] = []
    run = run_local(space, processes=1, progress=lambda d, t: calls.append((d, t)))
    assert run.points == 16 and len(calls) == 16
    assert [d for d, _ in calls] == list(range(1, 17)) and all(t == 16 for _, t in calls)
