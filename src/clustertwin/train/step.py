"""Step time of a training layout, with a breakdown (vectorised over layouts).

For one micro-batch on the busiest pipeline stage, every transformer layer costs

    layer = max(host, gpu)
    gpu   = GEMMs + attention core + element-wise + exposed TP / CP / EP communication
    host  = kernels x kernel_host_overhead_s           (framework dispatch; the GPU idles when faster)

* a GEMM (m x k) @ (k x n) takes
  ``max(2mnk / (peak e f_k f_t) + 2mnk x tile_bytes / HBM, operand bytes / HBM) + kernel latency`` with
  the depth roll-off ``f_k = k/(k + k_half)``, the wave roll-off ``f_t = tiles/(tiles + tiles_half)``
  (tiles = m n / 128^2) and the tiles' HBM traffic per FLOP; forward, data-gradient and weight-gradient
  shapes separately; FP8 GEMMs use the FP8 peak x ``fp8_gemm_efficiency_ratio``;
* attention: flash attention at ``attention_efficiency`` of the 16-bit peak with the causal half of the
  scores skipped (backward = 2.5x forward), or Megatron's unfused path: batched GEMMs of depth
  head_dim / seq plus 13 (forward) and 17 (backward) bytes of memory traffic per score;
* element-wise kernels (norms, bias-dropout-residual, activations, rotary/transposes, FP8 casts, MoE
  permutation) move bytes at ``hbm_efficiency`` x HBM bandwidth; backward moves twice the forward;
* recompute: ``full`` re-runs the layer forward, ``selective`` the attention core;
* TP: two all-reduces (with sequence parallelism two all-gather + reduce-scatter pairs) of the layer's
  activations per forward, backward and recomputed forward, ``1 - tp_comm_overlap`` exposed on the
  Transformer-Engine stack (all exposed on the older stack, ``TrainParams.te_stack_min_year``);
  CP: ring exchange of K and V (forward) and of K, V and their gradients (backward), hidden behind the
  attention core up to ``cp_overlap``; EP: dispatch + combine all-to-all per MoE layer and pass.

The stage adds the output layer and loss (last stage; the loss streams ``LOSS_BYTES_PER_LOGIT``
bytes per logit through HBM) or embedding (first stage) and pipeline send/recv. With m micro-batches,
p stages and v virtual chunks, stage times t_i and the slowest stage t_max = layers + output layer:

    pipe   = sum_i t_i + (m - 1) t_max = m t_max + (p - 1)/v x (t_max - output layer) + embedding
    step   = pipe x (1 + straggler_per_doubling x log2(nodes))
             + exposed DP gradient reduce (+ ZeRO parameter gathers) + optimizer

(the first micro-batch crosses every stage, the others follow at the slowest stage's pace; with equal
stages the bubble is Narayanan et al. 2021's (p - 1)/(m v) of the pipelined time).

DP reduction (all-reduce; reduce-scatter + parameter all-gather with ZeRO 1-2; the last gradient
reduce-scatter with ZeRO-3) overlaps the last micro-batch's backward up to ``dp_overlap``; ZeRO-3
gathers the weights for every micro-batch's forward and backward, hidden up to ``zero3_overlap``; the
optimizer streams ``OPTIMIZER_BYTES_MOVED`` bytes per local parameter through HBM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.train import flops as F
from clustertwin.train.collectives import collective_time
from clustertwin.train.layout import (
    LAYOUT_FIELDS,
    RECOMPUTE_CODES,
    Layouts,
    as_float,
    ceil,
    fmax,
    fmin,
    log2,
    where,
)
from clustertwin.train.memory import memory_arrays, stage_shapes
from clustertwin.train.params import TrainParams
from clustertwin.units import GB, TFLOP

#: bytes per element of 16-bit activations and of FP8 tensors
BF16_BYTES = 2
FP8_BYTES = 1
#: bytes per GEMM operand element for the memory-bound roofline, by precision
GEMM_OPERAND_BYTES = {"fp8": FP8_BYTES, "fp32": 4, "tf32": 4}
#: elements of one GEMM output tile (128 x 128), the unit of work a streaming multiprocessor takes
GEMM_TILE_ELEMENTS = 128 * 128
#: causal attention: flash kernels skip the masked upper triangle of the score blocks
CAUSAL_WORK_FRACTION = 0.5
#: flash-attention backward runs 5 GEMMs per block against 2 in the forward (Dao 2023)
FLASH_BWD_FACTOR = 2.5
#: unfused attention: bytes per score element moved by scale-mask-softmax, dropout and the
#: batched GEMMs' score reads/writes (forward: write 2, softmax 2+2, dropout 2+2+1 mask, bmm read 2;
#: backward: the same chain in reverse plus the dS write and reads by two GEMMs)
UNFUSED_SCORE_BYTES_FWD = 13
UNFUSED_SCORE_BYTES_BWD = 17
#: backward element-wise traffic relative to the forward (read input and output grad, write grad)
BWD_ELEMENTWISE_FACTOR = 2.0
#: element-wise bytes per token in the forward pass: two norms (read + write h), two
#: bias-dropout-residual kernels (read 2 tensors, write 1, mask), per unit of hidden width
NORM_BYTES_PER_H = 2 * 2 * BF16_BYTES
RESIDUAL_BYTES_PER_H = 2 * (3 * BF16_BYTES + 1)
#: QKV post-processing (bias, rotary, head transposes): read + write the q + 2kv projection
QKV_POST_BYTES = 2 * BF16_BYTES
#: FP8 cast of a GEMM input: read 16-bit, write 8-bit (+ the transposed copy for backward)
FP8_CAST_BYTES = BF16_BYTES + 2 * FP8_BYTES
#: MoE token permutation and un-permutation: read + write each routed copy, twice
MOE_PERMUTE_BYTES_PER_H = 2 * 2 * BF16_BYTES
#: output layer loss: bytes per logit over forward and backward of Megatron's vocab-parallel
#: cross-entropy (the default, unfused path of Megatron-LM, Megatron-DeepSpeed and Megatron-Core),
#: which works on an fp32 copy of the 16-bit logits: forward cast to fp32 (read 2 + write 4), max
#: (read 4), subtract the max (4 + 4), exp (4 + 4), sum (read 4), divide by the sum (4 + 4) = 38;
#: backward scale the saved softmax by the loss gradient (4 + 4) and cast the gradient back to 16 bit
#: (4 + 2) = 14. Fused cross-entropy kernels (NeMo's ``cross_entropy_loss_fusion``) move fewer.
LOSS_BYTES_PER_LOGIT = 38 + 14
#: kernels per transformer layer forward (Megatron GPT layer: norms, GEMMs, bias/rotary/transposes,
#: dropout-residual; unfused attention adds baddbmm, softmax, dropout, bmm and a copy)
KERNELS_FWD_BASE = 14
KERNELS_UNFUSED_ATTENTION = 5
KERNELS_FLASH_ATTENTION = 1
KERNELS_FP8_CASTS = 6
KERNELS_MOE_EXTRA = 10
KERNELS_PER_TP_COLLECTIVE = 1
KERNELS_LOGITS = 12
KERNELS_P2P = 4
#: backward kernels per forward kernel
BWD_KERNEL_FACTOR = 2
#: bytes of gradient communicated per parameter (16-bit reduction)
GRAD_COMM_BYTES = 2
#: bytes of parameters gathered per parameter (16-bit)
PARAM_COMM_BYTES = 2
#: Adam step traffic per local parameter: read fp32 grad (4), read+write fp32 master, m, v (24),
#: write 16-bit weight (2)
OPTIMIZER_BYTES_MOVED = 30


@dataclass(frozen=True)
class Hardware:
    """Per-GPU rates the model uses."""

    peak_flops: float
    """Dense peak at the GEMM precision, FLOP/s."""
    peak16_flops: float
    """Dense 16-bit peak (attention kernels), FLOP/s."""
    hbm_bytes_per_s: float
    hbm_bytes: float
    flash: bool
    """Transformer-Engine stack (flash attention, TP overlap); see ``TrainParams.te_stack_min_year``."""
    gpus_per_node: int


def hardware(cluster: ClusterSpec, precision: str, params: TrainParams) -> Hardware:
    """Peak rates of the cluster's GPU for ``precision``; SpecError if the GPU lacks that precision."""
    gpu = cluster.node.gpu
    peak = gpu.peak_tflops(precision)
    if not peak:
        raise SpecError(f"GPU '{gpu.id or gpu.name}' has no {precision} tensor peak", path=("precision",))
    p16 = gpu.peak_tflops("bf16") or gpu.peak_tflops("fp16") or peak
    year = gpu.release_year
    flash = year is None or year >= params.te_stack_min_year
    return Hardware(peak_flops=peak * TFLOP, peak16_flops=p16 * TFLOP, hbm_bytes_per_s=gpu.hbm_gb_per_s * GB,
                    hbm_bytes=gpu.hbm_bytes, flash=flash, gpus_per_node=cluster.node.gpus)


class _Gemm:
    """GEMM time model bound to one hardware/parameter set:
    ``max(2mnk / (peak e f_k f_t) + 2mnk x tile bytes/FLOP / HBM, operand bytes / HBM) + latency`` with
    ``f_k = k / (k + k_half)`` and ``f_t = tiles / (tiles + tiles_half)``, tiles = m n / 128^2."""

    def __init__(self, hw: Hardware, params: TrainParams, precision: str):
        eff = params.gemm_efficiency * (params.fp8_gemm_efficiency_ratio if precision == "fp8" else 1.0)
        self.rate = hw.peak_flops * eff
        self.rate16 = hw.peak16_flops * params.gemm_efficiency
        self.bw = hw.hbm_bytes_per_s * params.hbm_efficiency
        self.kh = params.gemm_k_half
        self.lat = params.kernel_latency_s
        self.el = GEMM_OPERAND_BYTES.get(precision, BF16_BYTES)
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
        tm = count * (el * (m * k + k * n) + BF16_BYTES * m * n) / self.bw
        return fmax(tc, tm) + self.lat

    def fwd_bwd(self, m, n, k, count=1.0):
        """Forward, data-gradient and weight-gradient times of a linear layer (tokens m, out n, in k)."""
        return self.time(m, n, k, count), self.time(m, k, n, count) + self.time(n, k, m, count)


@F.cached
def _model_consts(model: ModelSpec, seq_len: int) -> dict[str, float]:
    pc = F.param_counts(model)
    q = model.heads * model.d_head
    w = F.attention_widths(model)
    return {"h": model.hidden, "q": q, "qk": w.qk, "v": w.v, "kv_pair": w.kv_pair, "latent": w.latent,
            "f": model.d_ffn, "gate": 2 if model.ffn == "swiglu" else 1,
            "span": F.attention_span(model, seq_len), "V": model.vocab, "a": model.heads, "d": model.d_head,
            "moe_share": model.n_moe_layers / model.layers, "pc": pc}  # type: ignore[dict-item]


def _layer_compute(model: ModelSpec, s: int, lay: Layouts, hw: Hardware, g: _Gemm, params: TrainParams,
                   precision: str, moe: bool):
    """Forward and backward GPU compute seconds and forward kernel count of one layer, one micro-batch."""
    c = _model_consts(model, s)
    h, q, f, gate, span = c["h"], c["q"], c["f"], c["gate"], c["span"]
    t = as_float(lay.tp)
    T = lay.mbs * (s / lay.cp)  # local tokens of the micro-batch
    bw = hw.hbm_bytes_per_s * params.hbm_efficiency
    fwd = 0.0
    bwd = 0.0
    kernels = float(KERNELS_FWD_BASE)
    qk, v, kv_pair, latent = c["qk"], c["v"], c["kv_pair"], c["latent"]
    # attention projections (MLA: query, replicated KV down-projection, KV up-projection, output)
    if latent:
        lora = model.mla_kv_lora_rank or 0
        proj = ((qk / t, h), (latent, h), ((qk - model.heads * (model.mla_rope_dim or 0) + v) / t, lora),
                (h, v / t))
    else:
        proj = (((q + kv_pair) / t, h), (h, q / t))
    for n_out, k_in in proj:
        a_f, a_b = g.fwd_bwd(T, n_out, k_in)
        fwd, bwd = fwd + a_f, bwd + a_b
    # FFN
    if moe and model.moe:
        me = model.moe
        local_experts = me.experts / lay.ep
        m_e = T * me.top_k / local_experts  # tokens per local expert (balanced routing)
        for n_out, k_in in ((gate * me.expert_ffn_hidden / t, h), (h, me.expert_ffn_hidden / t)):
            a_f, a_b = g.fwd_bwd(m_e, n_out, k_in, local_experts)
            fwd, bwd = fwd + a_f, bwd + a_b
        if me.shared_experts:
            fs = me.shared_experts * me.expert_ffn_hidden
            for n_out, k_in in ((gate * fs / t, h), (h, fs / t)):
                a_f, a_b = g.fwd_bwd(T, n_out, k_in)
                fwd, bwd = fwd + a_f, bwd + a_b
        r_f, r_b = g.fwd_bwd(T, me.experts, h)
        fwd, bwd = fwd + r_f, bwd + r_b
        f_tok = me.top_k * me.expert_ffn_hidden + me.shared_experts * me.expert_ffn_hidden
        moe_bytes = T * MOE_PERMUTE_BYTES_PER_H * h * me.top_k
        kernels = kernels + KERNELS_MOE_EXTRA
    else:
        for n_out, k_in in ((gate * f / t, h), (h, f / t)):
            a_f, a_b = g.fwd_bwd(T, n_out, k_in)
            fwd, bwd = fwd + a_f, bwd + a_b
        f_tok = f
        moe_bytes = 0.0
    # attention core
    heads_local = c["a"] / t
    if hw.flash:
        attn_flops = 2.0 * T * span * (qk + v) / t * CAUSAL_WORK_FRACTION
        attn_f = attn_flops / (hw.peak16_flops * params.attention_efficiency) + params.kernel_latency_s
        attn_b = FLASH_BWD_FACTOR * attn_flops / (hw.peak16_flops * params.attention_efficiency) + \
            params.kernel_latency_s
        kernels = kernels + KERNELS_FLASH_ATTENTION
    else:
        dq, dv = qk / c["a"], v / c["a"]
        batch = lay.mbs * heads_local
        sq = s / lay.cp
        # forward QK^T (depth dq) and PV (depth span); backward dP = dO V^T, dV = P^T dO, dQ, dK
        attn_f = g.time(sq, span, dq, batch, True) + g.time(sq, dv, span, batch, True)
        attn_b = g.time(sq, span, dv, batch, True) + g.time(span, dv, sq, batch, True) + \
            g.time(sq, dq, span, batch, True) + g.time(span, dq, sq, batch, True)
        scores = batch * sq * span
        attn_f = attn_f + scores * UNFUSED_SCORE_BYTES_FWD / bw
        attn_b = attn_b + scores * UNFUSED_SCORE_BYTES_BWD / bw
        kernels = kernels + KERNELS_UNFUSED_ATTENTION
    # element-wise
    t_sp = where(lay.sp > 0, T / t, T)
    ew = t_sp * (NORM_BYTES_PER_H + RESIDUAL_BYTES_PER_H) * h
    act_bytes = (2 * BF16_BYTES if gate == 1 else 3 * BF16_BYTES) * f_tok
    ew = ew + T * (act_bytes + QKV_POST_BYTES * (qk + kv_pair)) / t + moe_bytes
    if precision == "fp8":
        ew = ew + T * FP8_CAST_BYTES * (2 * h + (q + f_tok) / t)
        kernels = kernels + KERNELS_FP8_CASTS
    ew_f = ew / bw
    ew_b = BWD_ELEMENTWISE_FACTOR * ew / bw
    return fwd + ew_f, bwd + ew_b, attn_f, attn_b, kernels


def _ranks_per_node(lay: Layouts, gpn: int):
    """Members per node of the TP, CP, DP(x CP), EP and PP groups (Megatron order tp-cp-dp-pp)."""
    tp, cp, dp = lay.tp, lay.cp, lay.dp
    inner_tp = fmax(gpn // tp, 1)
    rpn_cp = fmin(inner_tp, cp)
    rpn_dpcp = fmin(inner_tp, dp * cp)
    rpn_ep = fmin(inner_tp, lay.ep)
    rpn_pp = where(tp * cp * dp * 2 <= gpn, 2, 1)
    return rpn_cp, rpn_dpcp, rpn_ep, rpn_pp


#: batches of at most this many layouts are evaluated one by one on Python scalars (faster than
#: numpy on tiny arrays); larger batches vectorise
SCALAR_LOOP_MAX = 16


def evaluate_layouts(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, global_batch: int,
                     precision: str, params: TrainParams, seq_len: int | None = None,
                     calibration: Calibration | None = None, with_memory: bool = True) -> dict[str, np.ndarray]:
    """Step time, throughput, MFU/HFU, breakdown and memory of every layout (arrays of len(lay);
    Python floats when ``lay`` holds one scalar layout).

    Keys: ``step_time_s``, ``tokens_per_s``, ``mfu``, ``hfu``, ``model_tflops_per_gpu``,
    ``hardware_tflops_per_gpu``, the breakdown terms (``bd_*``, seconds per step) and, with memory,
    ``mem_*`` bytes and ``fits``."""
    if not lay.is_scalar and len(lay) <= SCALAR_LOOP_MAX:
        rows = []
        for i in range(len(lay)):
            one = Layouts(*(int(getattr(lay, f)[i]) for f in LAYOUT_FIELDS))  # type: ignore[arg-type]
            rows.append(_evaluate(model, cluster, one, global_batch, precision, params, seq_len, calibration,
                                  with_memory))
        return {k: np.array([r[k] for r in rows]) for k in rows[0]}
    return _evaluate(model, cluster, lay, global_batch, precision, params, seq_len, calibration, with_memory)


def _evaluate(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, global_batch: int, precision: str,
              params: TrainParams, seq_len: int | None, calibration: Calibration | None,
              with_memory: bool) -> dict:
    s = seq_len or model.seq_len
    hw = hardware(cluster, precision, params)
    g = _Gemm(hw, params, precision)
    c = _model_consts(model, s)
    pc = c["pc"]
    h, V = c["h"], c["V"]
    t = as_float(lay.tp)
    T = lay.mbs * (s / lay.cp)
    gpn = hw.gpus_per_node
    rpn_cp, rpn_dpcp, rpn_ep, rpn_pp = _ranks_per_node(lay, gpn)
    rc = lay.recompute
    full = rc == RECOMPUTE_CODES["full"]
    sel = rc == RECOMPUTE_CODES["selective"]
    full_f = as_float(full) if isinstance(full, np.ndarray) else float(full)
    bw = hw.hbm_bytes_per_s * params.hbm_efficiency

    def coll(op, nbytes, n, rpn):
        return collective_time(cluster, op, nbytes, n, rpn, calibration)

    # TP per layer: 2 all-reduces (SP: 2 all-gather + reduce-scatter pairs) per forward, backward and
    # recomputed forward
    act_bytes = T * h * BF16_BYTES
    tp_one = where(lay.sp > 0, coll("all_gather", act_bytes, lay.tp, lay.tp)
                   + coll("reduce_scatter", act_bytes, lay.tp, lay.tp),
                   coll("all_reduce", act_bytes, lay.tp, lay.tp))
    tp_passes = 2 + full_f  # fwd + bwd (+ recomputed fwd)
    tp_hidden = params.tp_comm_overlap if hw.flash else 0.0
    tp_layer = 2 * tp_one * tp_passes * (1.0 - tp_hidden)
    tp_kernels = where(lay.tp > 1, 2 * KERNELS_PER_TP_COLLECTIVE * (1 + where(lay.sp > 0, 1, 0)), 0)

    moe_share = c["moe_share"]
    out = {}
    layer_gpu = 0.0
    layer_host = 0.0
    layer_bwd = 0.0
    parts = {"compute": 0.0, "tp": 0.0, "cp": 0.0, "ep": 0.0}
    for moe, share in ((False, 1.0 - moe_share), (True, moe_share)):
        if share <= 0:
            continue
        fwd, bwd, attn_f, attn_b, kfwd = _layer_compute(model, s, lay, hw, g, params, precision, moe)
        compute = fwd + bwd + attn_f + attn_b + where(full, fwd + attn_f, 0.0) + where(sel, attn_f, 0.0)
        # CP ring attention: KV all-gather forward, KV + dKV backward
        kv_bytes = lay.mbs * s * c["kv_pair"] / t * BF16_BYTES
        cp_t = coll("all_gather", kv_bytes, lay.cp, rpn_cp) * (3.0 + full_f)
        attn_total = attn_f * (2.0 + full_f) + attn_b
        cp_exp = fmax((1 - params.cp_overlap) * cp_t, cp_t - attn_total)
        if moe and model.moe:
            a2a = coll("all_to_all", T * model.moe.top_k * h * BF16_BYTES, lay.ep, rpn_ep)
            ep_exp = 2 * a2a * tp_passes * (1 - params.ep_overlap)
        else:
            ep_exp = 0.0
        gpu = compute + tp_layer + cp_exp + ep_exp
        kernels = (kfwd + tp_kernels) * (1 + BWD_KERNEL_FACTOR + full_f) + where(sel, KERNELS_FLASH_ATTENTION, 0)
        host = kernels * params.kernel_host_overhead_s
        layer_gpu = layer_gpu + share * gpu
        layer_host = layer_host + share * host
        layer_bwd = layer_bwd + share * (bwd + attn_b)
        parts["compute"] += share * compute
        parts["tp"] += share * tp_layer
        parts["cp"] += share * cp_exp
        parts["ep"] += share * ep_exp
    st = stage_shapes(model, lay, global_batch)
    lps = st.layers_per_stage
    m = as_float(st.microbatches)
    pp = as_float(lay.pp)
    vpp = as_float(lay.vpp)
    layer_time = fmax(layer_gpu, layer_host)
    host_stall = fmax(layer_host - layer_gpu, 0.0)

    # output layer + loss (last stage) and embedding (first stage)
    lg_f, lg_b = g.fwd_bwd(T, V / t, h)
    loss = T * V / t * LOSS_BYTES_PER_LOGIT / bw
    logits_gpu = lg_f + lg_b + loss
    logits_host = KERNELS_LOGITS * params.kernel_host_overhead_s
    logits_t = fmax(logits_gpu, logits_host)
    emb_t = T * h * (BF16_BYTES + BWD_ELEMENTWISE_FACTOR * 2 * BF16_BYTES) / bw
    extra = where(lay.pp == 1, logits_t + emb_t, fmax(logits_t, emb_t))
    extra_gpu = where(lay.pp == 1, logits_gpu + emb_t, fmax(logits_gpu, emb_t))
    # pipeline send/recv of activations (forward) and their gradients (backward), per chunk;
    # Megatron's scatter-gather optimisation sends 1/t of the activation per TP rank
    p2p_bytes = T * h * BF16_BYTES / t
    has_pp = lay.pp > 1
    p2p_comm = where(has_pp, 2 * vpp * coll("send_recv", p2p_bytes, where(has_pp, 2, 1), rpn_pp)
                     * (1 - params.pp_overlap), 0.0)
    p2p_host = where(has_pp, 2 * vpp * KERNELS_P2P * params.kernel_host_overhead_s, 0.0)
    p2p = p2p_comm + p2p_host
    stage = lps * layer_time + extra + p2p
    # pipeline of unequal stages (the output layer makes the last one the slowest): the first
    # micro-batch crosses every stage once, the other m - 1 follow at the pace of the slowest, so the
    # fill and drain cost sum_i t_i - max_i t_i = (p - 1) x the stage without its extra work, plus the
    # lighter of the two end stages' extras (Narayanan et al. 2021's (p - 1)/v bubble for equal stages)
    bubble = (pp - 1) / vpp * (stage - extra) + where(lay.pp > 1, fmin(logits_t, emb_t), 0.0)
    pipe = m * stage + bubble
    nodes = ceil(lay.gpus / gpn)
    imbalance = pipe * params.straggler_per_doubling * log2(fmax(nodes, 1.0))

    # data-parallel gradient reduction, ZeRO gathers, optimizer
    n_moe_stage = lps * moe_share
    dense_local = ((lps - n_moe_stage) * pc.dense_layer + n_moe_stage * pc.moe_layer_non_expert
                   + where(lay.pp == 1, pc.embedding + pc.output, pc.embedding)) / t
    exp_local = n_moe_stage * pc.experts_per_layer / (lay.ep * t)
    dpg = lay.dp * lay.cp
    edpg = fmax(dpg // lay.ep, 1)
    rpn_edp = fmin(fmax(rpn_dpcp // fmin(lay.ep, rpn_dpcp), 1), edpg)
    z = lay.zero
    gb_d, gb_e = dense_local * GRAD_COMM_BYTES, exp_local * GRAD_COMM_BYTES
    t_ar = coll("all_reduce", gb_d, dpg, rpn_dpcp) + coll("all_reduce", gb_e, edpg, rpn_edp)
    t_rs = coll("reduce_scatter", gb_d, dpg, rpn_dpcp) + coll("reduce_scatter", gb_e, edpg, rpn_edp)
    t_ag = coll("all_gather", dense_local * PARAM_COMM_BYTES, dpg, rpn_dpcp) + \
        coll("all_gather", exp_local * PARAM_COMM_BYTES, edpg, rpn_edp)
    window = lps * layer_bwd
    # ZeRO 0: gradient all-reduce; 1-2: reduce-scatter + parameter all-gather; 3: the last
    # micro-batch's gradient reduce-scatter (earlier ones hide behind later micro-batches)
    t_dp = where(z == 0, t_ar, where(z >= 3, t_rs, t_rs + t_ag))
    dp_exp = fmax((1 - params.dp_overlap) * t_dp, t_dp - window)
    # ZeRO-3 gathers the weights for every micro-batch's forward and backward (prefetched)
    z3 = m * 2 * t_ag + (m - 1) * t_rs
    z3_exp = where(z >= 3, fmax((1 - params.zero3_overlap) * z3, z3 - pipe), 0.0)
    local_params = dense_local + exp_local
    shard = where(z >= 1, dpg, 1)
    opt = local_params / shard * OPTIMIZER_BYTES_MOVED / bw

    step = pipe + imbalance + dp_exp + z3_exp + opt

    gpus = as_float(lay.gpus)
    fpt = F.flops_per_token(model, s)
    tokens = global_batch * s
    model_flops = fpt.model * tokens
    hw_extra = where(full, F.flops_per_token(model, s, "full").recompute,
                     where(sel, F.flops_per_token(model, s, "selective").recompute, 0.0))
    hw_flops = (fpt.model + hw_extra) * tokens
    out["step_time_s"] = step
    out["tokens_per_s"] = tokens / step
    out["model_tflops_per_gpu"] = model_flops / (step * gpus) / TFLOP
    out["hardware_tflops_per_gpu"] = hw_flops / (step * gpus) / TFLOP
    out["mfu"] = model_flops / (step * gpus * hw.peak_flops)
    out["hfu"] = hw_flops / (step * gpus * hw.peak_flops)
    # breakdown, seconds per step: the steady-state stage time split by term, times m
    out["bd_compute"] = m * (lps * parts["compute"] + extra_gpu)
    out["bd_host_overhead"] = m * (lps * host_stall + extra - extra_gpu + p2p_host)
    out["bd_tp_comm"] = m * lps * parts["tp"]
    out["bd_cp_comm"] = m * lps * parts["cp"]
    out["bd_ep_comm"] = m * lps * parts["ep"]
    out["bd_pp_comm"] = m * p2p_comm
    out["bd_bubble"] = bubble
    out["bd_imbalance"] = imbalance
    out["bd_dp_comm"] = dp_exp
    out["bd_zero3_gather"] = z3_exp
    out["bd_optimizer"] = opt
    out["model_flops_per_step"] = model_flops
    out["hardware_flops_per_step"] = hw_flops
    if with_memory:
        mem = memory_arrays(model, lay, global_batch, precision, hw.flash, params, s)
        for k, v in mem.items():
            out[f"mem_{k}"] = v
        out["fits"] = mem["total"] <= hw.hbm_bytes
    return out


BREAKDOWN_KEYS = ("compute", "host_overhead", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "bubble",
                  "imbalance", "dp_comm", "zero3_gather", "optimizer")
