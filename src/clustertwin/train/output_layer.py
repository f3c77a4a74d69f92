"""The pipeline's end blocks: the output layer with its loss (last stage) and the embedding (first).

* output layer: the logits GEMM (T x V/t x h, forward and backward) plus Megatron's vocab-parallel
  cross-entropy streaming ``LOSS_BYTES_PER_LOGIT`` bytes per logit through HBM
  (``FUSED_LOSS_BYTES_PER_LOGIT`` with a stack's fused cross-entropy); ``KERNELS_LOGITS``
  host dispatches;
* embedding: a gather of T x h 16-bit rows forward, the gradient scatter-add (read + write) backward.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.train.gemm import BF16_BYTES, Gemm
from clustertwin.train.layer import BWD_ELEMENTWISE_FACTOR, ModelShape
from clustertwin.train.layout import as_float, fmax
from clustertwin.train.params import TrainParams

#: output layer loss: bytes per logit over forward and backward of Megatron's vocab-parallel
#: cross-entropy (the default, unfused path of Megatron-LM, Megatron-DeepSpeed and Megatron-Core),
#: which works on an fp32 copy of the 16-bit logits: forward cast to fp32 (read 2 + write 4), max
#: (read 4), subtract the max (4 + 4), exp (4 + 4), sum (read 4), divide by the sum (4 + 4) = 38;
#: backward scale the saved softmax by the loss gradient (4 + 4) and cast the gradient back to 16 bit
#: (4 + 2) = 14. Fused cross-entropy kernels (NeMo's ``cross_entropy_loss_fusion``) move fewer.
LOSS_BYTES_PER_LOGIT = 38 + 14
#: fused vocab-parallel cross-entropy (Megatron-Core ``--cross-entropy-loss-fusion``, on in the NeMo 2 and
#: Megatron-Bridge recipes): one forward pass reads the 16-bit logits (2; max, sum of exponentials and the
#: target logit in registers), the backward reads them again and writes the 16-bit gradient (2 + 2)
FUSED_LOSS_BYTES_PER_LOGIT = 2 + 2 + 2
KERNELS_LOGITS = 12


@dataclass
class EndBlocks:
    """Seconds per micro-batch of the output layer (GPU, and with host dispatch) and the embedding."""

    logits_gpu_s: object
    logits_s: object
    embedding_s: object


def end_blocks(c: ModelShape, tp, T, g: Gemm, bw: float, params: TrainParams,
               fused_loss: bool = False) -> EndBlocks:
    t = as_float(tp)
    lg_f, lg_b = g.fwd_bwd(T, c.vocab / t, c.h)
    loss_bytes = FUSED_LOSS_BYTES_PER_LOGIT if fused_loss else LOSS_BYTES_PER_LOGIT
    gpu = lg_f + lg_b + T * c.vocab / t * loss_bytes / bw
    emb = T * c.h * (BF16_BYTES + BWD_ELEMENTWISE_FACTOR * 2 * BF16_BYTES) / bw
    return EndBlocks(gpu, fmax(gpu, KERNELS_LOGITS * params.kernel_host_overhead_s), emb)


def with_mtp(ends: EndBlocks, c: ModelShape, mtp: int, tp, T, g: Gemm, layer_gpu_s, layer_s) -> EndBlocks:
    """The end blocks with ``mtp`` multi-token-prediction modules on the last stage, where Megatron-Core and
    DeepSeek's DualPipe place them (DeepSeek-AI 2024, section 2.2: per module the normalised hidden state and
    the next token's embedding concatenated and projected 2h -> h, one transformer block, and the output head
    shared with the main model, with its own loss): per module one layer's time (``layer_gpu_s`` on the GPU,
    ``layer_s`` with its host dispatch), the projection's GEMMs and one more output layer."""
    if not mtp:
        return ends
    proj_f, proj_b = g.fwd_bwd(T, c.h / as_float(tp), 2 * c.h)
    proj = proj_f + proj_b
    return EndBlocks(ends.logits_gpu_s + mtp * (layer_gpu_s + proj + ends.logits_gpu_s),
                     ends.logits_s + mtp * (layer_s + proj + ends.logits_s), ends.embedding_s)
