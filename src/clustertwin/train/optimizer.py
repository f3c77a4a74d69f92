"""The optimizer step: Adam streams ``OPTIMIZER_BYTES_MOVED`` bytes per local parameter through HBM at
``hbm_efficiency`` (read the fp32 gradient (4), read + write the fp32 master weight, m and v (24),
write the 16-bit weight (2)); ZeRO >= 1 shards the update over the DP x CP group."""

from __future__ import annotations

from clustertwin.train.layout import where

OPTIMIZER_BYTES_MOVED = 30


def optimizer_time(local_params, zero, dp_size, hbm_bytes_per_s: float):
    """Seconds of one optimizer step on a GPU holding ``local_params`` parameters."""
    shard = where(zero >= 1, dp_size, 1)
    return local_params / shard * OPTIMIZER_BYTES_MOVED / hbm_bytes_per_s
