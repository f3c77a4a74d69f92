"""Data path: stall and bottleneck on ref-1k-h100 with llama3-8b, text vs vision, checkpoint path,
MLPerf Storage v1.0 calibration (validation/data_loading.yaml), bad input."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from clustertwin import catalog, validate
from clustertwin.datapath import binding_read_gb_per_s, checkpoint_path, data_stall, dataset, mlperf_storage
from clustertwin.errors import SpecError
from clustertwin.explain import explain
from clustertwin.specs import ParallelismSpec, StorageSpec
from clustertwin.specs.loading import build

CASES = Path(__file__).resolve().parents[2] / "validation" / "data_loading.yaml"
MEDIAN_TOLERANCE = 0.10
"""Median |error| of accelerators_supported over the 75 MLPerf Storage v1.0 rows (achieved 0.100, the
issue's target; see docs/datapath.md)."""
THROUGHPUT_TOLERANCE = 0.11
"""Median |error| of throughput_gb_per_s over the same rows (achieved 0.1005)."""


@pytest.fixture(scope="module")
def ref():
    return catalog.get("cluster", "ref-1k-h100")


@pytest.fixture(scope="module")
def llama_step(ref):
    from clustertwin import train

    m = catalog.get("model", "llama3-8b")
    est = train.estimate(m, ref, ParallelismSpec(tp=1, pp=1, dp=1024, global_batch=1024, zero=3))
    return m, est


def _with_read(cluster, gb_per_s):
    return cluster.model_copy(update={"storage": cluster.storage.model_copy(update={"read_gb_per_s": gb_per_s})})


def test_lowering_storage_read_raises_stall_and_names_storage(ref, llama_step):
    m, est = llama_step
    stalls = []
    for read in (400.0, 1.0, 0.05, 0.02, 0.01):
        r = data_stall(_with_read(ref, read), "tokenized-text", est.step_time_s, est.global_batch, seq_len=m.seq_len)
        stalls.append(r.stall_s)
        if read >= 1.0:
            assert r.stall_s == 0.0
    assert stalls == sorted(stalls) and stalls[-1] > stalls[-2] > 0.0
    low = data_stall(_with_read(ref, 0.01), "tokenized-text", est.step_time_s, est.global_batch, seq_len=m.seq_len)
    assert low.bottleneck == "storage read"
    assert low.stall_s == pytest.approx(est.global_batch * m.seq_len * 4 / 0.01e9 - est.step_time_s)
    e = explain(m, _with_read(ref, 0.01), global_batch=1024,
                parallelism=ParallelismSpec(tp=1, pp=1, dp=1024, global_batch=1024, zero=3))
    assert e.bottleneck == "storage" and e.step_time_s > est.step_time_s
    assert "storage read" in e.verdict
    fast = explain(m, ref, global_batch=1024, parallelism=ParallelismSpec(tp=1, pp=1, dp=1024, global_batch=1024, zero=3))
    assert fast.bottleneck == "compute"


def test_vision_binds_at_much_higher_bandwidth_than_text(ref, llama_step):
    m, est = llama_step
    text = binding_read_gb_per_s("tokenized-text", est.step_time_s, est.global_batch, seq_len=m.seq_len)
    # ResNet-50-class step: MLPerf's emulated H100 compute of 0.224 s per 400 images per GPU
    vision = binding_read_gb_per_s("imagenet-jpeg", 0.224, 400 * ref.total_gpus)
    assert vision > 1000 * text
    r = data_stall(_with_read(ref, vision / 2), "imagenet-jpeg", 0.224, 400 * ref.total_gpus)
    assert r.binds and r.bottleneck in ("storage read", "host decode")
    t = data_stall(_with_read(ref, vision / 2), "tokenized-text", est.step_time_s, est.global_batch, seq_len=m.seq_len)
    assert not t.binds


def test_cache_hits_and_metadata_limits(ref):
    st = StorageSpec(read_gb_per_s=400, metadata_ops_per_s=50_000, read_iops=1e6)
    c = ref.model_copy(update={"storage": st})
    r = data_stall(c, "imagenet-jpeg", 0.224, 400 * 1024)
    assert r.bottleneck == "metadata"
    assert r.stage("metadata").samples_per_s == pytest.approx(25_000)
    cached = dataset({"name": "cached", "sample_bytes": 110e3, "read_pattern": "random", "cache_hit_rate": 0.9})
    r2 = data_stall(c, cached, 0.224, 400 * 1024)
    assert r2.stage("metadata").samples_per_s == pytest.approx(250_000)


def test_checkpoint_write_and_restart_read_over_the_path(ref):
    ck = checkpoint_path(ref, 1024, 1e12)
    assert ck.write_bottleneck == "storage write" and ck.write_s == pytest.approx(1e12 / 200e9)
    assert ck.read_s == pytest.approx(1e12 / 400e9)
    small = checkpoint_path(ref, 8, 1e12)  # one node: its storage NICs bind
    assert small.read_bottleneck == "client NICs" and small.read_gb_per_s == pytest.approx(0.9 * 100)


def test_mlperf_storage_calibration_median():
    res = validate.run([CASES])
    assert res["summary"]["failed"] == 0 and res["summary"]["count"] == 75
    errs = [abs(c["rel_error"]["accelerators_supported"]) for c in res["cases"]]
    assert statistics.median(errs) <= MEDIAN_TOLERANCE
    tput = [abs(c["rel_error"]["throughput_gb_per_s"]) for c in res["cases"]]
    assert statistics.median(tput) <= THROUGHPUT_TOLERANCE


def test_kernel_client_ceiling_scales_with_host_cores():
    from clustertwin.datapath.mlperf import DLIO_CLIENT_CEILING_GB_PER_S, DLIO_CLIENT_GB_PER_S_PER_CORE

    lustre = build(StorageSpec, {"kind": "lustre", "read_gb_per_s": 500})
    kw = {"client_nics": 2, "client_nic_gbit_per_s": 400}  # 63 GB/s of NICs: never the limit here
    small = mlperf_storage("unet3d", "h100", 1, lustre, client_cores=32, **kw)
    big = mlperf_storage("unet3d", "h100", 1, lustre, client_cores=128, **kw)
    a, g = DLIO_CLIENT_CEILING_GB_PER_S["lustre"], DLIO_CLIENT_GB_PER_S_PER_CORE["lustre"]
    assert small.delivered_gb_per_s == pytest.approx(a + 32 * g)  # C = a + g x cores
    assert big.delivered_gb_per_s == pytest.approx(a + 128 * g)
    assert (small.accelerators_supported, big.accelerators_supported) == (2, 5)  # 2.86 GB/s per H100 at AU 0.9
    nfs = build(StorageSpec, {"kind": "nfs", "read_gb_per_s": 500})
    assert mlperf_storage("unet3d", "h100", 1, nfs, client_cores=128, **kw).delivered_gb_per_s == pytest.approx(
        128 * DLIO_CLIENT_GB_PER_S_PER_CORE["nfs"])
    # an NVMe-oF block volume has no such ceiling: its NICs (x 0.63) bind
    nvmeof = build(StorageSpec, {"kind": "nvme-of", "client": "nvme-of", "read_gb_per_s": 500})
    nv = mlperf_storage("unet3d", "h100", 1, nvmeof, client_cores=32, **kw)
    assert nv.delivered_gb_per_s == pytest.approx(0.63 * 100)


def test_mlperf_storage_demand_formula():
    ddn = catalog.get("storage", "ddn-ai400x2t")
    p = mlperf_storage("unet3d", "h100", 64, ddn, client_cores=20, client_nics=1, client_nic_gbit_per_s=100)
    d = 7 * 146_600_628 / 0.323 / 1e9
    assert p.demand_gb_per_s_per_accelerator == pytest.approx(d)
    assert p.accelerators_supported == int(p.delivered_gb_per_s / (0.9 * d) + 1e-9)
    with pytest.raises(SpecError, match="unknown MLPerf Storage workload 'unet'; did you mean 'unet3d'"):
        mlperf_storage("unet", "h100", 1, ddn)


def test_mlperf_storage_host_cpu_caps_accelerator_processes():
    from clustertwin.datapath.mlperf import DLIO_CORES_PER_ACCELERATOR

    # MangoBoost's v1.0 row: one 64-core host, 4 x 100 GbE to an NVMe/TCP target; 144 A100 measured
    nvmeof = build(StorageSpec, {"kind": "nvme-of", "client": "nvme-of", "read_gb_per_s": 104,
                                 "network_gbit_per_s": 400})
    kw = {"client_cores": 64, "client_nics": 4, "client_nic_gbit_per_s": 100}
    p = mlperf_storage("resnet50", "a100", 1, nvmeof, **kw)
    assert p.bottleneck == "client CPU"
    assert p.accelerators_supported == int(64 / DLIO_CORES_PER_ACCELERATOR + 1e-9) == 142
    assert p.accelerators_supported < p.delivered_gb_per_s / (0.9 * p.demand_gb_per_s_per_accelerator)
    # unet3d's few large-batch ranks never reach the CPU cap
    assert mlperf_storage("unet3d", "a100", 1, nvmeof, **kw).bottleneck != "client CPU"


def test_storage_bad_input_and_appliance_scaling():
    with pytest.raises(SpecError, match="storage needs read_gb_per_s"):
        build(StorageSpec, {"kind": "lustre", "capacity_pb": 2})
    s = build(StorageSpec, {**catalog.raw("storage", "ddn-ai400x3"), "appliances": 4})
    assert s.read_gb_per_s == pytest.approx(560) and s.read_gb_per_s_per_server == pytest.approx(140)
    assert StorageSpec.model_validate(s.model_dump()).read_gb_per_s == pytest.approx(560)
    assert catalog.get("storage", "gpfs").read_gb_per_s != catalog.get("storage", "lustre").read_gb_per_s
    with pytest.raises(SpecError, match="unknown dataset 'imagenet'; did you mean 'imagenet-jpeg'"):
        dataset("imagenet")


def test_port_rate_mismatch_is_an_error():
    from clustertwin.specs import ClusterSpec

    with pytest.raises(SpecError, match="fabric 'eth-1g' has 1 Gbit/s ports but the node has 8 x 400"):
        build(ClusterSpec, {"node": "dgx-h100", "nodes": 4, "network": {"fabric": "eth-1g"}})
    ok = build(ClusterSpec, {"node": "dgx-h100", "nodes": 4, "network": {"fabric": "ib-xdr"}})
    assert ok.warnings and "train at 400" in ok.warnings[0]
    k80 = build(ClusterSpec, {"node": "k80-4", "nodes": 4, "network": {"fabric": "ib-ndr"}})  # faster fabric
    assert "train at 10" in k80.warnings[0]


def test_explain_network_stage_sees_the_placement():
    from clustertwin.specs import ClusterSpec

    c = build(ClusterSpec, {"name": "oversub-4to1", "node": "dgx-h100", "nodes": 32,
                            "network": {"fabric": "ib-ndr", "topology": "fat-tree", "tiers": 2, "oversubscription": 4.0}})
    m = catalog.get("model", "llama3-8b")
    par = ParallelismSpec(tp=8, pp=1, dp=32, global_batch=256, zero=1)
    cont = explain(m, c, global_batch=256, parallelism=par, placement="contiguous")
    scat = explain(m, c, global_batch=256, parallelism=par, placement="scattered")
    net = {e.stages[1].name: e.stages[1] for e in (cont,)}["network"]
    assert scat.stages[1].capacity < 0.6 * net.capacity
    assert "leaf uplinks" in scat.stages[1].detail and "scattered" in scat.stages[1].detail


def test_held_out_by_submitter_machinery():
    import dataclasses

    import yaml

    from clustertwin.datapath import holdout

    cases = yaml.safe_load(CASES.read_text())["cases"]
    assert {holdout.submitter(c) for c in cases} >= {"DDN", "HPE", "Nutanix", "MangoBoost"}
    assert statistics.median(holdout.errors(holdout.DlioFit(), cases)) <= MEDIAN_TOLERANCE  # the shipped fit
    sub = [c for c in cases if holdout.submitter(c) in ("Nutanix", "YanRongTech")]
    bad = dataclasses.replace(holdout.DlioFit(), nfs_gb_per_s_per_core=0.05, eta_net=0.45)
    start = statistics.median(holdout.errors(bad, sub))
    refit, score = holdout.fit(sub, bad, sweeps=1)
    assert score < start and refit.nfs_gb_per_s_per_core > 0.05
    r = holdout.held_out_by_submitter(sub, sweeps=0)  # no refit: each submitter under the shipped fit
    assert r["rows"] == len(sub) and set(r["by_submitter"]) == {"Nutanix", "YanRongTech"}
    with pytest.raises(SpecError, match="names no <Division>/<Submitter>/"):
        holdout.submitter({"id": "x", "source": "somewhere"})
