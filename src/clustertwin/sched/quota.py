"""Team quotas: fixed GPU shares, and Kueue-style cohorts with borrowing and lending.

Each team (a Kueue ClusterQueue) has a ``nominal_gpus`` quota. Without a cohort a team never runs more
than its nominal quota (fixed shares: a team's idle GPUs stay idle). In a cohort, a team may borrow the
unused quota of the others:

- ``lending_limit_gpus`` (default: all of its nominal quota) is how much of its quota a team lends; the
  rest, ``guaranteed = nominal − lending_limit``, is only ever its own;
- ``borrowing_limit_gpus`` (default: unlimited) caps how far above its nominal quota a team may go;
- a team's usage beyond its guaranteed part draws on the cohort pool, whose size is the sum of the lending
  limits; a job is admitted iff ``usage + gpus <= nominal + borrowing_limit`` and the cohort's draws
  stay within the pool (Kueue's admission rule for cohorts).

Admission is best-effort FIFO (Kueue ``BestEffortFIFO``): a job its team's quota cannot admit waits
without blocking other teams' jobs. Not modelled: Kueue's reclaim preemption (a lender taking its quota
back by evicting borrowers); borrowed GPUs return when the borrowing jobs end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError


@dataclass(frozen=True)
class TeamQuota:
    name: str
    nominal_gpus: float
    borrowing_limit_gpus: float | None = None
    lending_limit_gpus: float | None = None

    def __post_init__(self) -> None:
        for field_name in ("nominal_gpus", "borrowing_limit_gpus", "lending_limit_gpus"):
            v = getattr(self, field_name)
            if v is not None and (not np.isfinite(v) or v < 0):
                raise SpecError(f"team '{self.name}': {field_name} must be a finite number >= 0, got {v}")
        if self.lending_limit_gpus is not None and self.lending_limit_gpus > self.nominal_gpus:
            raise SpecError(f"team '{self.name}': lending_limit_gpus exceeds nominal_gpus")


@dataclass(frozen=True)
class QuotaLayout:
    """Teams, the team of every job, and whether they form a cohort."""

    teams: tuple[TeamQuota, ...]
    team_of_job: np.ndarray
    cohort: bool

    def __post_init__(self) -> None:
        if not self.teams:
            raise SpecError("a quota layout needs at least one team")
        if len(self.team_of_job) and (self.team_of_job.min() < 0 or self.team_of_job.max() >= len(self.teams)):
            raise SpecError("team_of_job names a team that is not in the layout")


class QuotaState:
    """GPUs in use per team, and the admission check."""

    def __init__(self, layout: QuotaLayout) -> None:
        self.layout = layout
        teams = layout.teams
        self.nominal = np.array([t.nominal_gpus for t in teams], dtype=float)
        self.borrow = np.array([np.inf if t.borrowing_limit_gpus is None else t.borrowing_limit_gpus
                                for t in teams], dtype=float)
        lend = np.array([t.nominal_gpus if t.lending_limit_gpus is None else t.lending_limit_gpus
                         for t in teams], dtype=float)
        self.guaranteed = self.nominal - lend
        self.pool = float(lend.sum())
        self.usage = np.zeros(len(teams))
        self.team = layout.team_of_job
        self.cohort = layout.cohort
        self._eps = 1e-9

    def _draw(self, team: int, usage: float) -> float:
        return max(usage - self.guaranteed[team], 0.0)

    def admits(self, job: int, gpus: float) -> bool:
        k = int(self.team[job])
        u = self.usage[k] + gpus
        if not self.cohort:
            return u <= self.nominal[k] + self._eps
        if u > self.nominal[k] + self.borrow[k] + self._eps:
            return False
        drawn = float(np.maximum(self.usage - self.guaranteed, 0.0).sum())
        return drawn - self._draw(k, self.usage[k]) + self._draw(k, u) <= self.pool + self._eps

    def take(self, job: int, gpus: float) -> None:
        self.usage[int(self.team[job])] += gpus

    def release(self, job: int, gpus: float) -> None:
        self.usage[int(self.team[job])] -= gpus

    def never_admits(self, job: int, gpus: float) -> bool:
        """True if the job exceeds what its team could ever hold (nominal, plus borrowing in a cohort)."""
        k = int(self.team[job])
        cap = self.nominal[k] if not self.cohort else min(self.nominal[k] + self.borrow[k],
                                                          self.guaranteed[k] + self.pool)
        return gpus > cap + self._eps
