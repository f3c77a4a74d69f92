"""Synthetic traces: documented statistics; EASY backfill raises utilisation over FIFO; topology-aware
placement lowers multi-leaf spans."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clustertwin.errors import SpecError
from clustertwin.sched import cluster as C
from clustertwin.sched import engine, metrics, synthetic

CL = C.uniform(64, 8, nodes_per_leaf=8)
# lighter tail than Philly so that 2,000 jobs reach a steady, contended state quickly
SPEC = synthetic.SyntheticSpec(jobs=2000, target_load=1.5, median_runtime_s=900, mean_runtime_s=2700, seed=7)


@pytest.fixture(scope="module")
def jobs():
    return synthetic.generate(SPEC, CL.total_gpus)


def test_lognormal_parameters_match_philly():
    mu, sigma = synthetic.lognormal_params(874, 18006)
    assert math.exp(mu) == pytest.approx(874)
    assert math.exp(mu + sigma**2 / 2) == pytest.approx(18006)
    assert synthetic.capped_lognormal_mean(mu, sigma, 1e12) == pytest.approx(18006, rel=1e-6)
    assert synthetic.capped_lognormal_mean(mu, sigma, 1000.0) < 1000.0


def test_generator_statistics_and_determinism(jobs):
    again = synthetic.generate(SPEC, CL.total_gpus)
    assert np.array_equal(jobs.submit_s, again.submit_s) and jobs.ids == again.ids
    assert np.median(jobs.runtime_s) == pytest.approx(900, rel=0.15)
    assert np.all(jobs.limit_s >= jobs.runtime_s)
    assert np.mean(jobs.total_gpus) == pytest.approx(2.59, rel=0.25)
    big = jobs.total_gpus > 8
    assert np.all(jobs.units[big] * jobs.gpus_per_unit[big] == jobs.total_gpus[big])


def test_diurnal_arrivals_peak_and_trough():
    spec = synthetic.SyntheticSpec(jobs=4000, arrival="diurnal", diurnal_amplitude=0.8, seed=1,
                                   median_runtime_s=600, mean_runtime_s=1200)
    j = synthetic.generate(spec, 512)
    phase = (j.submit_s % 86400) / 86400
    # rate ~ 1 + 0.8 sin(2 pi t / day): the first half-day gets far more arrivals than the second
    assert (phase < 0.5).sum() > 2 * (phase >= 0.5).sum()


def test_needs_cluster_size():
    with pytest.raises(SpecError):
        synthetic.generate(synthetic.SyntheticSpec(jobs=5))


def test_backfill_raises_utilisation_over_fifo(jobs):
    fifo = metrics.compute(engine.simulate(CL, jobs, "fifo"))
    easy = metrics.compute(engine.simulate(CL, jobs, "backfill"))
    print(f"\nFIFO util {fifo.gpu_utilization:.3f} avg queue {fifo.avg_queue_s:.0f} s; "
          f"EASY util {easy.gpu_utilization:.3f} avg queue {easy.avg_queue_s:.0f} s")
    assert easy.gpu_utilization > fifo.gpu_utilization + 0.02
    assert easy.avg_queue_s < fifo.avg_queue_s


def test_topology_placement_lowers_multi_leaf_spans(jobs):
    ff = metrics.compute(engine.simulate(CL, jobs, "backfill", placement="first-fit"))
    topo = metrics.compute(engine.simulate(CL, jobs, "backfill", placement="topology"))
    print(f"\nmulti-leaf jobs: first-fit {ff.multi_leaf_jobs}, topology {topo.multi_leaf_jobs}")
    assert topo.multi_leaf_jobs < ff.multi_leaf_jobs
