"""Cost outputs never show an unpriced or estimated item without saying so: sweep fronts, the facility cost
helpers and the time-to-train label."""

from __future__ import annotations

from pathlib import Path

from clustertwin import specs
from clustertwin.facility.cost import cost_cell, price_note, time_to_train_cost_label
from clustertwin.plan import plan
from tests.conftest import run_cli

SPACE = """name: prices
model: [llama3-8b]
node: [dgx-h100, dgx-h200]
nodes: [2]
fabric: [ib-ndr]
topology: [fat-tree]
global_batch: [128]
tokens: 1.0e11
layout: [{tp: 8}]
checkpoint: [{policy: restart}]
"""


def test_sweep_names_estimated_prices(tmp_path: Path) -> None:
    space = tmp_path / "s.yaml"
    space.write_text(SPACE)
    r = run_cli("sweep", str(space), "--out", str(tmp_path / "s.parquet"), "--processes", "1")
    assert r.code == 0, r.stderr
    text = " ".join(r.stdout.split())  # the console wraps long lines
    assert "estimated node prices: dgx-h200 (estimate)" in text
    assert "network, storage, facility and energy prices are estimates" in text


def test_unpriced_parts_are_lower_bounds() -> None:
    c = specs.build(specs.ClusterSpec, {"node": {"preset": "dgx-h100", "price_usd": None,
                                                 "gpu": {"preset": "h100-sxm", "price_usd": None}},
                                        "nodes": 2})
    cost = plan(c).facility.capex
    assert not cost.complete and "compute" in cost.missing
    assert "lower bound" in price_note(cost)
    assert cost_cell(1000.0, False) == "$1,000 (lower bound)" and cost_cell(1000.0, True) == "$1,000"


def test_time_to_train_label_says_what_the_cost_is() -> None:
    assert time_to_train_cost_label(0.0).startswith("energy cost")
    assert "GPU-hour" in time_to_train_cost_label(2.5) and "$2.50" in time_to_train_cost_label(2.5)
