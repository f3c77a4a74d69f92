"""Monte Carlo of a whole training run, vectorised over trials (numpy, seeded, reproducible bit for bit).

Interruptions of all causes arrive as one Poisson process in wall-clock time (rate ``Σ λ_c``, cause drawn
with probability ``λ_c / Σ λ``); the hardware is allocated, and can fail, during restarts too (as in
Daly's model). All trials advance together, one interruption per trial per loop iteration, so the cost
is ``O(interruptions per run)`` numpy operations on arrays of ``trials`` elements.

With ``scn.rate_log_sd > 0`` each trial is also a site: its rates are multiplied by ``e^{σ Z}``,
``Z ~ N(0, 1)`` truncated to the 10th–90th percentile range ``|Z| ≤ 1.2816`` (the span of the clusters
measured, :mod:`clustertwin.reliability.sites`; an untruncated tail would put a few trials on sites that
never finish a run), drawn by a second generator seeded ``[seed, 1]`` so that the interruption draws stay
common random numbers across scenarios.

Between two interruptions a trial resumes after its pending restart time, computes in periods of
``τ`` seconds followed by a checkpoint stall (timing in :mod:`clustertwin.reliability.policy`), and at
the next interruption keeps only the work of checkpoints that were durable by then. The run ends when
the work is done (fixed-work mode) or at the end of the wall-clock window (fixed-time mode, where work
computed but not yet checkpointed at the end of the window still counts).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.reliability.policy import Scenario
from clustertwin.units import HOUR_S

#: Spare-pool ring buffer head-room: standard deviations above the mean number of nodes in repair.
_REPAIR_BUFFER_SIGMAS = 10.0
_REPAIR_BUFFER_MIN = 16
PERCENTILES: tuple[int, ...] = (10, 50, 90)
SITE_Z_LIMIT = 1.2815515655446004
"""Truncation of the site draw: the standard-normal 90th percentile (sites between p10 and p90)."""


@dataclass(frozen=True)
class MonteCarloResult:
    """Per-trial outcomes of :func:`simulate` and their summaries."""

    trials: int
    seed: int
    gpus: int
    wall_s: np.ndarray
    productive_s: np.ndarray
    """Preserved work in failure-free compute seconds (fixed-work mode: the whole run)."""
    unexpected: np.ndarray
    planned: np.ndarray
    checkpoint_s: np.ndarray
    """Wall time stalled in periodic checkpoints."""
    downtime_s: np.ndarray
    """Wall time in restarts (including restarts cut short by another interruption) and planned saves."""
    by_cause_mean: dict[str, float]

    @property
    def ettr(self) -> np.ndarray:
        """Effective training time ratio per trial: productive / wall."""
        return self.productive_s / self.wall_s

    @property
    def lost_s(self) -> np.ndarray:
        """Rework and reduced-capacity time: ``wall − productive − checkpoint − downtime``."""
        return np.maximum(self.wall_s - self.productive_s - self.checkpoint_s - self.downtime_s, 0.0)

    @property
    def lost_gpu_hours(self) -> np.ndarray:
        """GPU-hours not spent on preserved progress: ``(wall − productive) × gpus``."""
        return (self.wall_s - self.productive_s) * self.gpus / HOUR_S

    @staticmethod
    def _pct(a: np.ndarray) -> dict[str, float]:
        q = np.percentile(a, PERCENTILES)
        return {"mean": float(a.mean()), **{f"p{p}": float(v) for p, v in zip(PERCENTILES, q, strict=True)}}

    def summary(self) -> dict[str, object]:
        return {
            "trials": self.trials, "seed": self.seed,
            "wall_s": self._pct(self.wall_s), "productive_s": self._pct(self.productive_s),
            "ettr": self._pct(self.ettr), "unexpected_interruptions": self._pct(self.unexpected.astype(float)),
            "planned_interruptions": self._pct(self.planned.astype(float)),
            "lost_gpu_hours": self._pct(self.lost_gpu_hours),
            "checkpoint_s": self._pct(self.checkpoint_s), "downtime_s": self._pct(self.downtime_s),
            "rework_s": self._pct(self.lost_s),
            "by_cause_mean": self.by_cause_mean,
        }

    def to_dict(self) -> dict[str, object]:
        return self.summary()


def _accrued(w: np.ndarray, tau: float, b1: float, b: float) -> np.ndarray:
    """Compute time done ``w`` seconds after resuming: first period ``τ + b1``, then periods ``τ + b``,
    each computing for ``τ`` first."""
    if not math.isfinite(tau):
        return w
    p = tau + b
    w2 = w - (tau + b1)
    pos = w2 > 0
    w2c = np.where(pos, w2, 0.0)
    later = tau + np.floor(w2c / p) * tau + np.minimum(np.mod(w2c, p), tau)
    return np.where(pos, later, np.minimum(w, tau))


def _commits(w: np.ndarray, tau: float, b1: float, b: float, lag: float) -> np.ndarray:
    """Checkpoints durable ``w`` seconds after resuming: the k-th at ``τ + b1 + (k−1)(τ + b) + lag``."""
    if not math.isfinite(tau):
        return np.zeros_like(w)
    first = tau + b1 + lag
    return np.where(w >= first, 1.0 + np.floor(np.maximum(w - first, 0.0) / (tau + b)), 0.0)


def _site_factors(log_sd: float, n: int, seed: int) -> np.ndarray:
    """``e^{σ Z}`` per trial, ``Z ~ N(0, 1)`` truncated to ``|Z| ≤ Z90`` by redrawing (deterministic)."""
    rng = np.random.default_rng([seed, 1])
    z = rng.standard_normal(n)
    bad = np.abs(z) > SITE_Z_LIMIT
    while bad.any():
        z[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(z) > SITE_Z_LIMIT
    return np.exp(log_sd * z)


def simulate(scn: Scenario, trials: int = 1000, seed: int = 0,
             progress: Callable[[int, int], None] | None = None) -> MonteCarloResult:
    """Simulate ``trials`` independent runs of ``scn`` with ``numpy.random.default_rng(seed)``.

    ``progress(finished_trials, trials)`` is called once per loop iteration."""
    if trials < 1:
        raise SpecError(f"trials must be >= 1 (got {trials})")
    if seed < 0:
        raise SpecError(f"seed must be >= 0 (got {seed})")
    rng = np.random.default_rng(seed)
    rates = np.asarray(scn.rate_per_s, dtype=float)
    lam = float(rates.sum())
    n_causes = rates.size
    cum = np.cumsum(rates) / lam if lam > 0 else np.ones(n_causes)
    restart = np.asarray(scn.restart_s, dtype=float)
    hw = np.asarray(scn.replaces_node, dtype=bool)
    planned = np.asarray(scn.planned, dtype=bool)
    tau, b1, b, lag = scn.interval_s, scn.first_blocking_s, scn.blocking_s, scn.lag_s
    work = scn.work_s if scn.work_s is not None else math.inf
    horizon = scn.horizon_s if scn.horizon_s is not None else math.inf

    n = trials
    site = _site_factors(scn.rate_log_sd, n, seed) if scn.rate_log_sd > 0 else None
    t = np.zeros(n)
    committed = np.zeros(n)
    pending = np.zeros(n)  # restart time still to go before computing resumes
    frac = np.ones(n)  # throughput fraction (elastic policy)
    productive = np.zeros(n)
    ckpt = np.zeros(n)
    down = np.zeros(n)
    n_unexp = np.zeros(n, dtype=np.int64)
    n_plan = np.zeros(n, dtype=np.int64)
    cause_counts = np.zeros(n_causes, dtype=np.int64)

    track_repair = scn.policy in ("spares", "elastic") and bool(hw.any())
    if track_repair:
        mean_out = scn.hardware_rate_per_s * scn.repair_s * (float(site.max()) if site is not None else 1.0)
        cap = int(mean_out + _REPAIR_BUFFER_SIGMAS * math.sqrt(mean_out) + _REPAIR_BUFFER_MIN)
        repair_buf = np.full((n, cap), -np.inf)
        repair_ptr = np.zeros(n, dtype=np.int64)

    active = np.arange(n)
    with np.errstate(invalid="ignore", over="ignore"):
        while active.size:
            k = active.size
            # draw for every trial, finished or not, so that trial j's i-th interruption is the same in
            # every scenario run with this seed (common random numbers across policies and intervals)
            gap_all = rng.exponential(1.0 / lam, size=n) if lam > 0 else np.full(n, np.inf)
            if site is not None:
                gap_all = gap_all / site
            u_all = rng.random(n)
            gap = gap_all[active]
            cause = np.minimum(np.searchsorted(cum, u_all[active], side="right"), n_causes - 1)
            ta, ra, fa, pa = t[active], pending[active], frac[active], committed[active]
            limit = horizon - ta
            end = np.minimum(gap, limit)  # the window closes at the interruption or the horizon
            w = np.maximum(end - ra, 0.0)  # computing time available in the window
            rem = (work - pa) / fa  # compute seconds still needed at the current throughput
            if math.isfinite(tau):
                m = np.maximum(np.ceil(rem / tau) - 1.0, 0.0)  # checkpoints before the end
                t_fin = rem + np.where(m >= 1, b1 + (m - 1.0) * b, 0.0)
            else:
                m = np.zeros(k)
                t_fin = rem
            finish = (ra < end) & (t_fin <= w)
            at_horizon = ~finish & (limit <= gap)
            event = ~finish & ~at_horizon

            # finished runs
            i = active[finish]
            if i.size:
                t[i] = ta[finish] + ra[finish] + t_fin[finish]
                productive[i] = work
                ckpt[i] += t_fin[finish] - rem[finish]
                down[i] += ra[finish]
            # end of the wall-clock window
            i = active[at_horizon]
            if i.size:
                wh = w[at_horizon]
                acc = _accrued(wh, tau, b1, b)
                t[i] = horizon
                productive[i] = pa[at_horizon] + fa[at_horizon] * acc
                ckpt[i] += wh - acc
                down[i] += np.minimum(ra[at_horizon], limit[at_horizon])

            # interruptions
            ev = np.flatnonzero(event)
            if ev.size:
                i = active[ev]
                g, r_, f_, c = gap[ev], ra[ev], fa[ev], cause[ev]
                t_ev = ta[ev] + g
                in_restart = g < r_
                wk = np.where(in_restart, 0.0, g - r_)
                acc = _accrued(wk, tau, b1, b)
                is_plan = planned[c]
                gained = np.where(is_plan, acc,
                                  np.minimum(_commits(wk, tau, b1, b, lag), m[ev]) * (tau if math.isfinite(tau)
                                                                                       else 0.0))
                committed[i] = np.minimum(committed[i] + f_ * np.where(in_restart, 0.0, gained), work)
                ckpt[i] += np.where(in_restart, 0.0, wk - acc)
                down[i] += np.minimum(g, r_)
                # a planned stop always takes a save window plus a restart (also when it finds the job
                # restarting): the stop's length does not depend on the job's state
                new_pending = restart[c] + np.where(is_plan, scn.planned_checkpoint_s, 0.0)
                is_hw = hw[c]
                if scn.policy == "restart":
                    new_pending = new_pending + np.where(is_hw, scn.replace_s, 0.0)
                    new_frac = f_
                else:
                    if track_repair:
                        out = (repair_buf[i] > (t_ev - scn.repair_s)[:, None]).sum(axis=1)
                        hw_i = i[is_hw]
                        repair_buf[hw_i, repair_ptr[hw_i] % cap] = t_ev[is_hw]
                        repair_ptr[hw_i] += 1
                    else:
                        out = np.zeros(ev.size, dtype=np.int64)
                    if scn.policy == "spares":
                        new_pending = new_pending + np.where(is_hw & (out >= scn.hot_spares), scn.replace_s, 0.0)
                        new_frac = f_
                    else:  # elastic: shrink by the failed node unless that drops below the floor
                        shrink = is_hw & (out + 1 <= scn.elastic_max_out)
                        new_pending = new_pending + np.where(is_hw & ~shrink, scn.replace_s, 0.0)
                        n_out = np.minimum(out + shrink, scn.elastic_max_out)
                        new_frac = 1.0 - scn.elastic_unit_fraction * n_out
                t[i] = t_ev
                pending[i] = new_pending
                frac[i] = new_frac
                n_plan[i] += is_plan
                n_unexp[i] += ~is_plan
                cause_counts += np.bincount(c, minlength=n_causes)
            active = active[ev]
            if progress is not None:
                progress(n - active.size, n)

    wall = t if scn.work_s is not None else np.full(n, horizon)
    by_cause = {name: float(cnt) / n for name, cnt in zip(scn.cause_names, cause_counts, strict=True)}
    return MonteCarloResult(trials=n, seed=seed, gpus=scn.gpus, wall_s=wall, productive_s=productive,
                            unexpected=n_unexp, planned=n_plan, checkpoint_s=ckpt, downtime_s=down,
                            by_cause_mean=by_cause)
