"""The course lesson: 512 GPUs on 1 GbE are no faster than 128 GPUs on InfiniBand, and a 1 GbE training
step is dominated by the gradient all-reduce. Plus the calibration set (median <= 10%, max <= 25%)."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import VALIDATION, need_shared

from clustertwin import specs
from clustertwin import validate as validation
from clustertwin.comm import collective

ONE_GBE_NODE = {"preset": "dgx-a100-80gb", "nics": {"count": 1, "gbit_per_s": 1}}
PARAMS_1_3B = 1.3e9
FP16_BYTES = 2
TOKENS_PER_STEP = 512 * 2048  # global batch 512 sequences of 2,048 tokens
FLOPS_PER_PARAM_TOKEN = 6  # forward + backward (Kaplan et al. 2020)


@pytest.fixture(scope="module")
def eth_512(make_cluster) -> specs.ClusterSpec:
    return make_cluster(ONE_GBE_NODE, 64, fabric="eth-1g", topology="fat-tree")


@pytest.fixture(scope="module")
def ib_128(make_cluster) -> specs.ClusterSpec:
    return make_cluster("dgx-a100-80gb", 16, fabric="ib-ndr")


def test_512_gpus_on_1gbe_deliver_less_algbw_than_128_on_ndr(eth_512, ib_128):
    sizes = 2.0 ** np.arange(10, 34)  # 1 KiB .. 8 GiB
    slow = collective(eth_512, "all_reduce", sizes, 512)
    fast = collective(ib_128, "all_reduce", sizes, 128)
    assert np.all(slow.algbw_gb_per_s < fast.algbw_gb_per_s)
    # large messages: the 1 GbE NIC (0.125 x 0.90 GB/s) bounds the ring busbw; 64 nodes span several leaf
    # switches, so eth-1g's congestion_penalty (0.2, TCP incast) applies too
    assert slow.breakdown["leaves"] > 1
    assert slow.busbw_gb_per_s[-1] == pytest.approx(0.125 * 0.90 / 1.2, rel=0.05)
    assert fast.algbw_gb_per_s[-1] > 500 * slow.algbw_gb_per_s[-1]


def _step_time_s(c: specs.ClusterSpec, gpus: int) -> tuple[float, float]:
    peak_flops = c.node.gpu.peak_tflops("fp16") * 1e12
    compute_s = FLOPS_PER_PARAM_TOKEN * PARAMS_1_3B * TOKENS_PER_STEP / (gpus * peak_flops)
    comm_s = collective(c, "all_reduce", PARAMS_1_3B * FP16_BYTES, gpus).time_s
    return compute_s, comm_s


def test_one_gbe_training_step_is_communication_dominated(eth_512, ib_128):
    compute_512, comm_512 = _step_time_s(eth_512, 512)
    compute_128, comm_128 = _step_time_s(ib_128, 128)
    assert comm_512 > 100 * compute_512  # even at 100% of peak, the gradient sync dominates
    assert comm_128 < compute_128
    # with perfect overlap (most favourable to 1 GbE) 512 GPUs still train slower than 128 on NDR
    tokens_per_s_512 = TOKENS_PER_STEP / max(compute_512, comm_512)
    tokens_per_s_128 = TOKENS_PER_STEP / max(compute_128, comm_128)
    assert tokens_per_s_512 < tokens_per_s_128


def test_calibration_set_within_tolerance():
    path = need_shared(VALIDATION / "collective.yaml")
    out = validation.run([path], {"collective"})
    summary = out["summary"]["by_kind"]["collective"]
    for case in out["cases"]:
        assert "error" not in case, case
        print(case["id"], case["predicted"]["algorithm"], {k: f"{v:+.1%}" for k, v in case["rel_error"].items()})
    print("median", summary["median_abs_rel_error"], "max", summary["max_abs_rel_error"])
    assert summary["failed"] == 0
    assert summary["median_abs_rel_error"] <= 0.10
    assert summary["max_abs_rel_error"] <= 0.25


def test_collective_tables_within_tolerance():
    """validation/collective_tables.yaml (108 published nccl-tests / rccl-tests / DeepEP points): median |error|
    over all measured values, small messages (<= 64 KiB) and DeepEP rows (issue targets 8% overall (round 3),
    20% small; achieved 7.6% / 8.7% / 3.4%); no case above 50% (issue target); the li-plus sendrecv and GCP TCPXO rows that were
    ~2x off are within 25%, and so are the CoreWeave NVL72 rack tables (NVLS on a 72-GPU domain, NVLSTree
    at 2 racks, the 72-GPU tree chain at 20 racks)."""
    out = validation.run([need_shared(VALIDATION / "collective_tables.yaml")], {"collective"})
    cases = out["cases"]
    assert all("error" not in c for c in cases)
    errs = [abs(v) for c in cases for v in c["rel_error"].values()]
    small = [abs(v) for c in cases if c["id"] and _bytes(c) <= 65536 for v in c["rel_error"].values()]
    deepep = [abs(v) for c in cases if "deepep" in c["id"] for v in c["rel_error"].values()]
    print("median", np.median(errs), "small", np.median(small), "deepep", np.median(deepep), "max", max(errs))
    assert np.median(errs) <= 0.08
    assert np.median(small) <= 0.10
    assert np.median(deepep) <= 0.05
    above = sorted({c["id"] for c in cases for v in c["rel_error"].values() if abs(v) > 0.5})
    assert above == [], above
    for prefix in ("r2-liplus-a100-8gpu-sendrecv", "r2-gcp-a3mega-2node-ar",  # p2p channels; TCPXO's NCCL settings
                   "r2-coreweave-gb200-1rack", "r2-coreweave-gb200-2rack", "r2-coreweave-gb200-20rack-ar-512m",
                   "r2-coreweave-gb200-20rack-ar-2g"):
        worst = max(abs(v) for c in cases if c["id"].startswith(prefix) for v in c["rel_error"].values())
        assert worst <= 0.25, (prefix, worst)


def _bytes(case: dict) -> float:
    import yaml

    global _SIZES
    if not _SIZES:
        data = yaml.safe_load((VALIDATION / "collective_tables.yaml").read_text())
        _SIZES.update({c["id"]: float(c["bytes"]) for c in data["cases"]})
    return _SIZES[case["id"]]


_SIZES: dict[str, float] = {}
