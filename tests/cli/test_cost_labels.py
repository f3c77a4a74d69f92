"""Every cost a command prints says what it prices: time-to-train's energy cost is labelled an estimate
and kept apart from GPU-hour cost; an unpriced item makes totals a "lower bound"; estimated prices are
named as estimates (``plan``, ``train --tokens``, ``hpc compare``, ``sweep``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli

from clustertwin.facility.cost import time_to_train_cost_rows

UNPRICED = """name: unpriced
node: {preset: dgx-h100, price_usd: null, gpu: {preset: h100-sxm, price_usd: null}}
nodes: 2
"""


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_time_to_train_rows_split_energy_and_gpu_hour_cost() -> None:
    rows = time_to_train_cost_rows(100.0, 100.0, 50.0)
    assert len(rows) == 1 and "energy cost" in rows[0][0] and "estimate" in rows[0][0]
    energy, total = time_to_train_cost_rows(100.0, 200.0, 50.0)
    assert energy == ["energy cost (USD, estimate)", 100.0]
    assert "$2.00" in total[0] and "GPU-hour" in total[0] and total[1] == 200.0


def test_train_tokens_never_prints_a_bare_cost() -> None:
    for extra in ((), ("--usd-per-gpu-hour", "2")):
        r = run_cli("train", "estimate", "-m", "llama3-8b", "-g", "64", "-b", "256", "--tokens", "1e11", *extra)
        assert r.code == 0, r.stderr
        lines = [ln for ln in r.stdout.splitlines() if "cost" in ln.lower()]
        assert lines and "cost (USD)" not in r.stdout.replace("cost (USD,", "")
        assert "energy cost (USD, estimate" in r.stdout
    assert "energy + GPU-hour cost (USD, GPU-hours at $2.00" in _flat(r.stdout)
    d = json.loads(run_cli("train", "estimate", "-m", "llama3-8b", "-g", "64", "-b", "256", "--tokens", "1e11",
                           "--usd-per-gpu-hour", "2", "--json").stdout)["time_to_train"]
    assert d["cost_usd"] == d["energy_cost_usd"] + 2.0 * d["gpu_hours"]


def test_plan_with_an_unpriced_node_says_lower_bound(tmp_path: Path) -> None:
    f = tmp_path / "unpriced.yaml"
    f.write_text(UNPRICED)
    r = run_cli("plan", str(f))
    assert r.code == 0, r.stderr
    text = _flat(r.stdout)
    assert "no price" in text and "lower bound" in text
    assert "(lower bound)" in text.split("USD per GPU-hour", 1)[1][:40]


def test_hpc_compare_names_estimated_prices() -> None:
    r = run_cli("hpc", "compare", "--budget", "5e6", "--nodes", "dgx-h100,l40s-8")
    assert r.code == 0, r.stderr
    text = _flat(r.stdout)
    assert "prices are estimates for: l40s-8" in text and "(estimate)" in text
