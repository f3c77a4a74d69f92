"""Recovery styles: how a job detects a fault, restarts, and where its checkpoint lives.

Three styles the field reports (each constant carries its source):

* ``requeue``: the scheduler requeues the job; it restarts from the last checkpoint on shared storage and
  waits for a replacement node after a hardware fault. Restart overhead 5 min (detection, drain, relaunch,
  NCCL init, warm-up: Meta RSC's ETTR model, arXiv 2410.21680), checkpoint saved and loaded through the
  storage system (:mod:`clustertwin.reliability.checkpoint`).
* ``in_memory``: checkpoints go to host memory and a peer node's host memory (GEMINI, Wang et al.
  SOSP'23: ">13x faster failure recovery"; ByteRobust: every-step in-memory checkpoints). The job stalls
  only for the device-to-host snapshot; the copy to a peer takes ``bytes per node / node fabric
  bandwidth`` and the restart loads from the peer the same way. Automated detection of the faulty machine
  3.6 s on average (Minder, Deng et al. NSDI'25), relaunch with communicator initialisation 30 s (MegaScale,
  NSDI'24 section 3.5: under 30 s at more than 10,000 GPUs). MegaScale's bounds on the whole recovery
  (detection plus diagnostic tests under 10 min on average; back to the pre-crash progress within 15 min,
  section 6.3) are checks of it (tests/reliability/test_reliability_field.py).
* ``warm_standby``: ``in_memory`` plus validated spare nodes waiting, so a hardware fault never waits for
  a replacement (ByteRobust's warm standby sized at the P99 of concurrent failures; Gemini keeps hot
  standby TPU cubes per superpod, Gemini Team arXiv 2312.11805): policy ``spares``.

``recovery_times`` is the public entry point for other layers (e.g. a scheduler co-simulation): the
detection, restart, load, save-stall and replacement times of a style for a given checkpoint, and the
resulting time to repair ``mttr = detect + restart + load (+ replace for a hardware fault without a spare)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.reliability.checkpoint import CheckpointCost
from clustertwin.reliability.policy import RECOVERY_STYLES, RecoveryStyle, RestartParams
from clustertwin.units import GB

REQUEUE_RESTART_S = RestartParams().restart_overhead_s
"""Restart overhead of a requeued job, detection included (:attr:`RestartParams.restart_overhead_s`)."""
IN_MEMORY_DETECT_S = 3.6
"""Average detection latency of the faulty machine (Minder, Deng et al. NSDI'25, abstract)."""
IN_MEMORY_RESTART_S = 30.0
"""Relaunch with fast communicator initialisation (MegaScale, NSDI'24 section 3.5: < 30 s, > 10,000 GPUs)."""
REPLACE_S = RestartParams().replace_s
"""Wait for a replacement node when no spare is ready (:attr:`RestartParams.replace_s`)."""


@dataclass(frozen=True)
class RecoveryProfile:
    """The constants of one recovery style."""

    style: RecoveryStyle
    detect_s: float
    restart_s: float
    checkpoint_to: Literal["storage", "peer_memory"]
    spares: bool


PROFILES: dict[str, RecoveryProfile] = {
    "requeue": RecoveryProfile("requeue", 0.0, REQUEUE_RESTART_S, "storage", False),
    "in_memory": RecoveryProfile("in_memory", IN_MEMORY_DETECT_S, IN_MEMORY_RESTART_S, "peer_memory", False),
    "warm_standby": RecoveryProfile("warm_standby", IN_MEMORY_DETECT_S, IN_MEMORY_RESTART_S, "peer_memory", True),
}


def check_recovery(style: str) -> RecoveryStyle:
    if style not in PROFILES:
        raise SpecError(f"unknown recovery style '{style}'{did_you_mean(style, RECOVERY_STYLES)} "
                        f"(valid: {', '.join(RECOVERY_STYLES)})")
    return style  # type: ignore[return-value]


def peer_copy_s(ck: CheckpointCost, node_fabric_gb_per_s: float) -> float:
    """Copy of one node's share of the checkpoint to a peer's host memory: ``bytes / nodes / fabric GB/s``."""
    if not (math.isfinite(node_fabric_gb_per_s) and node_fabric_gb_per_s > 0):
        raise SpecError(f"node fabric bandwidth must be a finite number > 0 GB/s (got {node_fabric_gb_per_s!r})")
    return ck.host_bytes_per_node / (node_fabric_gb_per_s * GB)


def apply_style(style: str, ck: CheckpointCost, node_fabric_gb_per_s: float) -> CheckpointCost:
    """The checkpoint cost under a style: peer-memory styles write and load over the fabric instead of
    through storage (``write_s = load_s = peer copy``)."""
    prof = PROFILES[check_recovery(style)]
    if prof.checkpoint_to == "storage":
        return ck
    t = peer_copy_s(ck, node_fabric_gb_per_s)
    bw = ck.bytes / t / GB if t > 0 else math.inf
    return replace(ck, write_s=t, load_s=t, write_gb_per_s=bw, read_gb_per_s=bw)


@dataclass(frozen=True)
class RecoveryTimes:
    """Times of one recovery (seconds) under a style, for one checkpoint."""

    style: RecoveryStyle
    detect_s: float
    restart_s: float
    load_s: float
    save_stall_s: float
    """Stall of one checkpoint (storage: snapshot + write; peer memory: the snapshot only)."""
    durable_after_s: float
    """Seconds after the stall until the checkpoint survives a node loss."""
    replace_s: float
    """Wait for a replacement node after a hardware fault (0 with warm standby)."""

    @property
    def mttr_s(self) -> float:
        """Mean time to resume after a fault that needs no new node: detect + restart + load."""
        return self.detect_s + self.restart_s + self.load_s

    @property
    def mttr_hardware_s(self) -> float:
        """After a hardware fault: :attr:`mttr_s` + the replacement wait."""
        return self.mttr_s + self.replace_s

    def to_dict(self) -> dict[str, object]:
        return {**self.__dict__, "mttr_s": self.mttr_s, "mttr_hardware_s": self.mttr_hardware_s}


def recovery_times(style: str, ck: CheckpointCost, node_fabric_gb_per_s: float) -> RecoveryTimes:
    """Detection, restart, load, save stall and replacement times of ``style`` for checkpoint ``ck``
    (``node_fabric_gb_per_s``: a node's fabric bandwidth, for peer-memory copies)."""
    prof = PROFILES[check_recovery(style)]
    c = apply_style(style, ck, node_fabric_gb_per_s)
    peer = prof.checkpoint_to == "peer_memory"
    return RecoveryTimes(style=prof.style, detect_s=prof.detect_s, restart_s=prof.restart_s, load_s=c.load_s,
                         save_stall_s=c.async_blocking_s if peer else c.sync_blocking_s,
                         durable_after_s=c.write_s if peer else 0.0,
                         replace_s=0.0 if prof.spares else REPLACE_S)
