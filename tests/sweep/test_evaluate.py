"""Point evaluation agrees with the training, reliability and facility models it composes."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin.reliability import with_failures
from clustertwin.specs import ClusterSpec, ModelSpec, ParallelismSpec, load
from clustertwin.sweep import evaluate_points, load_space, point_ids
from clustertwin.train.estimate import estimate
from clustertwin.train.scale import time_to_train
from clustertwin.units import DAY_S

SPACE = {"model": ["llama3-8b"], "node": ["dgx-h100", "dgx-a100-80gb"], "nodes": [4], "fabric": ["ib-ndr"],
         "topology": ["fat-tree"], "precision": ["bf16", "fp8"], "global_batch": [256], "tokens": 1e12,
         "layout": [{"tp": 2, "pp": 2, "micro_batch": 2, "recompute": "none", "zero": 1},
                    {"tp": 3}, {"tp": 1, "recompute": "none", "zero": 0, "micro_batch": 8}],
         "checkpoint": [{"policy": "restart"}]}


@pytest.fixture(scope="module")
def result():
    space = load_space(SPACE)
    return space, evaluate_points(space, point_ids(space))


def test_point_matches_train_estimate_time_to_train_and_reliability(result) -> None:
    """Step time, time-to-train, wall time and energy equal the layer functions for the same design."""
    _, cols = result
    cluster = load(ClusterSpec, {"node": "dgx-h100", "nodes": 4, "storage": "lustre",
                                 "network": {"fabric": "ib-ndr", "topology": "fat-tree", "tiers": 2},
                                 "facility": {"cooling": "liquid", "pue": 1.15, "rack_kw_limit": 100,
                                              "usd_per_kwh": 0.08}})
    model = load(ModelSpec, "llama3-8b", kind="model")
    est = estimate(model, cluster, ParallelismSpec(tp=2, pp=2, dp=8, micro_batch=2, global_batch=256,
                                                    recompute="none", zero=1, sequence_parallel=True))
    tt = time_to_train(est, 1e12, cluster)
    rel = with_failures(32, tt.days * DAY_S, est.checkpoint_bytes, cluster, trials=0)
    assert cols["status"][0] == "ok"
    assert cols["step_time_s"][0] == pytest.approx(est.step_time_s, rel=1e-12)
    assert cols["ideal_days"][0] == pytest.approx(tt.days, rel=1e-12)
    assert cols["wall_days"][0] == pytest.approx(rel.analytic.wall_s / DAY_S, rel=1e-9)
    assert cols["energy_mwh"][0] / cols["wall_days"][0] == pytest.approx(tt.energy_mwh / tt.days, rel=1e-12)
    assert cols["cost_usd"][0] == pytest.approx(cols["gpu_hours"][0] * cols["usd_per_gpu_hour"][0])


def test_invalid_points_say_why(result) -> None:
    """tp=3 cannot split the GPUs, an 8-sequence micro-batch runs out of HBM, A100 has no FP8."""
    space, cols = result
    status = dict(zip(zip(cols["node"], cols["precision"], cols["layout"], strict=True), cols["status"], strict=True))
    reason = dict(zip(zip(cols["node"], cols["precision"], cols["layout"], strict=True), cols["reason"], strict=True))
    bad_split = ("dgx-h100", "bf16", space.layout[1].label)
    assert status[bad_split] == "invalid_layout" and "does not divide 32 GPUs" in reason[bad_split]
    assert status[("dgx-h100", "bf16", space.layout[2].label)] == "out_of_memory"
    assert status[("dgx-a100-80gb", "fp8", space.layout[0].label)] == "invalid_design"
    assert "fp8" in reason[("dgx-a100-80gb", "fp8", space.layout[0].label)]
    ok = np.array(cols["status"]) == "ok"
    assert np.isnan(cols["wall_days"][~ok]).all() and np.isfinite(cols["wall_days"][ok]).all()


def test_any_split_into_batches_gives_the_same_rows(result) -> None:
    """Evaluating the points in two uneven batches gives the same columns as one batch."""
    space, cols = result
    ids = point_ids(space)
    a, b = evaluate_points(space, ids[:5]), evaluate_points(space, ids[5:])
    for name, col in cols.items():
        joined = list(a[name]) + list(b[name])
        assert np.array_equal(np.asarray(joined, dtype=object), np.asarray(col, dtype=object)) or \
            np.allclose(np.asarray(joined, float), np.asarray(col, float), equal_nan=True, rtol=0, atol=0), name


@pytest.mark.parametrize("checkpoint", [{"policy": "restart"}, {"policy": "restart", "async_checkpoint": True},
                                        {"policy": "spares"}, {"policy": "spares", "async_checkpoint": True},
                                        {"policy": "elastic"}, {"policy": "restart", "interval_s": 1800}])
def test_run_model_is_bit_identical_to_the_analytic_reliability_model(checkpoint) -> None:
    """The per-design terms plus the per-point finish give exactly ``analytic`` for every policy and for run
    lengths shorter than, equal to and many times the checkpoint interval."""
    import dataclasses

    from clustertwin.reliability import analytic
    from clustertwin.reliability.analytic import RunModel
    from clustertwin.sweep.evaluate import _cluster, _model, _scenario
    from clustertwin.sweep.space import CheckpointChoice

    cluster = _cluster('"ref-1k-h100"', "dgx-h100", 128, "ib-ndr", "rail-optimized")
    scn, _ = _scenario(cluster, _model("llama3-70b"), CheckpointChoice(**checkpoint))
    run = RunModel.of(scn)
    for work in (1.0, 600.0, scn.interval_s, 3.7e5, 2.1e6, 4.4e7):
        ref = analytic(dataclasses.replace(scn, work_s=work))
        assert run.wall(work) == (ref.wall_s, ref.ettr, ref.unexpected_interruptions)
