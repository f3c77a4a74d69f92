"""Deployment (one model replica on ``tp × pp`` GPUs), its memory fit, and the time of one engine
iteration from a per-operator roofline with achieved efficiencies.

One iteration processes ``B`` decoding sequences (one token each, attending to ``ctx_sum`` context
tokens in total) and ``P`` prefill tokens (attending to ``pf_attn`` context tokens in total). Per GPU
and pipeline stage (``L/pp`` layers, weights and heads split ``tp`` ways), with ``T = (B + P)/pp`` tokens
per micro-batch:

- weight GEMMs:  compute ``2·N_active·T/(tp·pp) / (peak_prec·η_gemm)``, memory ``W_read/(tp·pp) / (BW·η_hbm)``
  where ``W_read`` counts dense weights once and MoE experts by the expected number touched,
  ``E·(1 − (1 − k/E)^T)`` per layer;
- attention:     compute ``2·L·a·(d_qk+d_v)·ctx/(tp·pp) / (peak_16·η_attn)``, memory KV read + write;
- each operator: ``t = max(c, m) + (1 − overlap)·min(c, m)`` (``roofline_overlap``; 1 = ideal roofline);
- TP: ``2·L/pp`` all-reduces of ``T·h·2`` bytes; PP: one hand-off per stage;
- fixed costs: ``layer_overhead_us`` per layer, ``step_overhead_ms`` per iteration and
  ``seq_overhead_us`` per sequence that produces a token (host bookkeeping the GPU waits for).

Iteration time = ``pp × stage time + step overhead`` (``pp`` micro-batches in flight keep every stage
busy; a token still crosses every stage, so TPOT is the iteration time). Sources: standard roofline
(Williams et al. 2009), LLM-Viewer (arXiv 2402.16363), GenZ (arXiv 2406.01698).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clustertwin import units
from clustertwin.errors import SpecError
from clustertwin.infer import arch
from clustertwin.infer.comm import allreduce_fn, p2p_fn
from clustertwin.infer.params import InferParams
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.hardware import GPUSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.node import NodeSpec

#: weight precisions accepted by the inference model
WEIGHT_PRECISIONS: tuple[str, ...] = ("fp16", "bf16", "fp8", "int8", "int4", "fp4")


def default_kv_precision(precision: str) -> str:
    """KV-cache precision an engine uses by default: FP8 KV with FP8/FP4 weights (TensorRT-LLM's FP8
    recipe quantises the KV cache too), 16-bit otherwise (INT8/INT4 weight quantisation keeps KV 16-bit)."""
    return "fp8" if precision in ("fp8", "fp4") else "fp16" if precision == "fp16" else "bf16"


def gemm_tflops(gpu: GPUSpec, precision: str, params: InferParams) -> tuple[float, str]:
    """Achieved GEMM TFLOP/s at a weight precision, and the math precision used.

    FP8/INT8/FP4 weights use the matching tensor peak where the GPU has one (FP8 scaled by
    ``fp8_gemm_efficiency_ratio``); otherwise they are weight-only (dequantised to 16-bit math). INT4 is
    weight-only on every GPU here (AWQ/GPTQ) and pays ``int4_dequant_overhead``."""
    p16 = gpu.peak_tflops("bf16") or gpu.peak_tflops("fp16")
    if not p16:
        raise SpecError(f"GPU '{gpu.id or gpu.name}' has no 16-bit tensor peak; cannot model inference")
    eff = params.gemm_efficiency
    if precision in ("fp8", "fp4"):
        pk = gpu.peak_tflops(precision) or (gpu.peak_tflops("fp8") if precision == "fp4" else None)
        if pk:
            return pk * eff * params.fp8_gemm_efficiency_ratio, precision if gpu.peak_tflops(precision) else "fp8"
        return p16 * eff, "bf16"
    if precision == "int8":
        pk = gpu.int8_tops
        return (pk * eff * params.fp8_gemm_efficiency_ratio, "int8") if pk else (p16 * eff, "bf16")
    if precision == "int4":
        return p16 * eff / (1.0 + params.int4_dequant_overhead), "bf16"
    return p16 * eff, "bf16"


@dataclass(frozen=True)
class Memory:
    """Per-GPU memory of a deployment, bytes."""

    hbm_bytes: float
    usable_bytes: float
    weights_bytes: float
    reserve_bytes: float
    kv_budget_bytes: float
    kv_bytes_per_token: float
    """KV-cache bytes one token occupies on one GPU (heads split over TP, layers over PP)."""

    @property
    def kv_capacity_tokens(self) -> float:
        """Tokens of KV cache that fit on the replica (per GPU budget / per GPU bytes per token)."""
        return max(0.0, self.kv_budget_bytes) / self.kv_bytes_per_token

    def to_dict(self) -> dict[str, float]:
        return {"hbm_gib": self.hbm_bytes / units.GIB, "usable_gib": self.usable_bytes / units.GIB,
                "weights_gib": self.weights_bytes / units.GIB, "reserve_gib": self.reserve_bytes / units.GIB,
                "kv_budget_gib": max(0.0, self.kv_budget_bytes) / units.GIB,
                "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token,
                "kv_capacity_tokens": self.kv_capacity_tokens}


@dataclass
class Deployment:
    """One replica: model on ``tp × pp`` GPUs of ``node`` at a weight and KV precision."""

    model: ModelSpec
    node: NodeSpec
    tp: int = 1
    pp: int = 1
    precision: str = "bf16"
    kv_precision: str | None = None
    params: InferParams = field(default_factory=InferParams)
    calibration: Calibration | None = None

    def __post_init__(self) -> None:
        if self.precision not in WEIGHT_PRECISIONS:
            raise SpecError(f"unsupported precision '{self.precision}' (choose from {', '.join(WEIGHT_PRECISIONS)})",
                            path=("precision",))
        if self.tp < 1 or self.pp < 1:
            raise SpecError("tp and pp must be >= 1", path=("tp",))
        if self.tp > self.node.gpus:
            raise SpecError(f"tp={self.tp} exceeds the {self.node.gpus} GPUs of one node's scale-up domain "
                            "(use pp across nodes)", path=("tp",))
        if self.model.heads % self.tp:
            raise SpecError(f"tp={self.tp} does not divide the {self.model.heads} attention heads", path=("tp",))
        if self.pp > self.model.layers:
            raise SpecError(f"pp={self.pp} exceeds the {self.model.layers} layers", path=("pp",))
        if self.kv_precision is None:
            self.kv_precision = default_kv_precision(self.precision)
        arch.kv_bytes_per_elem(self.kv_precision)
        self.shape = arch.shape(self.model)

    @property
    def gpu(self) -> GPUSpec:
        return self.node.gpu

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def memory(self) -> Memory:
        """Per-GPU memory: weights (layer GEMMs at the weight precision, embeddings and output projection
        kept 16-bit as engines do), runtime reserve, and the KV-cache budget
        ``kv_cache_free_mem_fraction × (HBM − weights − reserve)``: a fraction of the memory left after
        weights, as TensorRT-LLM (``kv_cache_free_gpu_mem_fraction``) and vLLM size it."""
        s, p = self.shape, self.params
        wb = arch.weight_bytes_per_elem(self.precision)
        weights = (s.params_linear_total * wb + (s.params_embedding + s.params_lm_head) * 2.0) / self.gpus
        usable = self.gpu.hbm_bytes
        reserve = p.runtime_reserve_gib * units.GIB
        kv_elem = arch.kv_bytes_per_elem(str(self.kv_precision))
        if s.mla:  # the latent is shared by all heads: replicated on every TP rank
            kv_tok = s.kv_elems_per_token * kv_elem / self.pp
        else:  # heads split over TP; with tp > kv_heads each rank still holds one KV head
            kv_tok = s.kv_elems_per_token * kv_elem * max(self.tp, s.kv_heads) / s.kv_heads / self.gpus
        free = usable - weights - reserve
        kv_budget = free * p.kv_cache_free_mem_fraction if free > 0 else free
        return Memory(self.gpu.hbm_bytes, usable, weights, reserve, kv_budget, kv_tok)

    def max_seqs(self, seq_tokens: float | np.ndarray) -> np.ndarray:
        """Concurrent sequences whose whole KV (``seq_tokens`` each, reserved up front as TRT-LLM's
        guaranteed-no-evict scheduler does) fit, capped by ``max_batch_seqs``."""
        mem = self.memory()
        fit = np.floor(mem.kv_capacity_tokens / np.maximum(np.asarray(seq_tokens, dtype=float), 1.0))
        return np.minimum(fit, self.params.max_batch_seqs)

    def check_fits(self) -> None:
        mem = self.memory()
        if mem.kv_budget_bytes <= 0:
            raise SpecError(
                f"{self.model.id or self.model.name} at {self.precision} does not fit on tp={self.tp} x pp={self.pp} "
                f"{self.gpu.id or self.gpu.name}: weights {mem.weights_bytes / units.GIB:.1f} GiB per GPU of "
                f"{mem.usable_bytes / units.GIB:.1f} GiB usable")

    def step_model(self) -> StepModel:
        return StepModel(self)


def _combine(c: Any, m: Any, overlap: float) -> Any:
    """Operator time from compute and memory time: ``max + (1 − overlap)·min``."""
    return np.maximum(c, m) + (1.0 - overlap) * np.minimum(c, m)


class StepModel:
    """Iteration-time model of a deployment with precomputed coefficients (see module docstring)."""

    def __init__(self, dep: Deployment) -> None:
        s, p, gpu = dep.shape, dep.params, dep.gpu
        self.dep = dep
        tp, pp, n = dep.tp, dep.pp, dep.gpus
        self.tp, self.pp = tp, pp
        gemm, self.math_precision = gemm_tflops(gpu, dep.precision, p)
        self.gemm_flops_s = gemm * units.TFLOP
        p16 = float(gpu.peak_tflops("bf16") or gpu.peak_tflops("fp16") or 0.0)
        self.lm_flops_s = p16 * p.gemm_efficiency * units.TFLOP
        self.attn_flops_s = p16 * p.attention_efficiency * units.TFLOP
        self.bw = gpu.hbm_gb_per_s * units.GB * p.hbm_efficiency
        wb = arch.weight_bytes_per_elem(dep.precision)
        # per GPU, per stage (each stage holds 1/pp of the layers)
        self.c_gemm = 2.0 * s.params_linear_active / n / self.gemm_flops_s        # s per token
        self.c_lm = 2.0 * s.params_lm_head / n / self.lm_flops_s                   # s per logit token
        self.m_dense = s.params_linear_dense * wb / n / self.bw                    # s per stage step
        self.m_expert_all = s.moe_layers * s.experts * s.params_expert * wb / n / self.bw
        self.k_over_e = (s.top_k / s.experts) if s.experts else 0.0
        self.m_lm = s.params_lm_head * 2.0 / n / self.bw
        self.c_attn = s.attn_flops_per_ctx_token / n / self.attn_flops_s          # s per ctx token
        self.m_kv = dep.memory().kv_bytes_per_token / self.bw                     # s per token of KV
        self.layers_stage = s.layers / pp
        self.overhead_stage = self.layers_stage * p.layer_overhead_us * units.US
        self.step_overhead = p.step_overhead_ms * units.MS
        self.seq_overhead = p.seq_overhead_us * units.US
        self.overlap = p.roofline_overlap
        self.act_bytes_per_token = s.hidden * arch.ACT_BYTES
        self._allreduce = allreduce_fn(dep.node, tp, p, dep.calibration)
        self._p2p = p2p_fn(dep.node, tp, pp, p)
        # all-reduce table over tokens per micro-batch, for fast scalar lookups in the simulator
        self._ar_tokens = np.unique(np.round(np.geomspace(1, 2**20, 241)))
        self._ar_s = np.asarray(self._allreduce(self._ar_tokens * self.act_bytes_per_token), dtype=float)
        self._p2p_s = np.asarray(self._p2p(self._ar_tokens * self.act_bytes_per_token), dtype=float)

    def _comm(self, tokens_mb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = np.maximum(tokens_mb, 1.0)
        ar = np.interp(np.log(t), np.log(self._ar_tokens), self._ar_s)
        pp = np.interp(np.log(t), np.log(self._ar_tokens), self._p2p_s)
        if self.tp <= 1:
            ar = np.zeros_like(ar)
        if self.pp <= 1:
            pp = np.zeros_like(pp)
        return ar, pp

    def breakdown(self, decode_seqs: Any, ctx_sum: Any, prefill_tokens: Any = 0.0, prefill_attn: Any = 0.0,
                  logits: Any = None) -> dict[str, np.ndarray]:
        """Iteration time and its parts, seconds (numpy-vectorised over all arguments).

        ``decode_seqs`` B, ``ctx_sum`` Σ context of decoding sequences, ``prefill_tokens`` P,
        ``prefill_attn`` Σ attended context of prefill tokens, ``logits`` tokens that run the output
        projection (default B)."""
        B = np.asarray(decode_seqs, dtype=float)
        ctx = np.asarray(ctx_sum, dtype=float)
        P = np.asarray(prefill_tokens, dtype=float)
        pfa = np.asarray(prefill_attn, dtype=float)
        lg = B if logits is None else np.asarray(logits, dtype=float)
        pp = self.pp
        T = (B + P) / pp  # tokens per micro-batch
        touched = 1.0 - np.power(1.0 - self.k_over_e, T) if self.k_over_e else np.zeros_like(T)
        g_c = self.c_gemm * T + self.c_lm * lg / pp
        g_m = np.where(T > 0, self.m_dense + self.m_expert_all * touched + self.m_lm, 0.0)
        gemm = _combine(g_c, g_m, self.overlap)
        a_c = self.c_attn * (ctx + pfa) / pp
        a_m = self.m_kv * (ctx + B + P) / pp
        attn = _combine(a_c, a_m, self.overlap)
        ar, p2p = self._comm(T)
        tp_comm = 2.0 * self.layers_stage * ar * (T > 0)
        pp_comm = p2p * (T > 0)
        ovh = self.overhead_stage * (T > 0)
        stage = gemm + attn + tp_comm + pp_comm + ovh
        host = (self.step_overhead + self.seq_overhead * lg) * ((B + P) > 0)
        total = pp * stage + host
        return {
            "total_s": total,
            "gemm_compute_s": pp * g_c, "gemm_memory_s": pp * g_m, "gemm_s": pp * gemm,
            "attention_compute_s": pp * a_c, "attention_memory_s": pp * a_m, "attention_s": pp * attn,
            "tp_comm_s": pp * tp_comm, "pp_comm_s": pp * pp_comm,
            "overhead_s": pp * ovh + host,
        }

    def time(self, decode_seqs: Any, ctx_sum: Any, prefill_tokens: Any = 0.0, prefill_attn: Any = 0.0,
             logits: Any = None) -> np.ndarray:
        """Iteration time, seconds (vectorised)."""
        return self.breakdown(decode_seqs, ctx_sum, prefill_tokens, prefill_attn, logits)["total_s"]

    def scalar_fn(self):
        """A fast pure-Python ``(B, ctx_sum, P, prefill_attn, logits) -> seconds`` for the simulator
        (same formula as :meth:`breakdown`, no numpy per call)."""
        import bisect

        pp, ov = self.pp, 1.0 - self.overlap
        c_gemm, c_lm, m_dense, m_exp, koe, m_lm = (self.c_gemm, self.c_lm, self.m_dense, self.m_expert_all,
                                                  self.k_over_e, self.m_lm)
        c_attn, m_kv, L2 = self.c_attn, self.m_kv, 2.0 * self.layers_stage
        ovh, step_ovh, seq_ovh = self.overhead_stage, self.step_overhead, self.seq_overhead
        toks = self._ar_tokens.tolist()
        ar_s = self._ar_s.tolist() if self.tp > 1 else [0.0] * len(toks)
        p2p_s = self._p2p_s.tolist() if self.pp > 1 else [0.0] * len(toks)
        log_toks = [math.log(t) for t in toks]
        n_tab = len(toks)

        def lookup(tab: list[float], t: float) -> float:
            if t <= toks[0]:
                return tab[0]
            i = bisect.bisect_left(toks, t)
            if i >= n_tab:
                return tab[-1]
            lt = math.log(t)
            w = (lt - log_toks[i - 1]) / (log_toks[i] - log_toks[i - 1])
            return tab[i - 1] + w * (tab[i] - tab[i - 1])

        def f(B: float, ctx: float, P: float, pfa: float, lg: float) -> float:
            T = (B + P) / pp
            if T <= 0:
                return 0.0
            gc = c_gemm * T + c_lm * lg / pp
            gm = m_dense + m_lm + (m_exp * (1.0 - (1.0 - koe) ** T) if koe else 0.0)
            gemm = max(gc, gm) + ov * min(gc, gm)
            ac = c_attn * (ctx + pfa) / pp
            am = m_kv * (ctx + B + P) / pp
            attn = max(ac, am) + ov * min(ac, am)
            stage = gemm + attn + L2 * lookup(ar_s, T) + lookup(p2p_s, T) + ovh
            return pp * stage + step_ovh + seq_ovh * lg

        if self.tp > 1 or pp > 1:
            return f

        def f1(B: float, ctx: float, P: float, pfa: float, lg: float) -> float:
            """``f`` for tp = pp = 1 (no communication terms), the simulator's common case."""
            T = B + P
            if T <= 0:
                return 0.0
            gc = c_gemm * T + c_lm * lg
            gm = m_dense + m_lm + (m_exp * (1.0 - (1.0 - koe) ** T) if koe else 0.0)
            gemm = (gc if gc > gm else gm) + ov * (gm if gc > gm else gc)
            ac = c_attn * (ctx + pfa)
            am = m_kv * (ctx + T)
            attn = (ac if ac > am else am) + ov * (am if ac > am else ac)
            return gemm + attn + ovh + step_ovh + seq_ovh * lg

        return f1
