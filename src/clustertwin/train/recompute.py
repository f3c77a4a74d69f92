"""Recomputation, decided once: what a layout re-runs in the backward pass, its time and its FLOPs.

A layout's recompute (:class:`~clustertwin.train.layout.Layouts` ``recompute``, ``rc_modules``,
``rc_layers``) is one of, per layer and micro-batch:

* **full** (Narayanan et al. 2021): the layer's forward runs again; with Megatron's
  ``--recompute-num-layers`` only a share ``f`` of a chunk's layers
  (:func:`~clustertwin.train.memory_moe.full_recompute_fraction`). Passes ``2 + f``; hardware FLOPs
  ``+ f x`` the forward (:func:`clustertwin.train.flops.flops_per_token` ``"full"``).
* **selective**: Korthikanti et al. 2022 re-run the attention core (``+ 4 s q`` FLOPs per token and
  layer); PyTorch-native stacks with the op-level policy (torchtitan) re-run the unsaved GEMMs, a share
  :func:`~clustertwin.train.memory_fsdp.op_sac_recompute_share` of the block's forward.
* **per-module** (Megatron-Core ``--recompute-modules``): the modules' forward seconds
  (:func:`~clustertwin.train.moe.module_recompute_s`) and FLOPs
  (:func:`~clustertwin.train.moe.module_recompute_flops_per_token`); not added on top of full recompute.

The step model (:mod:`~clustertwin.train.step`) takes the time and kernel counts from here and the
MFU/HFU accounting the FLOPs, so the two can never disagree about what is recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clustertwin.specs.model import ModelSpec
from clustertwin.train import flops as F
from clustertwin.train.attention import KERNELS_FLASH_ATTENTION
from clustertwin.train.layout import RECOMPUTE_CODES, Layouts, where
from clustertwin.train.memory_fsdp import op_sac_recompute_share
from clustertwin.train.memory_moe import full_recompute_fraction
from clustertwin.train.moe import module_recompute_flops_per_token


@dataclass(frozen=True)
class Recompute:
    """What every layout of a batch recomputes (masks and shares are arrays for a batch, scalars for one)."""

    full: Any
    """full recompute (of some or all layers)"""
    selective: Any
    """selective recompute"""
    full_fraction: Any
    """share of a chunk's layers the full recompute re-runs (0 without it)"""
    op_level: bool
    """the stack's selective policy is op-level (torchtitan) rather than the attention core"""
    modules: Any
    """bitmask of per-module recompute (:data:`~clustertwin.train.memory_moe.RECOMPUTE_MODULES`)"""

    @classmethod
    def of(cls, lay: Layouts, model: ModelSpec, selective_policy: str) -> Recompute:
        """The recompute of ``lay`` under a stack whose selective policy is ``selective_policy``."""
        return cls(full=lay.recompute == RECOMPUTE_CODES["full"], selective=lay.recompute == RECOMPUTE_CODES["selective"],
                   full_fraction=full_recompute_fraction(lay, model.layers), op_level=selective_policy == "op",
                   modules=lay.rc_modules)

    @property
    def passes(self) -> Any:
        """Passes over the layer per micro-batch: forward + backward (+ the recomputed forward share)."""
        return 2 + self.full_fraction

    def layer_s(self, layer_fwd_s: Any, core_fwd_s: Any, module_s: Any, op_share: float) -> Any:
        """Seconds recomputed per layer and micro-batch: ``f (layer + core forward)`` under full recompute,
        the core forward (or ``op_share x`` the layer's GEMM forward at op level) under selective, the
        modules' forward otherwise."""
        sel_s = op_share * layer_fwd_s if self.op_level else core_fwd_s
        return self.full_fraction * (layer_fwd_s + core_fwd_s) + where(self.selective, sel_s, 0.0) + \
            where(self.full, 0.0, module_s)

    def extra_kernels(self, layer_kernels: Any) -> Any:
        """Kernels selective recompute launches again: the block's (op level) or the attention core's."""
        return where(self.selective, layer_kernels if self.op_level else KERNELS_FLASH_ATTENTION, 0)

    def flops_per_token(self, model: ModelSpec, seq_len: int, causal: bool) -> Any:
        """Hardware FLOPs per token that recomputation adds to the model FLOPs (the HFU - MFU gap)."""
        full = F.flops_per_token(model, seq_len, "full", causal).recompute
        if self.op_level:
            sel = op_sac_recompute_share(model) * full
        else:
            sel = F.flops_per_token(model, seq_len, "selective", causal).recompute
        return where(self.full, self.full_fraction * full, where(self.selective, sel, 0.0)) + \
            where(self.full, 0.0, module_recompute_flops_per_token(model, seq_len, self.modules, causal))
