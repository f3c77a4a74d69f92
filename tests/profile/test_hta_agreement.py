"""The reader's whole-trace figures agree with HolisticTraceAnalysis's own analyses on public traces: the
temporal breakdown (compute / non-compute / idle) and the communication-computation overlap, within 1%.

HTA (``pip install HolisticTraceAnalysis``, with pandas) is the reference and is imported here only; the
reader itself needs neither."""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path

import pytest

from clustertwin.profile.hta_compat import hta_figures
from clustertwin.profile.kineto import read_kineto
from tests.conftest import FIXTURES

FILES = sorted((FIXTURES / "profile" / "hta").glob("*.json.gz")) + sorted(
    (FIXTURES / "profile" / "tracelens").glob("*.json.gz"))
TOL = 0.01


def _hta(path: Path, tmp: Path) -> tuple[dict[str, float], float | None]:
    hta = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis not installed (pip install "
                              "HolisticTraceAnalysis): the reference of this comparison")
    d = tmp / "trace"
    d.mkdir()
    shutil.copy(path, d / path.name)
    logging.getLogger("hta").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = hta.TraceAnalysis(trace_dir=str(d))
        tb = a.get_temporal_breakdown(visualize=False).iloc[0]
        ov = a.get_comm_comp_overlap(visualize=False).iloc[0]["comp_comm_overlap_pctg"]
    times = {k: float(tb[f"{k}(us)"]) * 1e-6 for k in ("idle_time", "compute_time", "non_compute_time", "kernel_time")}
    return times, None if ov != ov else float(ov) / 100  # NaN: no communication kernels


def _close(ours: float, ref: float, scale: float) -> bool:
    """Within 1% of the reference value, or of 1% of the kernel time for a term that is nearly zero."""
    return abs(ours - ref) <= TOL * max(abs(ref), TOL * scale)


def test_there_are_fixtures():
    assert len(FILES) >= 7, FILES


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_temporal_breakdown_and_overlap_agree_with_hta(path: Path, tmp_path: Path):
    ref, ref_overlap = _hta(path, tmp_path)
    ours = hta_figures(read_kineto(path))
    assert ours is not None
    kt = ref["kernel_time"]
    for key in ("kernel_time", "idle_time", "compute_time", "non_compute_time"):
        assert _close(ours[f"{key}_s"], ref[key], kt), (key, ours[f"{key}_s"], ref[key])
    if ref_overlap is None:
        assert ours["comm_comp_overlap"] is None
    else:
        # HTA prints the percentage with two decimals: 0.005 points of rounding on top of the 1%
        assert abs(ours["comm_comp_overlap"] - ref_overlap) <= TOL * ref_overlap + 5e-5, (
            ours["comm_comp_overlap"], ref_overlap)


def test_the_nccl_traces_exercise_the_overlap():
    with_comm = [p.name for p in FILES if (h := hta_figures(read_kineto(p))) and h["comm_comp_overlap"]]
    assert {"a100x2_nccl_rank0.json.gz", "trace_diff_test.json.gz", "sampled_rank0.json.gz"} <= set(with_comm)
