"""Turn ``node bench`` measurements into a :class:`~clustertwin.specs.Calibration` for the twin.

Each override is a measured fraction of a catalog peak, written under the parameter that means that
fraction, and only when the measurement stands for it:

- ``train.gemm_efficiency`` = achieved GEMM TFLOP/s / dense peak, in the training precision
  (bf16 on a GPU; on a CPU-only host the fp32 GEMM against the estimated host peak, so a calibration
  from such a host describes that host's compute).
- ``train.fp8_gemm_efficiency_ratio`` = (fp8 TFLOP/s / fp8 peak) / gemm_efficiency, when fp8 was measured.
- ``train.hbm_efficiency`` = device copy GB/s / catalog HBM GB/s (GPU only).
- ``comm.nvlink_efficiency`` (NVLink/NVSwitch nodes) or ``comm.pcie_efficiency`` (PCIe nodes) =
  large-message all_reduce busbw over NCCL / per-GPU scale-up bandwidth per direction. gloo between
  CPU processes has no counterpart in the collective model, so it writes no ``comm`` override.

Names are checked against ``CommParams`` and ``TrainParams``. A figure outside its physical range (an
efficiency above 1 or below its floor: the catalog peak or the measurement is wrong) is a failed calibration,
reported by :func:`write_calibration` and never clipped or written (:meth:`Calibration.fit_problem`).
"""

from __future__ import annotations

import datetime as _dt
import platform
from dataclasses import fields

import yaml

from clustertwin import catalog
from clustertwin.comm.params import CommParams
from clustertwin.errors import SpecError
from clustertwin.ops.perf.bench import BenchReport
from clustertwin.specs.calibration import Calibration
from clustertwin.train.params import TrainParams

TRAIN_PRECISION_GPU = "bf16"
TRAIN_PRECISION_CPU = "fp32"
LARGE_MESSAGE_ROWS = 3
"""busbw is taken as the best of the largest this-many sizes (the bandwidth plateau)."""


def calibration_from_bench(report: BenchReport) -> Calibration:
    """The Calibration implied by a bench report (empty sections when nothing maps)."""
    train: dict[str, float] = {}
    comm: dict[str, float] = {}
    notes: list[str] = []
    gemm = {g.precision: g for g in report.gemm}
    prec = TRAIN_PRECISION_GPU if report.gpu_catalog_id else TRAIN_PRECISION_CPU
    g = gemm.get(prec)
    if g is not None and g.pct_of_peak is not None:
        train["gemm_efficiency"] = float(g.tflops / g.peak_tflops)
        notes.append(f"gemm {prec} {g.tflops:.3g} TFLOP/s of {g.peak_tflops:.3g} ({g.peak_source})")
        f8 = gemm.get("fp8")
        if f8 is not None and f8.pct_of_peak is not None and train["gemm_efficiency"] > 0:
            train["fp8_gemm_efficiency_ratio"] = float(f8.tflops / f8.peak_tflops / train["gemm_efficiency"])
    dev = next((m for m in report.memory if m.where == "device" and m.peak_gb_per_s), None)
    if dev is not None:
        train["hbm_efficiency"] = float(dev.gb_per_s / dev.peak_gb_per_s)
        notes.append(f"device copy {dev.gb_per_s:.0f} GB/s of {dev.peak_gb_per_s:.0f}")
    ar = next((c for c in report.collectives if c.op == "all_reduce" and c.backend == "nccl"), None)
    if ar is not None and report.gpu_catalog_id:
        gpu = catalog.get("gpu", report.gpu_catalog_id)
        busbw = max(r.busbw_gb_per_s for r in ar.rows[-LARGE_MESSAGE_ROWS:])
        if gpu.scale_up_gb_per_s > 0:
            comm["nvlink_efficiency"] = float(busbw / gpu.scale_up_gb_per_s)
            notes.append(f"all_reduce busbw {busbw:.1f} GB/s of scale-up {gpu.scale_up_gb_per_s:.0f} GB/s")
        else:
            from clustertwin.units import PCIE_X16_GB_PER_S

            link = PCIE_X16_GB_PER_S.get(gpu.pcie_gen)
            if link:
                comm["pcie_efficiency"] = float(busbw / link)
                notes.append(f"all_reduce busbw {busbw:.1f} GB/s of PCIe Gen{gpu.pcie_gen} x16 {link} GB/s")
    elif report.collectives:
        notes.append("gloo collectives measured; no comm override (the collective model has no gloo path)")
    train_names = {f.name for f in fields(TrainParams)}
    comm_names = set(CommParams.model_fields)
    for name in train:
        if name not in train_names:
            raise SpecError(f"calibration writes unknown training parameter '{name}'")
    for name in comm:
        if name not in comm_names:
            raise SpecError(f"calibration writes unknown comm parameter '{name}'")
    source = (f"clustertwin node bench on {platform.node()}, {report.device}, "
              f"{_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; " + "; ".join(notes))
    gpu = report.gpu_catalog_id or ("cpu" if report.device.startswith("cpu") else report.device)
    return Calibration(comm=comm, train=train, source=source, gpu=gpu)


def write_calibration(cal: Calibration, path: str) -> None:
    """Write a Calibration as YAML (loadable with ``--calibration FILE``); SpecError, and nothing written, when
    a figure lies outside its physical range (:meth:`Calibration.fit_problem`)."""
    import clustertwin.infer.params  # noqa: F401  (registers the infer section's checks)

    problem = cal.fit_problem()
    if problem:
        raise SpecError(f"failed fit: {problem}; {path} not written")
    data = cal.model_dump(mode="json", exclude_defaults=False)
    data = {k: v for k, v in data.items() if v not in ({}, None)}
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False, width=120)
