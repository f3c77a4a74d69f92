"""Checkpoint size and time, Young's and Daly's intervals."""

from __future__ import annotations

import pytest

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.reliability import (
    checkpoint_bytes,
    checkpoint_cost,
    cluster_checkpoint_cost,
    daly_interval_s,
    param_count,
    young_interval_s,
)
from clustertwin.units import GB, MINUTE_S


def test_param_count_and_checkpoint_size_of_llama3_405b():
    m = catalog.get("model", "llama3-405b")
    assert param_count(m) == pytest.approx(405.9e9, rel=0.005)
    assert checkpoint_bytes(m) == pytest.approx(14 * param_count(m))
    assert param_count(catalog.get("model", "llama2-7b")) == pytest.approx(6.74e9, rel=0.01)


def test_moe_param_count_counts_every_expert():
    m = catalog.get("model", "mixtral-8x7b")
    assert param_count(m) == pytest.approx(46.7e9, rel=0.01)


@pytest.mark.parametrize(("mtbf_h", "daly_min", "young_min"), [(24, 116.7, 120.0), (6, 56.7, 60.0),
                                                                 (0.25, 9.1, 12.2)])
def test_daly_and_young_reproduce_dalys_cases(mtbf_h, daly_min, young_min):
    delta = 5 * MINUTE_S
    assert daly_interval_s(delta, mtbf_h * 3600) / MINUTE_S == pytest.approx(daly_min, abs=0.05)
    assert young_interval_s(delta, mtbf_h * 3600) / MINUTE_S == pytest.approx(young_min, abs=0.05)


def test_daly_caps_at_mtbf_when_checkpoint_is_slow():
    assert daly_interval_s(3000.0, 1000.0) == 1000.0
    with pytest.raises(SpecError):
        daly_interval_s(0.0, 1000.0)
    with pytest.raises(SpecError):
        young_interval_s(10.0, -1.0)


def test_write_bandwidth_is_capped_by_the_nodes_links():
    # one node with a 50 GB/s link cannot use a 2 TB/s file system
    c = checkpoint_cost(1000 * GB, gpus=8, nodes=1, storage_write_gb_per_s=2000, storage_read_gb_per_s=2000,
                        node_storage_gb_per_s=50, d2h_gb_per_s=50)
    assert c.write_gb_per_s == 50 and c.write_s == pytest.approx(20.0)
    assert c.snapshot_s == pytest.approx(1000 / 8 / 50)
    assert c.sync_blocking_s == pytest.approx(c.snapshot_s + c.write_s)
    assert c.async_blocking_s == pytest.approx(c.snapshot_s)
    big = checkpoint_cost(1000 * GB, gpus=8000, nodes=1000, storage_write_gb_per_s=200, storage_read_gb_per_s=400,
                          node_storage_gb_per_s=50, d2h_gb_per_s=50)
    assert big.write_s == pytest.approx(5.0) and big.load_s == pytest.approx(2.5)


def test_cluster_checkpoint_cost_uses_storage_nic_and_pcie():
    cl = catalog.get("cluster", "ref-1k-h100")
    c = cluster_checkpoint_cost(cl, 1024, 5.68e12)
    assert c.write_gb_per_s == cl.storage.write_gb_per_s  # 128 nodes x 50 GB/s > 200 GB/s
    # H100 SXM: PCIe Gen5 x16 = 32 GT/s x 16 x 128/130 / 8 = 63.0 GB/s per direction
    assert c.snapshot_s == pytest.approx(5.68e12 / 1024 / (0.8 * 63.0 * GB), rel=1e-3)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_bandwidths_are_spec_errors(bad):
    with pytest.raises(SpecError):
        checkpoint_cost(1e9, 8, 1, bad, 1.0, 1.0, 1.0)
