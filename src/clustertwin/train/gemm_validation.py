"""Evaluator of the validation kind ``gemm`` (format: validation/README.md): one GEMM kernel as a profiler
trace measured it, timed with the training model's :class:`~clustertwin.train.gemm.Gemm`.

Case keys: ``gpu`` (catalog id or inline GPU spec), ``op`` (the aten op: ``aten::mm``, ``aten::addmm``,
``aten::bmm``, ``aten::baddbmm``), ``batch`` (products in the kernel; 1 for mm/addmm), ``m``, ``n``, ``k``
(the product (m x k)(k x n), row-major as PyTorch stores it), ``dtype`` (``bf16``, ``fp16``, ``fp32``,
``tf32``, ``fp8``). Predicted keys: ``kernel_us`` and ``tflops`` = 2 batch m n k / kernel time (the trace
tools' convention), with the fraction of the dense peak and whether the shape takes the aligned path.
"""

from __future__ import annotations

from typing import Any

from clustertwin import specs
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.train.gemm import Gemm, aligned
from clustertwin.train.hardware import kernel_hardware
from clustertwin.train.params import DEFAULT_PARAMS, TrainParams

CASE_KEYS = frozenset({"id", "kind", "source", "notes", "measured", "gpu", "op", "batch", "m", "n", "k", "dtype"})
#: aten ops a case may name (a bias add or a scaled accumulate is an epilogue of the same kernel)
OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"})
DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8")


def _positive_int(case: dict[str, Any], key: str, default: int | None = None) -> int:
    raw = case.get(key, default)
    if raw is None:
        raise SpecError("required field missing", path=(key,))
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw != int(raw) or raw < 1:
        raise SpecError(f"expected a whole number >= 1 (got {raw!r})", path=(key,))
    return int(raw)


def gemm_time_s(gpu: specs.GPUSpec, dtype: str, batch: int, m: int, n: int, k: int,
                params: TrainParams = DEFAULT_PARAMS) -> float:
    """Seconds of one GEMM kernel of ``batch`` products (m x k)(k x n) on ``gpu`` at ``dtype``."""
    g = Gemm(kernel_hardware(gpu, dtype), params, dtype)
    return g.time(m, n, k, batch, aligned=aligned(n, k))


def evaluate(case: dict[str, Any]) -> dict[str, Any]:
    """Predicted ``kernel_us`` and ``tflops`` of one measured GEMM kernel."""
    unknown = sorted(set(case) - CASE_KEYS)
    if unknown:
        raise SpecError(f"unknown key '{unknown[0]}'{did_you_mean(unknown[0], CASE_KEYS)}", path=(unknown[0],))
    if "gpu" not in case:
        raise SpecError("required field missing", path=("gpu",))
    try:
        gpu = specs.load(specs.GPUSpec, case["gpu"], kind="gpu")
    except SpecError as e:
        raise e.with_context(prefix=("gpu",)) from None
    op = str(case.get("op", "aten::mm"))
    if op not in OPS:
        raise SpecError(f"unknown op '{op}'{did_you_mean(op, OPS)}; expected one of {', '.join(sorted(OPS))}",
                        path=("op",))
    dtype = str(case.get("dtype", "bf16")).lower()
    if dtype not in DTYPES:
        raise SpecError(f"unknown dtype '{dtype}'{did_you_mean(dtype, DTYPES)}; expected one of "
                        f"{', '.join(DTYPES)}", path=("dtype",))
    batch = _positive_int(case, "batch", 1)
    m, n, k = (_positive_int(case, key) for key in ("m", "n", "k"))
    hw = kernel_hardware(gpu, dtype)
    t = gemm_time_s(gpu, dtype, batch, m, n, k)
    tflops = 2.0 * batch * m * n * k / t / 1e12
    return {"kernel_us": round(t * 1e6, 3), "tflops": round(tflops, 2),
            "fraction_of_peak": round(tflops * 1e12 / hw.peak_flops, 3), "aligned": aligned(n, k)}
