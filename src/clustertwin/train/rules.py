"""Validity rules of a parallel layout (vectorised): which layouts Megatron-style training can run.

Each rule has a name (the class of rejection the search reports) and a mask of violating layouts:

* ``heads_tp``: query heads and KV heads divisible by tp (or tp a multiple of the KV heads, which are
  then replicated);
* ``layers_pp``: the stage plan can be built (:func:`clustertwin.train.pipeline.stage_plan`): every
  chunk holds at least one layer slot; explicit first/last stage layers leave a rest that the other
  stages share evenly (and divide by vpp);
* ``vpp_needs_pp``: virtual chunks only with pipeline parallelism, and m divisible by pp when interleaved;
* ``vpp_whole_layers``: with vpp > 1 and the balanced split, every virtual chunk holds the same whole number
  of layer slots, (layers + embedding/loss slots) divisible by pp x vpp (Megatron-LM
  ``TransformerConfig.__post_init__``: layers divisible by pp, and the layers of a stage by vpp, unless a
  custom pipeline layout string or first/last stage layers are given; those are checked in
  :func:`clustertwin.train.pipeline.stage_plan` and :mod:`clustertwin.train.layout_string`);
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

RULES = ("heads_tp", "layers_pp", "vpp_needs_pp", "vpp_whole_layers", "batch_divisibility", "seq_cp",
         "experts_ep", "sp_needs_tp", "zero_needs_dp")

MESSAGES = {
    "heads_tp": "attention heads (or KV heads) not divisible by tp",
    "layers_pp": "no stage plan: fewer layer slots than pp x vpp chunks, or first/last stage layers that leave "
                 "a rest the other stages cannot share evenly",
    "vpp_needs_pp": "virtual pipeline chunks need pp > 1 and micro-batches divisible by pp",
    "vpp_whole_layers": "layers per virtual pipeline chunk must be whole: (layers + embedding/loss slots) "
                        "divisible by pp x vpp (or give first/last_stage_layers or a pipeline_layout string)",
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
    slots = model.layers + lay.emb_split + lay.loss_split
    balanced = (lay.first == 0) & (lay.last == 0) & (lay.from_string == 0)
    vpp_frac = (vpp > 1) & balanced & (slots % np.maximum(pp * vpp, 1) != 0)
    experts = model.moe.experts if model.moe else 1
    ep_bad = np.logical_not(folding_valid(lay, experts)) if model.moe else ep != 1
    return {
        "heads_tp": heads_bad,
        "layers_pp": layers_bad,
        "vpp_needs_pp": vpp_bad,
        "vpp_whole_layers": vpp_frac,
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
            if name == "vpp_whole_layers":
                return _vpp_message(model, lay)
            return MESSAGES[name]
    return None


def _vpp_message(model: ModelSpec, lay: Layouts) -> str:
    """The ``vpp_whole_layers`` message with the numbers of layout 0."""
    def at(x) -> int:
        return int(np.asarray(x).reshape(-1)[0])
    pp, vpp = at(lay.pp), at(lay.vpp)
    extra = at(lay.emb_split) + at(lay.loss_split)
    slots = model.layers + extra
    what = f"{model.layers} layers" + (f" + {extra} embedding/loss slot{'s' * (extra > 1)}" if extra else "")
    fits = [v for v in range(1, vpp + 1) if slots % (pp * v) == 0]
    return (f"vpp={vpp} leaves {slots / (pp * vpp):.2f} layers per virtual chunk ({what} over pp x vpp = "
            f"{pp} x {vpp} chunks); Megatron needs whole chunks: use vpp in {fits or [1]}, or give "
            "first/last_stage_layers or a pipeline_layout string")


#: largest vpp offered beyond the search's range (Megatron allows one layer per virtual chunk)
VPP_WHOLE_MAX = 32
#: embedding/loss slots a balanced split may add (none, the loss, both)
_SPLIT_SLOTS = (0, 1, 2)


def whole_chunks(layers: int, pp: int, vpp: int) -> bool:
    """Whether ``pp x vpp`` virtual chunks can hold whole layers for some balanced split (the layers alone,
    or with the embedding and/or loss slots)."""
    return any((layers + k) % (pp * vpp) == 0 for k in _SPLIT_SLOTS)


def searched_vpps(layers: int, pp: int, vmax: int) -> list[int]:
    """vpp values a search offers for ``pp`` stages: 1..``vmax`` with at least one layer slot per chunk;
    when none of 2..``vmax`` gives whole chunks for any balanced split (e.g. 92 layers on pp 4: 23 per
    stage), the whole-chunk values up to :data:`VPP_WHOLE_MAX` instead (vpp 23: one layer per chunk,
    Megatron's ``--num-layers-per-virtual-pipeline-stage 1``)."""
    base = [v for v in range(1, vmax + 1) if pp * v <= layers + 2]
    if vmax <= 1 or any(whole_chunks(layers, pp, v) for v in base if v > 1):
        return base
    return base + [v for v in range(vmax + 1, VPP_WHOLE_MAX + 1) if pp * v <= layers + 2 and whole_chunks(layers, pp, v)]
