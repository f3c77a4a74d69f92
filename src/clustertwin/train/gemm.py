"""GEMM roofline of the training model (one kernel of ``count`` products (m x k)(k x n)).

    time = max(2mnk / (peak e f_k f_t) + 2mnk x tile_bytes / HBM, operand bytes / HBM) + kernel latency

with the depth roll-off ``f_k = k / (k + k_half)``, the wave roll-off ``f_t = tiles / (tiles + tiles_half)``
(tiles = m n / 128^2) and the tiles' HBM traffic per FLOP (``TrainParams.gemm_*``); FP8 GEMMs use the FP8
peak x ``fp8_gemm_efficiency_ratio``. Forward, data-gradient and weight-gradient shapes are timed
separately (:meth:`Gemm.fwd_bwd`).
"""

from __future__ import annotations

from clustertwin.train.hardware import Hardware
from clustertwin.train.layout import fmax
from clustertwin.train.params import TrainParams

#: bytes per element of 16-bit activations and of FP8 tensors
BF16_BYTES = 2
FP8_BYTES = 1
#: bytes per GEMM operand element for the memory-bound roofline, by precision
GEMM_OPERAND_BYTES = {"fp8": FP8_BYTES, "fp32": 4, "tf32": 4}
#: elements of one GEMM output tile (128 x 128), the unit of work a streaming multiprocessor takes
GEMM_TILE_ELEMENTS = 128 * 128


class Gemm:
    """GEMM time model bound to one hardware/parameter set (see the module docstring)."""

    def __init__(self, hw: Hardware, params: TrainParams, precision: str):
        eff = params.gemm_efficiency * (params.fp8_gemm_efficiency_ratio if precision == "fp8" else 1.0)
        self.rate = hw.peak_flops * eff
        self.rate16 = hw.peak16_flops * params.gemm_efficiency
        self.bw = hw.hbm_bytes_per_s * params.hbm_efficiency
        self.kh = params.gemm_k_half
        self.lat = params.kernel_latency_s
        self.el = GEMM_OPERAND_BYTES.get(precision, BF16_BYTES)
        self.out_el = hw.value_bytes  # output tensor: 16-bit, or FP32 in FP32/TF32 training
        self.tile = params.gemm_tile_bytes_per_flop / BF16_BYTES
        self.th = params.gemm_tiles_half

    def time(self, m, n, k, count=1.0, sixteen_bit: bool = False):
        """Seconds for one (batched or grouped) GEMM kernel of ``count`` products (m x k)(k x n): compute
        at the shape-dependent efficiency plus the tiles' HBM traffic, at least the operands' minimal
        traffic, plus one kernel latency. All ``count`` products share the waves of output tiles."""
        rate = self.rate16 if sixteen_bit else self.rate
        el = BF16_BYTES if sixteen_bit else self.el
        flops = 2.0 * m * n * k * count
        tiles = count * m * n / GEMM_TILE_ELEMENTS
        eff = k / (k + self.kh) * tiles / (tiles + self.th)
        tc = flops / (rate * eff) + flops * el * self.tile / self.bw
        tm = count * (el * (m * k + k * n) + self.out_el * m * n) / self.bw
        return fmax(tc, tm) + self.lat

    def fwd_bwd(self, m, n, k, count=1.0):
        """Forward, data-gradient and weight-gradient times of a linear layer (tokens m, out n, in k)."""
        return self.time(m, n, k, count), self.time(m, k, n, count) + self.time(n, k, m, count)
