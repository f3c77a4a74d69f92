"""HPL, HPCG and stencil physics by hand: Rpeak arithmetic, the DGEMM rate, grids, and the direction of every
effect (bigger N -> higher efficiency, slower network -> lower, memory-bound HPCG)."""

from __future__ import annotations

import pytest

from clustertwin import catalog, specs
from clustertwin.errors import SpecError
from clustertwin.hpc import HPCGSpec, HPLSpec, StencilSpec, hpl, load_workload
from clustertwin.hpc.grid import grid, hpl_gpus, near_square
from clustertwin.hpc.hpcg import hpcg
from clustertwin.hpc.params import DEFAULT_PARAMS, gflops_per_w
from clustertwin.hpc.rates import device_rate, rpeak_pflops
from clustertwin.hpc.stencil import stencil


def _cluster(node: str = "dgx-h100", nodes: int = 4, fabric: str | None = None) -> specs.ClusterSpec:
    data: dict = {"node": node, "nodes": nodes}
    if fabric:
        data["network"] = {"fabric": fabric, "topology": "fat-tree"}
    return specs.build(specs.ClusterSpec, data)


def test_rpeak_by_hand() -> None:
    node = catalog.get("node", "dgx-h100")
    total, parts = rpeak_pflops(node, 255, 2040)  # CHIE-3: 255 DGX H100
    cpu = 255 * 2 * 56 * 2.0 * 32 / 1e6
    assert parts["cpu_pflops"] == pytest.approx(cpu, rel=1e-3)
    assert total == pytest.approx(2040 * 66.9 / 1e3 + cpu, rel=1e-6)
    assert total == pytest.approx(138.32, rel=0.01)  # the list's Rpeak


def test_dgemm_rate_is_the_smaller_of_compute_and_power() -> None:
    h100 = device_rate(catalog.get("gpu", "h100-sxm"))
    assert h100.compute_bound_tflops == pytest.approx(DEFAULT_PARAMS.dgemm_efficiency * 66.9)
    assert h100.power_bound_tflops == pytest.approx(700 * gflops_per_w(4) / 1e3)
    assert h100.dgemm_tflops == min(h100.compute_bound_tflops, h100.power_bound_tflops)
    mi250x = device_rate(catalog.get("gpu", "mi250x"))
    assert mi250x.limited_by == "power" and mi250x.power_w == pytest.approx(560)
    l40s = device_rate(catalog.get("gpu", "l40s"))
    assert l40s.limited_by == "compute" and l40s.power_w < 350


def test_grids() -> None:
    assert near_square(1024) == (32, 32)
    assert near_square(23536) == (16, 1471)
    assert hpl_gpus(23536, 4) < 23536 and hpl_gpus(1024, 8) == 1024
    p, q = near_square(hpl_gpus(23536, 4))
    assert q / p <= 4
    g = grid(64, 8)
    assert (g.p, g.q) == (8, 8) and g.p_local * g.q_local == 8
    with pytest.raises(SpecError):
        grid(64, 8, p=7)


def test_hpl_efficiency_grows_with_n_and_falls_with_a_slow_network() -> None:
    c = _cluster()
    small, big = hpl(c, HPLSpec(n=100_352)), hpl(c, HPLSpec())
    assert small.efficiency < big.efficiency
    assert big.rmax_pflops <= big.rpeak_pflops
    slow = hpl(_cluster(fabric="eth-10g"), HPLSpec())
    assert slow.rmax_pflops < 0.9 * big.rmax_pflops
    with pytest.raises(SpecError, match="GB per GPU"):
        hpl(c, HPLSpec(n=10_000_000))


def test_hpl_flop_count_and_time() -> None:
    r = hpl(_cluster(nodes=1), HPLSpec(n=102_400, nb=512))
    assert r.rmax_pflops * 1e15 * r.time_s == pytest.approx(2 / 3 * 102_400**3 + 2 * 102_400**2, rel=1e-9)


def test_hpcg_is_memory_bound() -> None:
    c = _cluster()
    r = hpcg(c, HPCGSpec())
    assert r.breakdown["memory_s"] > 10 * (r.breakdown["dot_all_reduce_s"] + r.breakdown["halo_s"])
    assert r.breakdown["share_of_fp64_peak"] < 0.05  # HPCG runs at ~1-3% of peak on GPUs
    h200 = hpcg(_cluster("dgx-h200"), HPCGSpec())
    assert h200.gflops / r.gflops == pytest.approx(4800 / 3350, rel=0.02)  # HBM ratio


def test_stencil_bounds_and_errors() -> None:
    c = _cluster(nodes=2)
    one = stencil(c, StencilSpec(grid=(4096, 2048, 64), gpus=8))
    assert one.breakdown["halo_s"] > 0 and not any(a["inter_node"] for a in one.breakdown["axes"].values())
    two = stencil(c, StencilSpec(grid=(4096, 2048, 64)))
    assert any(a["inter_node"] for a in two.breakdown["axes"].values())
    assert two.step_s < one.step_s
    l40s = stencil(_cluster("l40s-8", 2), StencilSpec(grid=(4096, 2048, 64)))
    assert l40s.bound == "FP64 compute"
    with pytest.raises(SpecError, match="exceeds"):
        stencil(_cluster(nodes=1), StencilSpec(grid=(20000, 20000, 128), gpus=1))


def test_workload_loading_errors(tmp_path) -> None:
    with pytest.raises(SpecError, match=r"unknown workload .hpll.*hpl"):
        load_workload("hpll")
    f = tmp_path / "w.yaml"
    f.write_text("kind: stencil\nhalo_widht: 2\n")
    with pytest.raises(SpecError, match="halo_widht"):
        load_workload(str(f))
    f.write_text("kind: hpl\nnb: 256\n")
    assert load_workload(str(f)).nb == 256


def test_an_elongated_grid_and_a_wide_panel_cost_efficiency() -> None:
    c = _cluster(nodes=8, fabric="ib-hdr")
    square = hpl(c, HPLSpec(n=400_384, p=8, q=8))
    row = hpl(c, HPLSpec(n=400_384, p=1, q=64))
    assert row.rmax_pflops < square.rmax_pflops
    assert row.breakdown["panel_factorisation_s"] > square.breakdown["panel_factorisation_s"]
    wide = hpl(c, HPLSpec(n=400_384, nb=4096, p=8, q=8))
    assert wide.breakdown["panel_factorisation_s"] > square.breakdown["panel_factorisation_s"]
