"""Failure-adjusted time-to-train of a training layout: the failure-free time of a token budget at the
layout's throughput (:func:`clustertwin.train.time_to_train`), stretched by failures, checkpoints and
restarts of the reliability model (:func:`clustertwin.reliability.with_failures`):

    wall = failure-free time / ETTR,   GPU-hours = GPUs x wall / 3600

(ETTR = effective training time ratio of the analytical expectation; the Monte Carlo adds the p10/p50/p90
spread of the wall time). Published GPU-hours of a run are allocated time, i.e. this wall time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clustertwin.reliability.model import ReliabilityResult, with_failures
from clustertwin.specs import ClusterSpec, ModelSpec
from clustertwin.train import TimeToTrain, TrainEstimate, checkpoint_bytes, time_to_train
from clustertwin.units import DAY_S, HOUR_S


@dataclass
class FailureAdjustedTime:
    """Time-to-train without and with failures, and the reliability result behind it."""

    failure_free: TimeToTrain
    reliability: ReliabilityResult

    @property
    def ettr(self) -> float:
        return self.reliability.analytic.ettr

    @property
    def days(self) -> float:
        return self.reliability.analytic.wall_s / DAY_S

    @property
    def gpu_hours(self) -> float:
        return self.reliability.analytic.wall_s / HOUR_S * self.reliability.gpus

    def to_dict(self) -> dict[str, Any]:
        rel, a = self.reliability, self.reliability.analytic
        out: dict[str, Any] = {
            "policy": rel.policy, "checkpoint_interval_s": rel.interval_s, "ettr": a.ettr,
            "unexpected_interruptions": a.unexpected_interruptions, "days": self.days,
            "gpu_hours": self.gpu_hours, "failure_free_days": self.failure_free.days,
            "failure_free_gpu_hours": self.failure_free.gpu_hours,
        }
        if rel.monte_carlo is not None:
            wall = rel.monte_carlo.summary()["wall_s"]
            out.update({f"days_{k}": v / DAY_S for k, v in wall.items() if k in ("p10", "p50", "p90")})
        return out


def time_to_train_with_failures(est: TrainEstimate, tokens: float, cluster: ClusterSpec, model: ModelSpec, *,
                                usd_per_gpu_hour: float = 0.0, **reliability: Any) -> FailureAdjustedTime:
    """Failure-free and failure-adjusted time of ``tokens`` at ``est``'s throughput on ``cluster``.
    Keyword arguments go to :func:`~clustertwin.reliability.with_failures` (``async_checkpoint``,
    ``hot_spares``, ``policy``, ``trials``, ``seed`` ...)."""
    ttt = time_to_train(est, tokens, cluster, usd_per_gpu_hour)
    rel = with_failures(est.gpus, ttt.days * DAY_S, checkpoint_bytes(model), cluster, step_time_s=est.step_time_s,
                        **reliability)
    return FailureAdjustedTime(ttt, rel)
