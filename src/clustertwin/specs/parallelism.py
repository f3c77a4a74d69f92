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
    """Expert-parallel degree (MoE); must divide dp*cp and the expert count."""
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
    zero: Literal[0, 1, 2, 3] = 0
    """ZeRO stage over DP (1 = Megatron distributed optimizer; 3 = FSDP)."""
    precision: TrainPrecision = "bf16"
    """GEMM precision; fp8 = FP8 GEMMs with BF16 elsewhere."""
    schedule: Literal["1f1b", "interleaved"] | None = None
    """Pipeline schedule: 1F1B, or interleaved 1F1B with ``vpp`` > 1 virtual chunks per stage; default
    (None) follows ``vpp``. GPipe (all forwards, then all backwards) is not modelled."""
    software_stack: Literal["auto", "te", "legacy"] = "auto"
    """Training software: te (Megatron-Core + Transformer Engine: fused flash attention, TP communication
    overlapped with GEMMs), legacy (Megatron-LM / Megatron-DeepSpeed: unfused attention, TP communication
    exposed), auto (by GPU generation, ``TrainParams.te_stack_min_year``)."""

    @model_validator(mode="after")
    def _check(self) -> ParallelismSpec:
        if self.global_batch % (self.micro_batch * self.dp) and "dp" in self.model_fields_set:
            raise ValueError(
                f"global_batch={self.global_batch} is not divisible by micro_batch x dp = "
                f"{self.micro_batch} x {self.dp}"
            )
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
