"""Exposed tensor-parallel communication of one layer and micro-batch.

Two all-reduces of the layer's activations (T x h x 2 bytes; 4 in FP32/TF32 training) per forward, backward and recomputed
forward; with sequence parallelism each becomes an all-gather + reduce-scatter pair (same volume,
Korthikanti et al. 2022). ``tp_comm_overlap`` of it hides behind GEMMs on the Transformer-Engine stack
(userbuffer overlap); the older stack exposes all of it.
"""

from __future__ import annotations

from clustertwin.train.hardware import Hardware
from clustertwin.train.layout import Layouts, where
from clustertwin.train.params import TrainParams

KERNELS_PER_TP_COLLECTIVE = 1


def tp_exposed(lay: Layouts, T, h: int, passes, coll, tp_group, hw: Hardware, params: TrainParams):
    """Exposed TP seconds of one layer over ``passes`` passes, and the forward kernels it adds."""
    act_bytes = T * h * hw.value_bytes
    one = where(lay.sp > 0, coll("all_gather", act_bytes, tp_group) + coll("reduce_scatter", act_bytes, tp_group),
                coll("all_reduce", act_bytes, tp_group))
    hidden = params.tp_comm_overlap if hw.tp_overlap else 0.0
    kernels = where(lay.tp > 1, 2 * KERNELS_PER_TP_COLLECTIVE * (1 + where(lay.sp > 0, 1, 0)), 0)
    return 2 * one * passes * (1.0 - hidden), kernels
