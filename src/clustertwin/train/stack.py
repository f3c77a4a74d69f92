"""The software stack of a run: which features its framework has (``ParallelismSpec.software_stack``).

A stack decides how the model costs a layout (fused flash attention or Megatron's unfused attention over
materialised scores; TP communication overlapped with GEMMs or exposed) and which layouts the search and
the validate runner may offer (sequence parallelism, selective recompute, ZeRO stages, context
parallelism, the interleaved schedule, uneven pipeline splits, FP8). Named presets, with where the
feature set comes from:

* ``megatron-2021``: Megatron-LM as in Narayanan et al. 2021 (SC21): TP, PP with the interleaved
  schedule, full recompute, no sequence parallelism, no distributed optimizer;
* ``megatron-2022``: Megatron-LM after Korthikanti et al. 2022: + sequence parallelism, selective
  recompute, the distributed optimizer (ZeRO-1);
* ``deepspeed-2022``: Megatron-DeepSpeed (BLOOM, vTrain's runs): ZeRO 0-2, 1F1B pipeline only (no
  interleaving), no sequence parallelism or selective recompute, unfused attention;
* ``megatron-core-2024``: Megatron-Core + Transformer Engine (r0.8, 2024): fused flash attention,
  TP communication overlap, context parallelism, uneven first/last stages, FP8, overlapped gradient
  reduce and parameter gather;
* ``nemo-2024``: NeMo 24.x containers (NeMo 1.0 / Megatron-Core + Transformer Engine 1.x, MLPerf Training
  v4.1 implementations): as megatron-core-2024, with Transformer Engine's cuDNN 9 fused-attention backend
  (``fused_attention_gen`` 3: FlashAttention-3 class kernels on Hopper);
* ``nemo-2025``: NeMo 2 recipes on Megatron-Core (containers 25.x, MLPerf Training v5.x): as nemo-2024;
* ``megatron-bridge-2025``: NeMo Megatron-Bridge perf recipes (containers 25.11+): as nemo-2025, with
  model FLOPs that count the causal attention span (s/2 on every layer, no window term; a gated FFN's
  third matrix for SwiGLU alone: every published GPT-OSS row of 25.11-26.04 reproduces that count), the all-to-all token dispatcher with shared-expert
  overlap and force-balanced routing (the tables' footnote);
* ``megatron-bridge-2026``: containers 26.06+: model FLOPs over the causal span with sliding windows and
  every gated FFN counted (the 26.08 GPT-OSS rows); the HybridEP/DeepEP flex dispatcher (FP8 dispatch, no host
  sync, TE CUDA graphs) and the 1F1B all-to-all overlap (``--overlap-moe-expert-parallel-comm``) in the MoE perf recipes;
* ``deepseek-2024``: DeepSeek-V3's HAI-LLM (DeepSeek-AI 2024, section 3.2): DualPipe, DeepEP, FP8,
  no interleaving; its MoE runs take DualPipe and the recomputation of RMSNorm and the MLA up-projections
  (section 3.2.3) unless a case or command says otherwise (``moe_layout_defaults``);
* ``torchtitan-2024``: torchtitan as benchmarked in 2024-12 (FSDP2, PyTorch SDPA's FlashAttention-2
  kernels, vanilla TP: no TP communication overlap), ZeRO-3 instead of a distributed optimizer; its memory
  (:mod:`clustertwin.train.memory_fsdp`): FSDP2 states, op-level selective recompute, the eager fp32
  cross-entropy, the pipelining last stage keeping its outputs, torchao float8 saving 16-bit inputs;
* ``torchtitan-2025``: torchtitan (PyTorch FSDP2, async TP, context parallel, float8, flexible
  pipeline splits): ZeRO-3 (FSDP) instead of a distributed optimizer; memory as torchtitan-2024 but
  with the loss compiled with the model (from 2025-04).

Fused attention (``fused_attention_gen``): FlashAttention-2 class kernels run at ``attention_efficiency``
of the 16-bit peak; FlashAttention-3 / cuDNN 9 class kernels (generation 3) at ``attention_fa3_ratio`` x
that on Hopper, the architecture they target (Blackwell runs keep the FA2-class rate:
:func:`clustertwin.train.hardware.attention_generation`).

A case that names no stack gets the stack of the framework its ``source`` names (:data:`SOURCE_STACKS`:
Megatron-Bridge, NeMo containers 24.x / 25.x, MLPerf Training v4.1 / v5.x, torchtitan, torchao's
benchmarks on torchtitan 2025, DeepSeek-V3).
``te`` and ``legacy`` name megatron-core-2024 and megatron-2022; ``auto`` (the default) picks by the GPU's
release year (``TrainParams.te_stack_min_year``): the stack the published runs of that generation used.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.train.params import TrainParams


@dataclass(frozen=True)
class Stack:
    """Features of a training framework release."""

    name: str
    year: int
    flash_attention: bool
    """fused (flash) attention kernels; else unfused attention over materialised scores"""
    tp_comm_overlap: bool
    """TP collectives overlapped with GEMMs (Transformer Engine userbuffers, async TP)"""
    sequence_parallel: bool
    selective_recompute: bool
    zero_stages: tuple[int, ...]
    """ZeRO stages it runs (1 = Megatron's distributed optimizer, 3 = FSDP)"""
    context_parallel: bool
    interleaved: bool
    """interleaved 1F1B (virtual pipeline chunks)"""
    uneven_pipeline: bool
    """first/last stage layers, embedding/loss in the split, layout strings"""
    fp8: bool
    overlap_grad_reduce: bool
    """gradient reduce-scatter per bucket during the backward"""
    overlap_param_gather: bool
    """parameter all-gather of the distributed optimizer during the next forward"""
    causal_flops: bool = False
    """reported model FLOPs count the causally covered attention span (:mod:`clustertwin.train.flops`)"""
    flops_windows: bool = True
    """reported model FLOPs count a sliding-window layer over its window (False: the formula has no window
    term, every layer over the whole span)"""
    flops_gate_any: bool = True
    """reported model FLOPs count a gated FFN's gate matrix whatever its activation (False: for SwiGLU alone,
    Megatron's ``--swiglu``; GPT-OSS's quick-GELU gate is not counted)"""
    moe_dispatcher: str = "nccl"
    """MoE token dispatcher: ``nccl`` (all-to-all) or ``deepep`` (hierarchical NVLink + RDMA, FP8 dispatch)"""
    moe_overlaps: tuple[str, ...] = ("none",)
    """dispatch/combine overlap modes it runs (:data:`clustertwin.train.moe.MOE_OVERLAPS`)"""
    moe_force_balanced: bool = False
    """benchmark recipes force-balance the router (``moe_router_force_load_balancing``)"""
    moe_layout_defaults: tuple[tuple[str, object], ...] = ()
    """layout fields the stack's documentation fixes for its MoE runs, taken when a case or command leaves
    them out (:func:`clustertwin.train.complete.stack_layout_defaults`)"""
    fp8_recipe: str = "delayed"
    """FP8 scaling recipe (:data:`clustertwin.train.layer.FP8_RECIPE_EXTRA_BYTES`): ``delayed`` (amax
    history, TE's default through NeMo 24.x and MLPerf Training v4.1), ``current`` (per-tensor current
    scaling: NeMo 25.x, Megatron-Bridge's fp8cs recipes, MLPerf Training v5.x, torchao's dynamic
    tensorwise float8)"""
    fused_cross_entropy: bool = False
    """fused vocab-parallel cross-entropy kernel (Megatron-Core ``--cross-entropy-loss-fusion``, default in
    the NeMo 2 and Megatron-Bridge recipes; :mod:`clustertwin.train.output_layer`)"""
    fp8_param_gather: bool = False
    """FP8 training keeps FP8 weights and gathers them in FP8, 1 byte per parameter (Transformer Engine
    ``fp8_model_init`` + Megatron ``--fp8-param-gather``: the NeMo 24.x+ and Megatron-Bridge FP8 recipes,
    the MLPerf Training implementations' ``FP8_PARAMS``)"""
    pp_framework_defaults: bool = False
    """pipeline fields a run leaves unstated take the framework's defaults (torchtitan 2024:
    ``pipeline_parallel_schedule = "1F1B"``, so vpp 1, and ``pipeline_parallel_microbatches`` = the number
    of stages); else the validate runner searches them (:func:`clustertwin.train.validation.predict`)"""
    fused_attention_gen: int = 2
    """generation of the fused attention kernels (:func:`clustertwin.train.attention.attention_rate`): 2 =
    FlashAttention-2 class (TE 1.x, 2023-24), 3 = FlashAttention-3 / cuDNN 9 class (warp-specialised, TMA,
    asynchronous softmax; TE 2.x in the 2025+ Megatron-Bridge containers)"""
    moe_host_sync: bool = True
    """the token dispatcher synchronises with the host per dispatch (:func:`clustertwin.train.moe.sync_stall`);
    False for sync-free dispatchers captured in CUDA graphs"""
    fsdp2_memory: bool = False
    """ZeRO-3 is PyTorch FSDP2 with fp32 sharded parameters and fp32 gradient reduction: 16 B/param sharded,
    the last block unsharded after the forward, and under pipelining the whole stage's 16-bit parameters and
    fp32 accumulated gradients resident until the last micro-batch (:mod:`clustertwin.train.memory_fsdp`)"""
    selective_policy: str = "tensor"
    """what selective recompute saves: ``tensor`` (Korthikanti et al. 2022: everything but the attention
    core) or ``op`` (torchtitan's op-level policy: every other GEMM output, the attention output, TP
    reduce-scatter outputs; :func:`clustertwin.train.memory_fsdp.op_sac_bytes_per_layer`)"""
    cross_entropy: str = "megatron"
    """memory of the loss: ``megatron`` (Megatron's theoretical logits memory), ``eager_fp32`` (eager
    ``F.cross_entropy`` on fp32-cast full logits) or ``compiled`` (the loss compiled with the model)
    (:data:`clustertwin.train.memory_fsdp.LOSS_PEAK_BYTES_PER_LOGIT`)"""
    pp_keeps_outputs: bool = False
    """the pipeline's last stage keeps every micro-batch's output (the logits) until the step ends
    (``torch.distributed.pipelining`` ``output_chunks``)"""
    cp_kv_allgather: bool = False
    """context parallelism all-gathers the K and V of the whole sequence for the layer running (torchtitan's
    default rotate method; :func:`clustertwin.train.memory_fsdp.cp_allgather_bytes`)"""
    fp8_copies: bool = True
    """FP8 training keeps 1-byte copies (Transformer Engine): an FP8 copy of the weights and the FP8 GEMM
    inputs saved for the backward; torchao's ``Float8Linear`` casts weights on the fly and saves the
    16-bit inputs (``matmul_with_hp_or_float8_args.forward``: ``ctx.save_for_backward(input_hp,
    weight_hp_t)``), re-casting them in the backward"""
    deepseek_memory: bool = False
    """DeepSeek-V3's memory savings: FP8-cached MoE SwiGLU inputs with the SwiGLU output recomputed, BF16
    AdamW moments (:mod:`clustertwin.train.memory_deepseek`)"""


    @property
    def flops_convention(self) -> dict[str, bool]:
        """How the stack counts the model FLOPs it reports, as the keyword arguments of
        :func:`clustertwin.train.flops.flops_per_token`."""
        return {"causal": self.causal_flops, "windows": self.flops_windows, "gate_any": self.flops_gate_any}


_MEGATRON_2021 = Stack("megatron-2021", 2021, flash_attention=False, tp_comm_overlap=False,
                       sequence_parallel=False, selective_recompute=False, zero_stages=(0,),
                       context_parallel=False, interleaved=True, uneven_pipeline=False, fp8=False,
                       overlap_grad_reduce=True, overlap_param_gather=False)
_MEGATRON_2022 = replace(_MEGATRON_2021, name="megatron-2022", year=2022, sequence_parallel=True,
                         selective_recompute=True, zero_stages=(0, 1, 2, 3))
_DEEPSPEED_2022 = replace(_MEGATRON_2021, name="deepspeed-2022", year=2022, zero_stages=(0, 1, 2),
                          interleaved=False)
_MCORE_2024 = Stack("megatron-core-2024", 2024, flash_attention=True, tp_comm_overlap=True,
                    sequence_parallel=True, selective_recompute=True, zero_stages=(0, 1, 2, 3),
                    context_parallel=True, interleaved=True, uneven_pipeline=True, fp8=True,
                    overlap_grad_reduce=True, overlap_param_gather=True)
#: memory features of torchtitan's PyTorch-native training (FSDP2, op-level AC, torch.distributed.pipelining, torchao float8)
_TORCHTITAN_MEMORY = {"fsdp2_memory": True, "selective_policy": "op", "pp_keeps_outputs": True,
                      "fp8_copies": False, "cp_kv_allgather": True}
STACKS: dict[str, Stack] = {s.name: s for s in (
    _MEGATRON_2021, _MEGATRON_2022, _DEEPSPEED_2022, _MCORE_2024,
    replace(_MCORE_2024, name="nemo-2024", year=2024, fused_attention_gen=3, fp8_param_gather=True),
    replace(_MCORE_2024, name="nemo-2025", year=2025, fused_attention_gen=3, fp8_param_gather=True,
            fused_cross_entropy=True, fp8_recipe="current"),
    replace(_MCORE_2024, name="torchtitan-2024", year=2024, zero_stages=(0, 3), tp_comm_overlap=False,
            pp_framework_defaults=True, fp8_recipe="current", **_TORCHTITAN_MEMORY, cross_entropy="eager_fp32"),
    replace(_MCORE_2024, name="torchtitan-2025", year=2025, zero_stages=(0, 3), fp8_recipe="current",
            **_TORCHTITAN_MEMORY, cross_entropy="compiled"),
    replace(_MCORE_2024, name="megatron-bridge-2025", year=2025, causal_flops=True, flops_windows=False,
            flops_gate_any=False, fused_attention_gen=3, fp8_param_gather=True,
            fused_cross_entropy=True, fp8_recipe="current", moe_dispatcher="flex",
            moe_overlaps=("none", "shared_expert"), moe_force_balanced=True),
    replace(_MCORE_2024, name="megatron-bridge-2026", year=2026, causal_flops=True, fused_attention_gen=3, fp8_param_gather=True,
            fused_cross_entropy=True, fp8_recipe="current", moe_dispatcher="deepep",
            moe_overlaps=("none", "shared_expert", "a2a", "dualpipe"), moe_force_balanced=True, moe_host_sync=False),
    replace(_MCORE_2024, name="deepseek-2024", year=2024, causal_flops=True, moe_dispatcher="deepep",
            moe_overlaps=("none", "dualpipe"), interleaved=False, moe_host_sync=False,
            deepseek_memory=True,
            moe_layout_defaults=(("moe_overlap", "dualpipe"), ("recompute_modules", ("layernorm", "mla_up_proj")))),
)}
#: the two generic names of earlier releases
ALIASES = {"te": "megatron-core-2024", "legacy": "megatron-2022"}
NAMES = ("auto", *ALIASES, *STACKS)


#: the framework a published source names -> its stack (first match; used where a case names no stack)
SOURCE_STACKS: tuple[tuple[str, str], ...] = (("megatron-bridge performance summary, pre-training tables, container 26.06",
                                               "megatron-bridge-2026"),
                                              ("megatron-bridge performance summary, pre-training tables, container 26.08",
                                               "megatron-bridge-2026"),
                                              ("megatron-bridge", "megatron-bridge-2025"),
                                              ("nemo framework user guide", "nemo-2025"),
                                              ("torchao mx formats readme", "torchtitan-2025"),
                                              ("torchtitan", "torchtitan-2024"),
                                              ("mlperf training v4.1", "nemo-2024"),
                                              ("mlperf training v5.", "nemo-2025"),
                                              ("container nemo 24.", "nemo-2024"),
                                              ("container nemo24.", "nemo-2024"),
                                              ("deepseek-v3 technical report", "deepseek-2024"))


def stack_for_source(source: str | None) -> str | None:
    """The stack of the framework a case's ``source`` names (:data:`SOURCE_STACKS`), else None."""
    text = (source or "").lower()
    return next((stack for key, stack in SOURCE_STACKS if key in text), None)


def resolve_stack(name: str | None, cluster: ClusterSpec, params: TrainParams) -> Stack:
    """The stack called ``name`` (``auto``/None: by the GPU's release year); SpecError for unknown names."""
    key = name or "auto"
    if key == "auto":
        year = cluster.node.gpu.release_year
        key = "te" if (year is None or year >= params.te_stack_min_year) else "legacy"
    key = ALIASES.get(key, key)
    if key not in STACKS:
        raise SpecError(f"unknown software stack '{name}'{did_you_mean(str(name), NAMES)} (expected one of "
                        f"{', '.join(NAMES)})", path=("software_stack",))
    return STACKS[key]


def moe_layout_defaults(stack: Stack, is_moe: bool, given: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``stack.moe_layout_defaults`` an MoE run's ``given`` fields leave out (DeepSeek's stack:
    DualPipe and the RMSNorm / MLA up-projection recompute); DualPipe only where a given pp can run it (even,
    >= 2; a pp left to the search keeps to even ones)."""
    if not is_moe:
        return {}
    out = {}
    for name, value in stack.moe_layout_defaults:
        pp = given.get("pp")
        if name in given or (value == "dualpipe" and pp is not None and (int(pp) < 2 or int(pp) % 2)):
            continue
        out[name] = value
    return out


def stack_violation(stack: Stack, *, sequence_parallel: bool, recompute: str, zero: int, cp: int, vpp: int,
                    uneven: bool, precision: str) -> str | None:
    """Why a layout needs a feature ``stack`` lacks (None when the stack runs it)."""
    missing = [what for what, bad in (
        ("sequence parallelism", sequence_parallel and not stack.sequence_parallel),
        ("selective recompute", recompute == "selective" and not stack.selective_recompute),
        (f"ZeRO stage {zero}", zero not in stack.zero_stages),
        ("context parallelism", cp > 1 and not stack.context_parallel),
        ("the interleaved schedule (vpp > 1)", vpp > 1 and not stack.interleaved),
        ("uneven pipeline stages", uneven and not stack.uneven_pipeline),
        ("FP8 training", precision == "fp8" and not stack.fp8),
    ) if bad]
    if not missing:
        return None
    return f"software stack {stack.name} has no {', '.join(missing)}"
