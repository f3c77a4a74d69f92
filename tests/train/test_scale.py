"""Scaling curve and time-to-train."""

from __future__ import annotations

import pytest

from clustertwin import catalog, specs
from clustertwin.train import estimate, scale, time_to_train
from clustertwin.units import HOUR_S


def test_scaling_efficiency_and_attribution():
    c = catalog.get("cluster", "ref-1k-h100")
    m = catalog.get("model", "llama3-8b")
    res = scale(m, c, global_batch=512, max_gpus=512)
    pts = [p for p in res.points if p.estimate is not None]
    assert [p.gpus for p in res.points] == [8, 16, 32, 64, 128, 256, 512]
    assert pts[0].efficiency == pytest.approx(1.0)
    assert pts[-1].efficiency < 1.0
    assert pts[-1].estimate.tokens_per_s > 8 * pts[0].estimate.tokens_per_s
    for p in pts:
        assert sum(p.fractions.values()) == pytest.approx(1.0)
    # the lost efficiency shows up as communication, bubble or stragglers
    lost = 1 - pts[-1].fractions["compute"]
    assert lost > 1 - pts[0].fractions["compute"]


def test_time_to_train_arithmetic():
    c = catalog.get("cluster", "ref-1k-h100")
    m = catalog.get("model", "llama3-8b")
    e = estimate(m, c, specs.ParallelismSpec(tp=1, pp=1, dp=1024, global_batch=1024, zero=1))
    t = time_to_train(e, 1e12, c, usd_per_gpu_hour=2.0)
    hours = 1e12 / e.tokens_per_s / HOUR_S
    assert t.gpu_hours == pytest.approx(1024 * hours)
    assert t.days == pytest.approx(hours / 24)
    assert t.pue == 1.15
    kwh = 128 * c.node.system_power_kw * hours * 1.15
    assert t.energy_mwh == pytest.approx(kwh / 1000)
    assert t.cost_usd == pytest.approx(kwh * 0.08 + 2.0 * t.gpu_hours)
