"""DeepSeek-V3's documented memory savings and DualPipe's stage pairs (DeepSeek-AI 2024, DeepSeek-V3
Technical Report, arXiv 2412.19437), as :mod:`clustertwin.train.memory` applies them.

Where the stack has them (``Stack.deepseek_memory``: ``deepseek-2024``):

* **FP8 caching of the MoE SwiGLU inputs** (section 3.3.2, "Low-Precision Storage and Communication":
  the inputs of the SwiGLU operator in MoE are cached and its output recomputed in the backward pass;
  these activations are stored in FP8): under FP8 training an MoE layer keeps its FC1 outputs (the
  SwiGLU inputs, routed and shared experts) as 1-byte values instead of 16-bit ones and does not keep
  the SwiGLU output (the FC2 input), :func:`swiglu_fp8`. The other FP8-cached tensors the section names
  (the dispatched tokens before the MoE up-projections, the input of the linear layer after attention)
  are FP8 GEMM inputs of every FP8 stack already (:mod:`clustertwin.train.memory_activations`).
* **BF16 AdamW moments** (section 3.3.3, "Low-Precision Optimizer States"): the first and second moments
  are BF16, the master weights and gradients stay fp32: 4 + 2 + 2 = :data:`BF16_MOMENT_OPTIMIZER_BYTES`
  bytes of optimizer state per parameter instead of 12 (:func:`optimizer_bytes`).
* **EMA on the CPU** (section 3.2.3, "Exponential Moving Average in CPU"): the EMA of the weights is kept
  in host memory and updated asynchronously. No stack here holds an EMA on the GPU, so no term is removed.
* **Recomputation of RMSNorm and the MLA up-projections** (section 3.2.3): these are the layout's
  ``recompute_modules`` ``layernorm`` and ``mla_up_proj`` (:mod:`clustertwin.train.memory_moe`); a run
  names them, they are not implied by the stack.

For every stack:

* **MTP modules share the embedding and the output head** (section 3.2.3, "Shared Embedding and Output
  Head for Multi-Token Prediction"; Megatron-Core's MTP reuses the main model's embedding and output
  layer the same way): each of the ``mtp_layers`` modules adds its transformer block, its projection
  ``M`` (2h x h) and two RMSNorms to the stage that holds the output head, and no embedding or head of its
  own (:func:`mtp_params`); its activations count as one more layer of that stage.
* **DualPipe's stage pairs** (section 3.2.1, Figure 5 and Table 2): rank ``r`` holds stage ``r`` of one
  direction and stage ``p - 1 - r`` of the other, so the first rank holds the embedding and the first
  layers together with the last layers, the output head and the MTP modules (which lets the MTP share the
  head physically). A rank's weights and gradients are those of its pair (Table 2's 2x parameters); each
  stage is held by two ranks, so the distributed optimizer shards its state over twice the ranks; ``p + 1``
  micro-batches of activations are in flight (Table 2), half through each stage of the pair
  (:func:`dualpipe_pairs`, :func:`dualpipe_layers_in_flight`).
"""

from __future__ import annotations

from clustertwin.specs.model import ModelSpec
from clustertwin.train.layout import where
from clustertwin.train.memory_moe import dualpipe

#: fp32 master weights (4 B) + BF16 first and second moments (2 B each), per parameter
BF16_MOMENT_OPTIMIZER_BYTES = 8
#: parameters of an MTP module besides its transformer block, per h^2: the projection M (2h x h)
MTP_PROJECTION_PER_H2 = 2
#: RMSNorms of an MTP module (of the embedding and of the previous depth's representation), per h
MTP_NORMS_PER_H = 2


def has_deepseek_memory(stack) -> bool:
    """The stack applies DeepSeek-V3's savings (module docstring)."""
    return stack is not None and getattr(stack, "deepseek_memory", False)


def swiglu_fp8(stack, fp8: bool) -> bool:
    """MoE SwiGLU inputs cached in FP8 and the SwiGLU output recomputed (section 3.3.2)."""
    return fp8 and has_deepseek_memory(stack)


def optimizer_bytes(stack, default: int) -> int:
    """Optimizer bytes per parameter: BF16 moments under DeepSeek's recipe (section 3.3.3), else ``default``."""
    return BF16_MOMENT_OPTIMIZER_BYTES if has_deepseek_memory(stack) and default == 12 else default


def mtp_params(model: ModelSpec, pc) -> tuple[int, int]:
    """(non-expert, routed-expert) parameters of the model's MTP modules, without an embedding or output
    head (shared with the main model, module docstring)."""
    n = model.mtp_layers
    if not n:
        return 0, 0
    h = model.hidden
    block = pc.moe_layer_non_expert if model.moe else pc.dense_layer
    return n * (block + MTP_PROJECTION_PER_H2 * h * h + MTP_NORMS_PER_H * h), n * pc.experts_per_layer


def dualpipe_pairs(lay, first, last, middle):
    """Per-rank quantities of the first, last and middle ranks under DualPipe (the pair's sum: the first
    and the last rank each hold the first and the last stage, a middle rank two middle stages); unchanged
    for other schedules."""
    dual = dualpipe(lay)
    return where(dual, first + last, first), where(dual, first + last, last), where(dual, 2 * middle, middle)


def optimizer_share(lay):
    """Share of a rank's pair optimizer state it holds: 1/2 under DualPipe (every stage on two ranks)."""
    return where(dualpipe(lay), 0.5, 1.0)


def dualpipe_layers_in_flight(lay, first_layers, last_layers, middle_layers, inflight_first, inflight_middle):
    """(first, last, middle) rank activations in layer-micro-batches: ``(p + 1)`` micro-batches over the
    pair's mean layers under DualPipe; else the 1F1B counts given (the last stage holds one)."""
    dual = dualpipe(lay)
    n = lay.pp + 1.0
    pair = (first_layers + last_layers) / 2
    return (where(dual, n * pair, first_layers * inflight_first), where(dual, n * pair, last_layers),
            where(dual, n * middle_layers, middle_layers * inflight_middle))
