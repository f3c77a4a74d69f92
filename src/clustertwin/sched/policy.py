"""Queue orders and policies as small objects (the engine asks them, instead of switching on names).

A *static* order ranks every job once (``rank``); the queue is then kept as a sorted list of ranks
(``bisect.insort``). A *dynamic* order (multifactor) re-sorts the queued job ids at every pass and accrues
fair-share usage.

- ``fifo``: submit time (then trace order).
- ``sjf``: requested time limit, i.e. the runtime estimate (then submit time).
- ``priority``: job priority/QoS, highest first (then submit time).
- ``multifactor``: Slurm priority/multifactor: ``P = w_age min(wait / max_age, 1) + w_fs 2**(-U / S) +
  w_size gpus / cluster_gpus + w_qos priority / max_priority``, ``U`` the account's GPU-seconds decayed
  with half-life ``half_life_s`` over everyone's, ``S`` = 1 / number of accounts (Slurm classic
  fair-share with equal shares). Accounts are users, or teams when a quota/partition layout names them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.sched.jobs import JobTable
from clustertwin.units import DAY_S

SLURM_PRIORITY_MAX_AGE_S = 7 * DAY_S
"""Slurm ``PriorityMaxAge`` default (7-0): age factor saturates after 7 days of waiting."""
SLURM_PRIORITY_DECAY_HALF_LIFE_S = 7 * DAY_S
"""Slurm ``PriorityDecayHalfLife`` default (7-0): usage half-life for fair-share."""


@dataclass(frozen=True)
class MultifactorWeights:
    """Weights of the multifactor priority. Slurm's shipped weights are all 0 (sites set them); these
    defaults make fair-share and QoS dominate age and size, a common site choice (assumption)."""

    age: float = 1000.0
    fairshare: float = 10000.0
    job_size: float = 1000.0
    qos: float = 10000.0
    max_age_s: float = SLURM_PRIORITY_MAX_AGE_S
    half_life_s: float = SLURM_PRIORITY_DECAY_HALF_LIFE_S


class QueueOrder:
    """Base: a static order by the columns returned from :meth:`keys` (last key most significant)."""

    name = "fifo"
    dynamic = False

    def keys(self, jobs: JobTable) -> tuple[np.ndarray, ...]:
        return (jobs.submit_s,)

    def rank(self, jobs: JobTable) -> tuple[np.ndarray, np.ndarray]:
        """``(rank of each job, job of each rank)``."""
        n = len(jobs)
        idx = np.arange(n)
        order = np.lexsort((idx, *self.keys(jobs))) if n else idx
        rank = np.empty(n, dtype=np.int64)
        rank[order] = idx
        return rank, order

    def priorities(self, t: float, queue: np.ndarray, ctx) -> np.ndarray:
        """Priority of each queued job (higher first) at time ``t``: for a static order, minus its rank, so a
        dynamic re-sort of a static order keeps it (dynamic orders override this)."""
        rank, _ = self.rank(ctx.jobs)
        return -rank[queue].astype(np.float64)


class Fifo(QueueOrder):
    name = "fifo"


class ShortestJobFirst(QueueOrder):
    name = "sjf"

    def keys(self, jobs: JobTable) -> tuple[np.ndarray, ...]:
        return (jobs.submit_s, jobs.limit_s)


class PriorityFirst(QueueOrder):
    name = "priority"

    def keys(self, jobs: JobTable) -> tuple[np.ndarray, ...]:
        return (jobs.submit_s, -jobs.priority)


class Multifactor(QueueOrder):
    """Dynamic order; ``ctx`` provides ``account_usage`` (decayed GPU-s per account), ``account_of``
    (account index per job), ``accounts``, ``cluster_gpus`` and ``max_priority``."""

    name = "multifactor"
    dynamic = True

    def priorities(self, t: float, queue: np.ndarray, ctx) -> np.ndarray:
        w: MultifactorWeights = ctx.cfg.weights
        jobs = ctx.jobs
        usage_all = ctx.account_usage
        total = float(usage_all.sum())
        share = 1.0 / max(ctx.accounts, 1)
        usage = usage_all[ctx.account_of[queue]] / total if total > 0 else np.zeros(len(queue))
        return (w.age * np.minimum((t - jobs.submit_s[queue]) / w.max_age_s, 1.0)
                + w.fairshare * 2.0 ** (-usage / share)
                + w.job_size * jobs.total_gpus[queue] / ctx.cluster.total_gpus
                + w.qos * jobs.priority[queue] / ctx.max_priority)


ORDERS: dict[str, QueueOrder] = {o.name: o for o in (Fifo(), ShortestJobFirst(), PriorityFirst(), Multifactor())}


def get_order(name: str) -> QueueOrder:
    if name not in ORDERS:
        raise SpecError(f"unknown queue order '{name}'{did_you_mean(name, ORDERS)}; choose from {', '.join(ORDERS)}")
    return ORDERS[name]


@dataclass(frozen=True)
class Policy:
    """A queue order plus whether EASY backfill and priority preemption are on. ``order`` may be given
    by name."""

    name: str
    order: QueueOrder
    backfill: bool
    preempt: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.order, str):
            object.__setattr__(self, "order", get_order(self.order))
        if not isinstance(self.order, QueueOrder):
            raise SpecError(f"policy '{self.name}': order must be a queue order, got {self.order!r}")


POLICIES: dict[str, Policy] = {
    "fifo": Policy("fifo", ORDERS["fifo"], backfill=False),
    "sjf": Policy("sjf", ORDERS["sjf"], backfill=False),
    "backfill": Policy("backfill", ORDERS["fifo"], backfill=True),
    "sjf-backfill": Policy("sjf-backfill", ORDERS["sjf"], backfill=True),
    "multifactor": Policy("multifactor", ORDERS["multifactor"], backfill=True),
    "priority-preempt": Policy("priority-preempt", ORDERS["priority"], backfill=True, preempt=True),
}


def get_policy(name: str) -> Policy:
    if name not in POLICIES:
        raise SpecError(f"unknown policy '{name}'{did_you_mean(name, POLICIES)}; choose from {', '.join(POLICIES)}")
    return POLICIES[name]
