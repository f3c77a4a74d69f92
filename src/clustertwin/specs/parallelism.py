"""Parallel layout of a training (or inference) job."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from clustertwin.specs.base import PositiveInt, Spec

Recompute = Literal["none", "selective", "full"]
TrainPrecision = Literal["bf16", "fp16", "fp8", "fp32", "tf32"]


class ParallelismSpec(Spec):
    """Megatron-style layout. ``tp*pp*dp*cp`` = GPUs; EP splits the experts within ``dp*cp``.

    Fields a case leaves out are reported by ``model_fields_set``; layout search fills them."""

    tp: PositiveInt = 1
    """Tensor-parallel degree."""
    pp: PositiveInt = 1
    """Pipeline-parallel stages."""
    dp: PositiveInt = 1
    """Data-parallel degree."""
    cp: PositiveInt = 1
    """Context-parallel degree (sequence split across GPUs for attention)."""
    ep: PositiveInt = 1
    """Expert-parallel degree (MoE); must divide the expert count, and etp x ep must divide tp x cp x dp
    (Megatron-Core MoE parallel folding: the experts re-fold the dense ranks as etp x ep x expert-DP)."""
    etp: PositiveInt | None = None
    """Expert tensor-parallel degree (Megatron ``--expert-tensor-parallel-size``); default tp."""
    recompute_modules: tuple[Literal["layernorm", "mla_up_proj", "core_attn", "moe_act", "moe", "shared_experts"], ...] = ()
    """Per-module activation recompute (Megatron ``--recompute-modules``): the module keeps only its input
    and re-runs in the backward (``clustertwin.train.memory_moe``)."""
    recompute_num_layers: PositiveInt | None = None
    """With ``recompute: full``: recompute only this many layers of each pipeline chunk (Megatron
    ``--recompute-method block --recompute-num-layers``); the others keep their activations."""
    moe_overlap: Literal["auto", "none", "shared_expert", "a2a", "dualpipe"] = "auto"
    """How the MoE dispatch/combine all-to-all overlaps compute: ``none``; ``shared_expert`` (behind the
    shared experts, ``--moe-shared-expert-overlap``); ``a2a`` (behind another micro-batch's compute,
    ``--overlap-moe-expert-parallel-comm``); ``dualpipe`` (DeepSeek-V3's bidirectional schedule, with its
    own bubble and two copies of the stage weights); ``auto``: the best the software stack runs short of
    dualpipe."""
    vpp: PositiveInt = 1
    """Virtual pipeline chunks per stage (interleaved 1F1B)."""
    micro_batch: PositiveInt = 1
    """Sequences per micro-batch."""
    global_batch: PositiveInt = 1
    """Sequences per optimizer step."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism (activations split over TP outside the matmuls)."""
    recompute: Recompute = "none"
    """Activation recomputation: none, selective (attention core), full (whole layer)."""
    first_stage_layers: PositiveInt | None = None
    """Layers on the first pipeline stage (Megatron ``--decoder-first-pipeline-num-layers``); the other
    stages share the rest evenly. Default: the balanced split of the stage plan."""
    last_stage_layers: PositiveInt | None = None
    """Layers on the last pipeline stage (``--decoder-last-pipeline-num-layers``)."""
    embedding_in_split: bool = False
    """The embedding counts as one layer slot when the layers are split over the stages and chunks
    (``account_for_embedding_in_pipeline_split``): the first stage gets one layer fewer."""
    loss_in_split: bool = False
    """The output layer and loss count as one slot (``account_for_loss_in_pipeline_split``)."""
    pipeline_layout: str | None = None
    """A Megatron-Core pipeline layout string (``--pipeline-model-parallel-layout``), e.g.
    ``Et*7|(t*8|)*14t*7L``: ``pp x vpp`` chunks separated by ``|`` of ``E`` (embedding), ``t`` (layer),
    ``m`` (MTP layer), ``L`` (loss), with ``*N`` repeats and parentheses. An alternative to the
    other stage-plan fields."""
    zero: Literal[0, 1, 2, 3] = 0
    """ZeRO stage over DP (1 = Megatron distributed optimizer; 3 = FSDP)."""
    precision: TrainPrecision = "bf16"
    """GEMM precision; fp8 = FP8 GEMMs with BF16 elsewhere."""
    schedule: Literal["1f1b", "interleaved"] | None = None
    """Pipeline schedule: 1F1B, or interleaved 1F1B with ``vpp`` > 1 virtual chunks per stage; default
    (None) follows ``vpp``. GPipe (all forwards, then all backwards) is not modelled."""
    software_stack: str = "auto"
    """Training software the run uses, a named preset with its feature set (``megatron-2021``,
    ``megatron-2022``, ``deepspeed-2022``, ``megatron-core-2024``, ``nemo-2024``, ``nemo-2025``, ``torchtitan-2024``, ``torchtitan-2025``,
    ``megatron-bridge-2025``, ``megatron-bridge-2026``, ``deepseek-2024``; ``te``
    = megatron-core-2024, ``legacy`` = megatron-2022) or ``auto`` (by GPU generation,
    ``TrainParams.te_stack_min_year``). The names are checked by the training model
    (``clustertwin.train.stack``)."""

    @model_validator(mode="after")
    def _check(self) -> ParallelismSpec:
        if self.global_batch % (self.micro_batch * self.dp) and "dp" in self.model_fields_set:
            raise ValueError(
                f"global_batch={self.global_batch} is not divisible by micro_batch x dp = "
                f"{self.micro_batch} x {self.dp}"
            )
        if (self.first_stage_layers or self.last_stage_layers) and (self.embedding_in_split or self.loss_in_split):
            raise ValueError("first/last_stage_layers and embedding/loss_in_split are alternatives; give one")
        if self.pipeline_layout and (self.first_stage_layers or self.last_stage_layers or self.embedding_in_split
                                     or self.loss_in_split):
            raise ValueError("pipeline_layout replaces first/last_stage_layers and embedding/loss_in_split; give one")
        if self.recompute_num_layers and self.recompute != "full":
            raise ValueError("recompute_num_layers needs recompute: full (block recompute of that many layers)")
        if self.schedule == "interleaved" and self.vpp == 1:
            raise ValueError("schedule 'interleaved' needs vpp > 1 (virtual pipeline chunks per stage)")
        if self.schedule == "1f1b" and self.vpp > 1:
            raise ValueError(f"schedule '1f1b' contradicts vpp={self.vpp} (vpp > 1 is the interleaved schedule)")
        return self

    @property
    def pipeline_schedule(self) -> str:
        """The schedule the layout runs: ``interleaved`` when vpp > 1, else ``1f1b``."""
        return "interleaved" if self.vpp > 1 else "1f1b"

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def microbatches(self) -> int:
        """Micro-batches per pipeline per step: m = global_batch / (micro_batch x dp)."""
        return max(1, self.global_batch // (self.micro_batch * self.dp))
