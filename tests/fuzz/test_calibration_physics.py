"""Issue 28, physics guards on calibrations: a calibration whose figures alone or together predict an
efficiency, a utilisation or an MFU/HFU above 1 (or a step time that only extrapolates) is refused with exit 2
and one ``error:`` line naming the file and the parameter(s); a fit or a bench measurement past a physical bound
is a failed fit that writes nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from clustertwin.errors import SpecError
from clustertwin.ops.calibration.calibrate import calibration_from_bench, write_calibration
from clustertwin.ops.perf import bench as bm
from clustertwin.specs import Calibration
from clustertwin.train.params import DEFAULT_PARAMS, RANGES, TrainParams
from tests.conftest import FIXTURES
from tests.fuzz.harness import run, write_yaml

TRAIN = ("train", "estimate", "--gpus", "8", "-b", "16", "--tp", "8", "--zero", "0")
MIXTRAL = ("train", "estimate", "-m", "mixtral-8x7b", "--gpus", "8", "-b", "8", "--tp", "1", "--ep", "8")
#: every timing parameter at the optimistic edge of its (new) range: GEMMs and attention at the full peak, no
#: latency or host overhead, full overlap, perfect balance, no jitter
EDGE = {"gemm_efficiency": 1.0, "fp8_gemm_efficiency_ratio": 1.0, "gemm_k_half": 0.0, "gemm_tiles_half": 0.0,
        "gemm_tile_bytes_per_flop": 0.0, "kernel_latency_s": 0.0, "hbm_efficiency": 1.0, "attention_efficiency": 1.0,
        "attention_fa3_ratio": 1.0, "kernel_host_overhead_s": 0.0, "tp_comm_overlap": 1.0, "overlap_interference": 0.0,
        "zero3_overlap": 1.0, "cp_overlap": 1.0, "moe_a2a_overlap": 1.0, "grouped_gemm_efficiency": 1.0,
        "moe_m_half": 0.0, "moe_sync_latency_s": 0.0, "moe_sync_host_s": 0.0, "moe_imbalance": 1.0,
        "pp_overlap": 1.0, "rank_jitter_cv": 0.0}
#: the campaign's "every parameter at its optimistic edge" (old ranges: imbalance in [0, 1), unbounded ratios)
CAMPAIGN_EDGE = {**EDGE, "moe_imbalance": 1e-12, "attention_fa3_ratio": 100.0, "fp8_gemm_efficiency_ratio": 100.0}


def _refused(tmp_path: Path, cal: dict, *args: str, expect: tuple[str, ...]) -> str:
    path = write_yaml(tmp_path / "physics-cal.yaml", cal)
    r = run("calibration-physics", *args, "--calibration", str(path))
    assert r.code == 2, r.stdout[-400:]
    line = r.stderr.strip().splitlines()[-1]
    assert "physics-cal.yaml" in line, line
    for word in expect:
        assert word in line, (word, line)
    return line


SINGLE = [
    ({"train": {"moe_imbalance": 0}}, ("train.moe_imbalance", "value >= 1")),
    ({"train": {"moe_imbalance": 0.5}}, ("train.moe_imbalance", "load-imbalance")),
    ({"train": {"moe_imbalance": 1e-12, "attention_efficiency": 1.0}}, ("moe_imbalance",)),
    ({"train": {"rank_jitter_cv": 2**53}}, ("train.rank_jitter_cv", "<= 0.2")),
    ({"train": {"rank_jitter_cv": 0.5}}, ("train.rank_jitter_cv",)),
    ({"train": {"hbm_efficiency": 1e-300}}, ("train.hbm_efficiency", "0.01 <= value <= 1")),
    ({"train": {"gemm_efficiency": 1e-300}}, ("train.gemm_efficiency", "at least 0.001")),
    ({"comm": {"network_efficiency": 1.02}}, ("comm.network_efficiency", "less than or equal to 1")),
    ({"comm": {"network_efficiency": 1000}}, ("comm.network_efficiency", "less than or equal to 1")),
]


@pytest.mark.parametrize("cal,expect", SINGLE, ids=[str(c[0]) for c in SINGLE])
def test_out_of_range_parameters_are_refused(tmp_path: Path, cal: dict, expect: tuple[str, ...]) -> None:
    _refused(tmp_path, cal, *TRAIN, expect=expect)


def test_network_efficiency_above_one_is_refused_by_comm_too(tmp_path: Path) -> None:
    _refused(tmp_path, {"comm": {"network_efficiency": 1.02}}, "comm", "all_reduce", "--gpus", "16",
             expect=("comm.network_efficiency",))


PRODUCTS = [
    ({"attention_efficiency": 1.0, "attention_fa3_ratio": 1.5}, ("attention_efficiency", "attention_fa3_ratio")),
    ({"gemm_efficiency": 0.9, "fp8_gemm_efficiency_ratio": 1.5}, ("gemm_efficiency", "fp8_gemm_efficiency_ratio")),
    ({"attention_efficiency": 0.001, "attention_fa3_ratio": 1e-3}, ("attention_fa3_ratio", "0.001 <= product")),
]


@pytest.mark.parametrize("train,expect", PRODUCTS, ids=[str(p[0]) for p in PRODUCTS])
def test_products_of_factors_above_the_peak_are_refused(tmp_path: Path, train: dict, expect: tuple[str, ...]) -> None:
    """An efficiency times its ratio is one kernel's fraction of a peak: in-range factors whose product passes 1."""
    _refused(tmp_path, {"train": train}, *TRAIN, expect=("train:", *expect))
    with pytest.raises(ValidationError):  # built in code, too
        dataclasses.replace(DEFAULT_PARAMS, **train)


def test_the_campaigns_optimistic_edge_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, {"train": CAMPAIGN_EDGE}, *TRAIN, expect=("train",))


@pytest.mark.parametrize("args", [MIXTRAL, ("train", "search", "-m", "mixtral-8x7b", "--gpus", "64", "-b", "512"),
                                  ("train", "scale", "-m", "mixtral-8x7b", "-b", "512")],
                         ids=["estimate", "search", "scale"])
def test_in_range_edges_that_predict_mfu_above_one_are_refused(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Every parameter in range, together above the peak: refused where the estimate is made, so no layout
    above the peak wins a search; the line names the optimistic parameters."""
    line = _refused(tmp_path, {"train": EDGE, "comm": {"nvlink_efficiency": 1.0}}, *args,
                    expect=("train: the calibration predicts MFU", "gemm_efficiency", "above 1"))
    assert "more optimistic than the hardware allows" in line


def test_a_plausible_calibration_still_runs(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "ok.yaml", {"train": {"gemm_efficiency": 0.8, "moe_imbalance": 1.0,
                                                       "rank_jitter_cv": 0.05, "hbm_efficiency": 0.9},
                                             "comm": {"network_efficiency": 1.0}})
    for args in (TRAIN, MIXTRAL, ("train", "search", "-m", "mixtral-8x7b", "--gpus", "64", "-b", "512")):
        r = run("calibration-physics", *args, "--calibration", str(path), "--json")
        assert r.code == 0, r.stderr


def test_train_params_ranges_are_documented() -> None:
    """Each range that is not the kind rule says why in its parameter's docstring (shown in docs/train.md)."""
    import inspect

    src = inspect.getsource(TrainParams)
    for name in RANGES:
        doc = src.split(f"    {name}:", 1)[1].split('"""', 2)[1]
        assert "Range [" in doc or "At least 1" in doc, name
    with pytest.raises(SpecError, match="moe_imbalance"):
        DEFAULT_PARAMS.with_overrides({"moe_imbalance": 0.0})


def _damaged_log(path: Path, factor: float = 1.3) -> Path:
    """The published 2-VM log with the large messages timed ``factor`` x faster than any NIC allows."""
    out = []
    for ln in (FIXTURES / "nccl_tests" / "gcp_a3mega_2node_all_reduce_perf.log").read_text().splitlines():
        tok = ln.split()
        if tok and tok[0].isdigit() and int(tok[0]) >= 2**24:
            tok[5], tok[9] = f"{float(tok[5]) / factor:.1f}", f"{float(tok[9]) / factor:.1f}"
            ln = "  ".join(tok)
        out.append(ln)
    path.write_text("\n".join(out) + "\n")
    return path


def test_calibrate_on_a_damaged_log_is_a_failed_fit(tmp_path: Path) -> None:
    out = tmp_path / "cal.yaml"
    r = run("calibration-physics", "calibrate", "--nccl-tests", str(_damaged_log(tmp_path / "damaged.log")),
            "-c", str(FIXTURES / "nccl_tests" / "gcp-a3mega-2vm.yaml"), "-o", str(out))
    assert r.code == 2
    line = r.stderr.strip().splitlines()[-1]
    assert "failed fit" in line and "comm.network_efficiency came out 1.0" in line and "less than or equal to 1" in line
    assert not out.exists()
    r = run("calibration-physics", "calibrate", "--nccl-tests",
            str(FIXTURES / "nccl_tests" / "gcp_a3mega_2node_all_reduce_perf.log"),
            "-c", str(FIXTURES / "nccl_tests" / "gcp-a3mega-2vm.yaml"), "-o", str(out))
    assert r.code == 0 and 0.9 < yaml.safe_load(out.read_text())["comm"]["network_efficiency"] <= 1.0


@pytest.mark.parametrize("tflops,peak,expect", [(1080.0, 989.0, "train.gemm_efficiency came out 1.092"),
                                                 (0.0005, 989.0, "train.gemm_efficiency came out 5.056e-07")])
def test_node_bench_figures_past_their_bounds_are_not_written(tmp_path: Path, tflops: float, peak: float,
                                                               expect: str) -> None:
    """A GEMM above the catalog peak (or at idle) is a failed calibration, neither clipped nor written."""
    g = bm.GemmResult(precision="bf16", device="cuda:0", n=8192, tflops=tflops, peak_tflops=peak, peak_source="catalog")
    cal = calibration_from_bench(bm.BenchReport(device="cuda:0 (H100)", gpu_catalog_id="h100-sxm", gemm=[g]))
    out = tmp_path / "bench-cal.yaml"
    with pytest.raises(SpecError, match="failed fit") as err:
        write_calibration(cal, str(out))
    assert expect in str(err.value) and not out.exists()
    write_calibration(Calibration(train={"gemm_efficiency": 0.7}), str(out))  # in range: written
    assert out.exists()
