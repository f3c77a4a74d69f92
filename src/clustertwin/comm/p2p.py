"""How many channels NCCL gives one send/recv, by message size (NCCL >= 2.19 ``enqueue.cc``).

A p2p operation between two ranks runs on up to ``nChannelsPerPeer`` channels, each one CTA copying its
part. NCCL (``ncclTopoComputeP2pChannels`` in ``paths.cc``, ``scheduleP2pTasksToPlan`` and
``calcP2pChunkSize`` in ``enqueue.cc``):

* per peer over NVLink: ``2 x links`` channels (links = path bandwidth / one link's bandwidth), at most
  the communicator's p2p channels (32), rounded up to a power of two;
* ``nChannelsMin`` = that, halved while ``nChannelsMin x nRanks > p2pnChannels``; ``nChannelsMax`` halved
  while ``nChannelsMax x nRanks > 4 x p2pnChannels``;
* a message of S bytes starts on ``nChannelsMin`` channels and doubles them while the per-channel part
  exceeds ``maxSize`` (``32 x stepSize`` on one node, ``stepSize`` across nodes; stepSize = the p2p
  chunk, 512 KiB over NVLink), up to ``nChannelsMax``; parts are at least ``stepSize / 8``.

So on 8 ranks of an NVSwitch node a send/recv runs on 4 channels up to 64 MiB, 8 up to 128 MiB and 16
above: the knee of nccl-tests' ``sendrecv_perf`` between 128 and 256 MiB. The bandwidth of each channel
is ``p2p_channel_link_fraction`` of one NVLink link (:class:`~clustertwin.comm.params.CommParams`).
"""

from __future__ import annotations

import numpy as np

from clustertwin.comm import constants as C


def _pow2_up(x: int) -> int:
    return 1 << max(int(x) - 1, 0).bit_length()


def channels_per_peer(links: float) -> int:
    """``p2pnChannelsPerPeer`` over NVLink: pow2Up(min(p2pnChannels, 2 x links)), at most p2pnChannels."""
    return min(_pow2_up(min(C.P2P_MAX_CHANNELS, 2 * max(int(links), 1))), C.P2P_MAX_CHANNELS)


def channel_range(per_peer: int, n_ranks: int) -> tuple[int, int]:
    """(nChannelsMin, nChannelsMax) of a p2p operation among ``n_ranks`` ranks."""
    lo = hi = per_peer
    while lo * n_ranks > C.P2P_MAX_CHANNELS and lo > 1:
        lo //= 2
    while hi * n_ranks > 4 * C.P2P_MAX_CHANNELS and hi > 1:
        hi //= 2
    return lo, hi


def p2p_channels(nbytes: np.ndarray, lo: int, hi: int, step_bytes: float, multi_node: bool) -> np.ndarray:
    """Channels a send/recv of ``nbytes`` runs on (``calcP2pChunkSize``), as float array."""
    size = np.asarray(nbytes, dtype=float)
    max_part = step_bytes if multi_node else 32.0 * step_bytes
    min_part = step_bytes / 8.0
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.ceil(np.log2(np.maximum(size / (lo * max_part), 1.0)))
    nch = lo * np.exp2(np.clip(need, 0.0, np.log2(hi / lo)))
    part = np.maximum(min_part, size / nch)
    return np.maximum(np.minimum(nch, np.ceil(size / part)), 1.0)
