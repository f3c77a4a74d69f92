"""GEMM kernel time of the training model: one kernel of ``count`` products (m x k)(k x n), tiled the way
cuBLAS / hipBLASLt / CUTLASS kernels tile it.

A kernel splits the output into tiles of Tm x Tn (optionally each reduction into ``s`` split-K slices) and
runs them in waves of one tile per SM (CU on AMD):

    tiles = count ceil(m / Tm) ceil(n / Tn) s,    waves = ceil(tiles / SMs)                  (wave quantisation)
    t_tile = 2 Tm Tn (ceil(k / s) + k0) / (R eta / SMs) + t0
    eta = min(1, (Tm Tn / (Tm + Tn)) / reuse)          (operand reuse of the tile: small tiles starve the MMAs)
    t_compute = min over tile shapes and split-K of  waves t_tile + [s > 1] 8 s count m n / HBM   (FP32 partials)
              + 2 m n k count x el x tile_bytes / HBM                        (the tiles' L2-miss traffic)
    t_memory = count (el (m k + k n) + out_el m n) / HBM                              (memory-bound roofline)
    time = max(t_compute, t_memory) / (u if a leading dimension is unaligned) + kernel latency

``R`` = dense peak x ``gemm_kernel_efficiency`` x the GPU's ``gemm_efficiency_ratio`` (FP8: x
``fp8_gemm_efficiency_ratio``), ``k0`` = ``gemm_tile_k0`` (a tile's prologue and epilogue as reduction
depth: a lone tile's efficiency is k / (k + k0)), ``t0`` = ``gemm_tile_prologue_s`` (a tile's pipeline fill:
first operand loads before the first MMA), ``reuse`` = ``gemm_tile_reuse``, ``tile_bytes`` =
``gemm_kernel_tile_bytes_per_flop`` / 2 per operand byte (so GPUs with more FLOP/s per byte/s of HBM, H100 against
A100, sustain a smaller fraction of their peak), HBM = bandwidth x ``hbm_efficiency``, ``u`` =
``gemm_unaligned_efficiency``: a GEMM whose n or k (the row-major leading dimensions) is not a multiple of 8
elements (16 bytes) cannot use TMA / 128-bit vector loads and runs on a narrower-load path; training shapes
are aligned (Megatron pads the vocabulary to a multiple of 128 x TP; hidden sizes are multiples of 64), so
only callers that pass ``aligned=False`` see it. The tile menu is that of cuBLAS/CUTLASS SM90 and hipBLASLt
kernels (128 x 256 down to 64 x 16 for skinny outputs); the library's heuristic is modelled as picking the
fastest. A GPU without an SM count in the catalog gets no wave quantisation (all SMs busy) and no per-tile
fill. Forward, data-gradient and weight-gradient shapes are timed separately (:meth:`Gemm.fwd_bwd`). Fitted
on validation/gemm.yaml (kernel times of real profiler traces, H100 SXM and MI300X).

This tiled model times lone kernels (``Hardware.tiled_gemm``: the ``gemm`` validation kind). The training
step keeps the smooth roll-offs it was calibrated with (:meth:`Gemm._step_time`): with the tiled model and
one training-load factor, large training GEMMs can be held at their calibrated rate (0.67 of peak on H100),
but the Llama 3 405B and NeMo Llama 3 8B H100 cases move apart by ~0.2% and their calibration tests fail,
so the step model moves to it only with a re-fit of the training set.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from clustertwin.train.hardware import Hardware
from clustertwin.train.layout import fmax
from clustertwin.train.params import TrainParams

#: bytes per element of 16-bit activations and of FP8 tensors
BF16_BYTES = 2
FP8_BYTES = 1
#: bytes per GEMM operand element for the memory-bound roofline, by precision
GEMM_OPERAND_BYTES = {"fp8": FP8_BYTES, "fp32": 4, "tf32": 4}
#: output tile shapes (Tm, Tn) of the kernel menu: CUTLASS/cuBLAS SM90 and hipBLASLt macro tiles
GEMM_TILES: tuple[tuple[int, int], ...] = ((128, 256), (256, 128), (128, 128), (128, 64), (64, 128), (64, 64),
                                           (64, 16))
#: largest split-K factor (cuBLAS and hipBLASLt split a reduction into at most 16 slices for small outputs)
GEMM_MAX_SPLIT_K = 16
#: leading dimensions must be multiples of this many elements (16 bytes of 16-bit data) for the fast path;
#: dimensions below it are vectors (GEMV kernels)
GEMM_ALIGN_ELEMENTS = 8
#: bytes per FP32 partial sum of split-K (written once, read back once by the reduction)
SPLIT_K_PARTIAL_BYTES = 2 * 4

_TM = np.array([t[0] for t in GEMM_TILES], dtype=float)
_TN = np.array([t[1] for t in GEMM_TILES], dtype=float)


def aligned(n: float, k: float) -> bool:
    """Whether a row-major GEMM's leading dimensions n and k take the 16-byte-aligned fast path (each a
    multiple of :data:`GEMM_ALIGN_ELEMENTS`, or a vector dimension below it)."""
    return all(d < GEMM_ALIGN_ELEMENTS or d % GEMM_ALIGN_ELEMENTS == 0 for d in (n, k))


class Gemm:
    """GEMM time model bound to one hardware/parameter set (see the module docstring)."""

    def __init__(self, hw: Hardware, params: TrainParams, precision: str):
        self.tiled = hw.tiled_gemm
        ratio, e = ((hw.gemm_efficiency_ratio, params.gemm_kernel_efficiency) if self.tiled
                    else (1.0, params.gemm_efficiency))
        self.rate = hw.peak_flops * e * ratio * (params.fp8_gemm_efficiency_ratio if precision == "fp8" else 1.0)
        self.rate16 = hw.peak16_flops * e * ratio
        self.kh, self.th = params.gemm_k_half, params.gemm_tiles_half
        self.bw = hw.hbm_bytes_per_s * params.hbm_efficiency
        self.k0 = params.gemm_tile_k0
        self.lat = params.kernel_latency_s
        self.el = GEMM_OPERAND_BYTES.get(precision, BF16_BYTES)
        self.out_el = hw.value_bytes  # output tensor: 16-bit, or FP32 in FP32/TF32 training
        self.tile = (params.gemm_kernel_tile_bytes_per_flop if self.tiled else params.gemm_tile_bytes_per_flop) \
            / BF16_BYTES
        self.sms = hw.sm_count
        self.t0 = params.gemm_tile_prologue_s if hw.sm_count else 0.0
        self.unaligned = params.gemm_unaligned_efficiency
        # rate fraction of each tile shape (operand reuse Tm Tn / (Tm + Tn) against the reuse the MMAs need)
        reuse = params.gemm_tile_reuse
        self.eta = np.minimum(1.0, _TM * _TN / (_TM + _TN) / reuse) if reuse > 0 else np.ones(len(_TM))

    def time(self, m, n, k, count=1.0, sixteen_bit: bool = False, aligned: bool = True):
        """Seconds for one (batched or grouped) GEMM kernel of ``count`` products (m x k)(k x n) (module
        docstring); ``sixteen_bit`` times it at the 16-bit rate and operand size whatever the training
        precision (attention GEMMs). Scalars are cached; arrays (the layout search) are vectorised."""
        rate = self.rate16 if sixteen_bit else self.rate
        el = BF16_BYTES if sixteen_bit else self.el
        if not self.tiled:
            return self._step_time(rate, el, m, n, k, count)
        if all(isinstance(v, (int, float)) for v in (m, n, k, count)):
            return _scalar_time(self._consts(rate, el), float(m), float(n), float(k), float(count), aligned)
        return self._array_time(rate, el, m, n, k, count, aligned)

    def _step_time(self, rate, el, m, n, k, count):
        """The training step's GEMM time (``Hardware.tiled_gemm`` False): the smooth roll-offs the training
        calibration set was fitted with, ``2mnk / (R k / (k + gemm_k_half) x t / (t + gemm_tiles_half))`` (t =
        m n count / 128^2 output tiles) plus the tiles' traffic at ``gemm_tile_bytes_per_flop``, at least the
        operands' traffic, plus the kernel latency."""
        flops = 2.0 * m * n * k * count
        tiles = count * m * n / (128 * 128)
        tc = flops / (rate * (k / (k + self.kh) * tiles / (tiles + self.th))) + flops * el * self.tile / self.bw
        tm = count * (el * (m * k + k * n) + self.out_el * m * n) / self.bw
        return fmax(tc, tm) + self.lat

    def _consts(self, rate: float, el: float) -> tuple:
        return (rate, el, self.bw, self.k0, self.lat, self.out_el, self.sms, self.t0,
                tuple(self.eta.tolist()), self.unaligned, self.tile)

    def _array_time(self, rate, el, m, n, k, count, is_aligned: bool):
        m, n, k, count = (np.asarray(v, dtype=float)[..., None] for v in (m, n, k, count))
        base = count * np.ceil(m / _TM) * np.ceil(n / _TN)
        flops_tile = 2.0 * _TM * _TN
        if self.sms:
            rsm = rate * self.eta / self.sms
            tc = np.ceil(base / self.sms) * (flops_tile * (k + self.k0) / rsm + self.t0)
            split = np.clip(2.0 ** np.floor(np.log2(np.maximum(self.sms / base, 1.0))), 1.0, GEMM_MAX_SPLIT_K)
            ts = np.ceil(base * split / self.sms) * (flops_tile * (np.ceil(k / split) + self.k0) / rsm + self.t0)
            ts = ts + np.where(split > 1, SPLIT_K_PARTIAL_BYTES * split * count * m * n / self.bw, 0.0)
            tc = np.minimum(tc, ts)
        else:
            tc = base * flops_tile * (k + self.k0) / (rate * self.eta)
        tc = tc.min(axis=-1)
        m, n, k, count = m[..., 0], n[..., 0], k[..., 0], count[..., 0]
        tc = tc + 2.0 * m * n * k * count * el * self.tile / self.bw
        tm = count * (el * (m * k + k * n) + self.out_el * m * n) / self.bw
        t = fmax(tc, tm)
        return (t if is_aligned else t / self.unaligned) + self.lat

    def fwd_bwd(self, m, n, k, count=1.0):
        """Forward, data-gradient and weight-gradient times of a linear layer (tokens m, out n, in k)."""
        return self.time(m, n, k, count), self.time(m, k, n, count) + self.time(n, k, m, count)


@lru_cache(maxsize=65536)
def _scalar_time(consts: tuple, m: float, n: float, k: float, count: float, is_aligned: bool) -> float:
    """:meth:`Gemm.time` of one shape in plain floats (the same formula as the array path)."""
    rate, el, bw, k0, lat, out_el, sms, t0, etas, unaligned, tile = consts
    best = math.inf
    for (tm_, tn_), eta in zip(GEMM_TILES, etas, strict=True):
        base = count * math.ceil(m / tm_) * math.ceil(n / tn_)
        flops_tile = 2.0 * tm_ * tn_
        if not sms:
            best = min(best, base * flops_tile * (k + k0) / (rate * eta))
            continue
        rsm = rate * eta / sms
        best = min(best, math.ceil(base / sms) * (flops_tile * (k + k0) / rsm + t0))
        split = min(2.0 ** math.floor(math.log2(max(sms / base, 1.0))), GEMM_MAX_SPLIT_K) if base > 0 else 1.0
        if split > 1:
            ts = math.ceil(base * split / sms) * (flops_tile * (math.ceil(k / split) + k0) / rsm + t0)
            best = min(best, ts + SPLIT_K_PARTIAL_BYTES * split * count * m * n / bw)
    best += 2.0 * m * n * k * count * el * tile / bw
    t = max(best, count * (el * (m * k + k * n) + out_el * m * n) / bw)
    return (t if is_aligned else t / unaligned) + lat
