"""Restart overhead, recovery policies and the scenario that both the analytical model and the Monte Carlo
simulate.

Restart after an interruption of cause c (wall-clock seconds until training resumes):

``R_c = restart_overhead + load + hang_detect·[c is a hang] + replace·[c needs a node and none is ready]``

Policies:
- ``restart``: every hardware fault waits for a replacement node (drained, provisioned, health-checked).
- ``spares``: K hot spares (validated, warm) replace failed nodes at once; a failed node goes to repair
  for ``repair_h`` and then back to the pool. When all spares are in repair, the job waits as in
  ``restart``. ByteRobust sizes its warm standby at the P99 of the number of concurrently failed nodes.
- ``elastic``: the job drops the failed node and continues with fewer (throughput × the remaining
  fraction) until it is repaired; below ``elastic_min_fraction`` it waits for a replacement instead.

Checkpointing: every ``interval_s`` of computation the job stalls for ``b1`` (first checkpoint after a
restart) or ``b`` seconds; the checkpoint is durable ``lag`` seconds after the stall ends.
Synchronous: ``b1 = b = snapshot + write``, ``lag = 0``. Asynchronous: ``b1 = snapshot``,
``b = snapshot + max(0, write − τ)`` (a snapshot waits for the previous background write),
``lag = write``. Planned maintenance is announced: the job saves synchronously, then restarts, and loses
no work; a planned stop always lasts one synchronous save plus a restart, even when it finds the job
restarting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.units import HOUR_S, MINUTE_S

Policy = Literal["restart", "spares", "elastic"]
_ROUNDING_GUARD = 1e-9  # keeps floor(0.5 / (1/8)) = 4 despite binary rounding
POLICIES: tuple[str, ...] = ("restart", "spares", "elastic")
RecoveryStyle = Literal["requeue", "in_memory", "warm_standby"]
"""How a job recovers (:mod:`clustertwin.reliability.recovery`): requeue from storage, in-memory / peer
checkpoints, or in-memory checkpoints with warm-standby nodes."""
RECOVERY_STYLES: tuple[str, ...] = ("requeue", "in_memory", "warm_standby")


@dataclass(frozen=True)
class RestartParams:
    """Named restart-time parameters (seconds unless the name says otherwise), each with its source."""

    restart_overhead_s: float = 5.0 * MINUTE_S
    """Detection, drain, relaunch, NCCL init and warm-up of a restart, excluding the checkpoint load:
    the 5-minute restart overhead of Meta's RSC ETTR model (arXiv 2410.21680)."""
    hang_detect_s: float = 10.0 * MINUTE_S
    """Extra time before a hang is detected: PyTorch's default NCCL process-group timeout (10 min,
    torch.distributed default_pg_nccl_timeout)."""
    replace_s: float = 15.0 * MINUTE_S
    """Wait for a replacement node when no hot spare is ready: the node passes a DCGM level-3 diagnostic
    (about 15 min, NVIDIA DCGM dcgmi diag -r 3 documentation) before it joins."""
    repair_h: float = 24.0
    """Time a failed node spends out of the pool before it is a spare again. Assumption (no public figure
    found): diagnosed, repaired or swapped within a day."""
    elastic_min_fraction: float = 0.5
    """Elastic policy: below this fraction of the job's nodes, wait for replacements instead of shrinking
    further. Assumption."""
    spares_quantile: float = 0.99
    """Default hot-spare count: this quantile of the number of nodes in repair at once (ByteRobust sizes
    warm standby at the P99 of a binomial)."""
    recovery: RecoveryStyle = "requeue"
    """Recovery style; :func:`clustertwin.reliability.recovery.recovery_times` gives its detection, restart,
    load and save times (``estimate(recovery=...)`` overrides it)."""

    def __post_init__(self) -> None:
        for name in ("restart_overhead_s", "hang_detect_s", "replace_s", "repair_h"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise SpecError(f"{name} must be a finite number >= 0 (got {v!r})")
        if not 0.0 < self.elastic_min_fraction <= 1.0:
            raise SpecError(f"elastic_min_fraction must be in (0, 1] (got {self.elastic_min_fraction!r})")
        if self.recovery not in RECOVERY_STYLES:
            raise SpecError(f"unknown recovery style '{self.recovery}'{did_you_mean(self.recovery, RECOVERY_STYLES)}"
                            f" (valid: {', '.join(RECOVERY_STYLES)})")
        if not 0.0 < self.spares_quantile < 1.0:
            raise SpecError(f"spares_quantile must be in (0, 1) (got {self.spares_quantile!r})")

    @property
    def repair_s(self) -> float:
        return self.repair_h * HOUR_S


def check_policy(policy: str) -> Policy:
    if policy not in POLICIES:
        raise SpecError(f"unknown policy '{policy}'{did_you_mean(policy, POLICIES)} "
                        f"(valid: {', '.join(POLICIES)})")
    return policy  # type: ignore[return-value]


@dataclass(frozen=True)
class Scenario:
    """Everything a run's simulation needs, in seconds and per-second rates (no specs, no I/O)."""

    gpus: int
    work_s: float | None
    """Failure-free compute time of the run (fixed-work mode), or None."""
    horizon_s: float | None
    """Wall-clock window (fixed-time mode, e.g. a 54-day snapshot), or None."""
    cause_names: tuple[str, ...]
    rate_per_s: tuple[float, ...]
    """Job-level rate of each cause, per second."""
    replaces_node: tuple[bool, ...]
    planned: tuple[bool, ...]
    restart_s: tuple[float, ...]
    """In-place restart time of each cause: overhead + load (+ hang detection)."""
    replace_s: float
    policy: Policy
    hot_spares: int
    repair_s: float
    elastic_unit_fraction: float
    """Fraction of the job's throughput one node carries (1 / nodes)."""
    elastic_min_fraction: float
    interval_s: float
    """Compute time between checkpoints τ (``inf``: never checkpoint)."""
    snapshot_s: float
    write_s: float
    async_checkpoint: bool
    rate_log_sd: float = 0.0
    """Spread of the site factor across clusters (σ of its logarithm): the Monte Carlo multiplies each
    trial's rates by ``e^{σ Z}``, ``Z ~ N(0, 1)`` (0: every trial on the same site)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_log_sd) and self.rate_log_sd >= 0):
            raise SpecError(f"rate_log_sd must be a finite number >= 0 (got {self.rate_log_sd!r})")
        if (self.work_s is None) == (self.horizon_s is None):
            raise SpecError("give exactly one of the run's failure-free compute time or a wall-clock window")
        for name in ("work_s", "horizon_s"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise SpecError(f"{name} must be a finite number > 0 (got {v!r})")
        if not self.interval_s > 0:
            raise SpecError(f"checkpoint interval must be > 0 s (got {self.interval_s!r})")
        if self.hot_spares < 0:
            raise SpecError(f"hot spares must be >= 0 (got {self.hot_spares})")
        n = len(self.cause_names)
        if not (len(self.rate_per_s) == len(self.replaces_node) == len(self.planned) == len(self.restart_s) == n):
            raise SpecError("cause arrays differ in length")
        check_policy(self.policy)

    # ---- checkpoint timing (see module docstring) ----
    @property
    def wait_s(self) -> float:
        """Asynchronous only: stall waiting for the previous background write, ``max(0, write − τ)``."""
        return max(0.0, self.write_s - self.interval_s) if self.async_checkpoint else 0.0

    @property
    def first_blocking_s(self) -> float:
        return self.snapshot_s if self.async_checkpoint else self.snapshot_s + self.write_s

    @property
    def blocking_s(self) -> float:
        return self.snapshot_s + (self.wait_s if self.async_checkpoint else self.write_s)

    @property
    def lag_s(self) -> float:
        return self.write_s if self.async_checkpoint else 0.0

    @property
    def planned_checkpoint_s(self) -> float:
        """A planned stop saves synchronously: snapshot + write."""
        return self.snapshot_s + self.write_s

    @property
    def total_rate_per_s(self) -> float:
        return float(sum(self.rate_per_s))

    @property
    def hardware_rate_per_s(self) -> float:
        return float(sum(r for r, hw in zip(self.rate_per_s, self.replaces_node, strict=True) if hw))

    @property
    def elastic_max_out(self) -> int:
        """Most nodes the elastic policy runs without: ``floor((1 − min_fraction) / unit_fraction)``."""
        return math.floor((1.0 - self.elastic_min_fraction) / self.elastic_unit_fraction + _ROUNDING_GUARD)
