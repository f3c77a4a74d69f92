"""Validity rules of a parallel layout (vectorised): which layouts Megatron-style training can run.

Each rule has a name (the class of rejection the search reports) and a mask of violating layouts:

* ``heads_tp``: query heads and KV heads divisible by tp (or tp a multiple of the KV heads, which are
  then replicated);
* ``layers_pp``: the stage plan can be built (:func:`clustertwin.train.pipeline.stage_plan`): every
  chunk holds at least one layer slot; explicit first/last stage layers leave a rest that the other
  stages share evenly (and divide by vpp);
* ``vpp_needs_pp``: virtual chunks only with pipeline parallelism, and m divisible by pp when interleaved;
* ``batch_divisibility``: global batch divisible by micro_batch x dp;
* ``seq_cp``: sequence divisible by 2 x cp (load-balanced causal ring attention);
* ``experts_ep``: ep divides the expert count and etp x ep divides tp x cp x dp (MoE parallel folding,
  :mod:`clustertwin.train.moe_layout`); ep = 1 for dense models;
* ``sp_needs_tp``: sequence parallelism only with tp > 1;
* ``zero_needs_dp``: ZeRO stages only with a data-parallel group (dp x cp > 1).
"""

from __future__ import annotations

import numpy as np

from clustertwin.specs.model import ModelSpec
from clustertwin.train.layout import Layouts
from clustertwin.train.moe_layout import folding_valid
from clustertwin.train.pipeline import stage_plan

RULES = ("heads_tp", "layers_pp", "vpp_needs_pp", "batch_divisibility", "seq_cp",
         "experts_ep", "sp_needs_tp", "zero_needs_dp")

MESSAGES = {
    "heads_tp": "attention heads (or KV heads) not divisible by tp",
    "layers_pp": "no stage plan: fewer layer slots than pp x vpp chunks, or first/last stage layers that leave "
                 "a rest the other stages cannot share evenly",
    "vpp_needs_pp": "virtual pipeline chunks need pp > 1 and micro-batches divisible by pp",
    "batch_divisibility": "global batch not divisible by micro_batch x dp",
    "seq_cp": "sequence length not divisible by 2 x cp",
    "experts_ep": "ep must divide the expert count and etp x ep the dense ranks tp x cp x dp (MoE parallel "
                  "folding; ep = 1 for dense models)",
    "sp_needs_tp": "sequence parallelism needs tp > 1",
    "zero_needs_dp": "ZeRO needs a data-parallel group (dp x cp > 1)",
}


def violations(model: ModelSpec, lay: Layouts, global_batch: int, gpus_per_node: int,
               seq_len: int | None = None) -> dict[str, np.ndarray]:
    """Rule name -> boolean mask of layouts breaking it."""
    s = seq_len or model.seq_len
    tp, pp, dp, cp, ep, vpp, mbs = lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.vpp, lay.mbs
    kvh = model.n_kv_heads
    heads_bad = (model.heads % tp != 0) | ((kvh % tp != 0) & (tp % kvh != 0))
    layers_bad = ~np.asarray(stage_plan(model, lay, global_batch).valid, dtype=bool)
    m = global_batch // np.maximum(mbs * dp, 1)
    vpp_bad = (vpp > 1) & ((pp == 1) | (m % pp != 0))
    experts = model.moe.experts if model.moe else 1
    ep_bad = np.logical_not(folding_valid(lay, experts)) if model.moe else ep != 1
    return {
        "heads_tp": heads_bad,
        "layers_pp": layers_bad,
        "vpp_needs_pp": vpp_bad,
        "batch_divisibility": global_batch % (mbs * dp) != 0,
        "seq_cp": (cp > 1) & (s % (2 * cp) != 0),
        "experts_ep": np.asarray(ep_bad),
        "sp_needs_tp": (lay.sp > 0) & (tp == 1),
        "zero_needs_dp": (lay.zero > 0) & (dp * cp == 1),
    }


def first_violation(model: ModelSpec, lay: Layouts, global_batch: int, gpus_per_node: int,
                    seq_len: int | None = None) -> str | None:
    """Message of the first rule layout 0 breaks (None when valid)."""
    v = violations(model, lay, global_batch, gpus_per_node, seq_len)
    for name in RULES:
        if bool(np.asarray(v[name]).reshape(-1)[0]):
            return MESSAGES[name]
    return None
