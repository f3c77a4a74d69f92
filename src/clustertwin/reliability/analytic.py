"""Analytical expectation of a run's wall time and ETTR under exponential failures.

Unplanned interruptions (total rate λ, cause c with probability ``p_c = λ_c / λ``) follow Daly's model
(FGCS 2006): a segment of ``s`` seconds that must run without interruption to become durable takes in
expectation

``E_seg(s) = (e^{λ s} − 1) (1/λ + D̄)``,

where ``D̄`` is the expected time from an interruption until computing resumes, restarts being cut short
and begun again by further interruptions: with ``q = Σ_c p_c (1 − e^{−λ R_c})``, ``D̄ = q / (λ (1 − q))``.
For a single restart time R this is Daly's ``M e^{R/M} (e^{s/M} − 1)``.

A run of ``W`` compute seconds with checkpoints every τ is ``n = ceil(W/τ) − 1`` periods of
``τ + b`` plus a last piece of ``W − nτ`` with no checkpoint:
``E[T] = n E_seg(τ + b) + E_seg(W − nτ)``. This is exact for synchronous checkpoints with one restart
time per cause. An asynchronous checkpoint becomes durable ``lag`` seconds after its stall; that delay
acts once per interruption that is followed by a checkpointed period, like ``lag − wait`` extra
seconds of restart (approximation: the first checkpoint after a restart stalls only ``b1``); the last
piece, which ends the run without a checkpoint, does not wait for it. Hot spares: the spare pool is an M/G/∞ queue, nodes in
repair ``N ~ Poisson(λ_hw × repair)``, and a hardware fault waits for a replacement with probability
``P(N ≥ K)``. Elastic: throughput ``1 − E[N]/nodes``. Planned interruptions (rate λ_p, no lost work,
each costing a synchronous save plus a restart ``c_p``) stretch the wall time by ``1 / (1 − λ_p c_p)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustertwin.reliability.policy import Scenario


@dataclass(frozen=True)
class AnalyticResult:
    """Expected values for one scenario; for a wall-clock window, the long-run ETTR over that window."""

    wall_s: float
    productive_s: float
    ettr: float
    unexpected_interruptions: float
    planned_interruptions: float
    checkpoint_s: float
    downtime_s: float
    rework_s: float
    mean_restart_s: float
    """Mean restart time of an unplanned interruption (policy effects included)."""
    p_wait_for_node: float
    """Probability that a hardware fault finds no ready node (restart: 1; spares: ``P(N ≥ K)``)."""
    throughput_fraction: float
    """Mean fraction of full throughput (below 1 only for the elastic policy)."""
    breakdown: dict[str, object]

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def segment_expected_s(s: float, lam: float, d_bar: float) -> float:
    """``E_seg(s) = (e^{λs} − 1)(1/λ + D̄)``; ``s`` itself when λ = 0."""
    if lam == 0:
        return s
    return math.expm1(lam * s) * (1.0 / lam + d_bar)


def expected_downtime_s(lam: float, probs: list[float], restarts: list[float]) -> float:
    """``D̄ = q / (λ (1 − q))`` with ``q = Σ p_c (1 − e^{−λ R_c})`` (restarts interrupted and begun again)."""
    if lam == 0:
        return sum(p * r for p, r in zip(probs, restarts, strict=True))
    q = sum(p * -math.expm1(-lam * r) for p, r in zip(probs, restarts, strict=True))
    return math.inf if q >= 1.0 else q / (lam * (1.0 - q))


@dataclass(frozen=True)
class RunModel:
    """The work-independent terms of :func:`analytic` for one scenario, so that the expected wall time of
    many run lengths costs a few float operations each (design-space sweeps use :meth:`wall`)."""

    lam: float
    """Total rate of unplanned interruptions, 1/s."""
    lam_p: float
    """Rate of planned interruptions, 1/s."""
    lam_hw: float
    """Rate of interruptions that take a node out for repair, 1/s."""
    mean_out: float
    """Mean nodes in repair (``lam_hw x repair_s``)."""
    p_wait: float
    """Probability that a hardware fault finds no ready node."""
    throughput: float
    """Mean fraction of full throughput (elastic policy below 1)."""
    interval_s: float
    blocking_s: float
    extra_s: float
    """Asynchronous checkpoints: how much later than the stall a save becomes durable."""
    d_bar_s: float
    """Expected downtime per interruption of a checkpointed period."""
    downtime_plain_s: float
    """Expected downtime per interruption of the last (uncheckpointed) piece."""
    mean_restart_s: float
    planned_cost_s: float
    planned_share: float
    stretch: float
    """Planned-interruption stretch ``1 / (1 - lambda_p c_p)``."""

    @classmethod
    def of(cls, scn: Scenario) -> RunModel:
        """The terms of ``scn`` (its ``work_s`` and ``horizon_s`` are ignored)."""
        unpl = [i for i, p in enumerate(scn.planned) if not p]
        plan = [i for i, p in enumerate(scn.planned) if p]
        lam = sum(scn.rate_per_s[i] for i in unpl)
        lam_p = sum(scn.rate_per_s[i] for i in plan)
        lam_hw = scn.hardware_rate_per_s
        mean_out = lam_hw * scn.repair_s

        from scipy.stats import poisson  # lazy: scipy.stats costs ~0.8 s at CLI start-up

        throughput = 1.0
        if scn.policy == "restart":
            p_wait = 1.0
        elif scn.policy == "spares":
            p_wait = float(poisson.sf(scn.hot_spares - 1, mean_out)) if mean_out > 0 else float(scn.hot_spares == 0)
        else:
            max_out = scn.elastic_max_out
            p_wait = float(poisson.sf(max_out - 1, mean_out)) if mean_out > 0 else float(max_out == 0)
            throughput = max(1.0 - scn.elastic_unit_fraction * min(mean_out, max_out), scn.elastic_min_fraction)

        extra = scn.lag_s - scn.wait_s  # async: durable later than the stall ends
        restarts = [scn.restart_s[i] + (scn.replace_s * p_wait if scn.replaces_node[i] else 0.0) for i in unpl]
        probs = [scn.rate_per_s[i] / lam for i in unpl] if lam > 0 else [0.0] * len(unpl)
        d_bar = expected_downtime_s(lam, probs, [r + extra for r in restarts])
        d_bar_plain = expected_downtime_s(lam, probs, restarts)
        mean_restart = sum(p * r for p, r in zip(probs, restarts, strict=True))

        planned_cost = scn.planned_checkpoint_s + (
            sum(scn.rate_per_s[i] * scn.restart_s[i] for i in plan) / lam_p if lam_p > 0 else 0.0)
        planned_share = lam_p * planned_cost  # fraction of wall time spent in planned stops
        stretch = 1.0 / (1.0 - planned_share) if planned_share < 1.0 else math.inf
        return cls(lam=lam, lam_p=lam_p, lam_hw=lam_hw, mean_out=mean_out, p_wait=p_wait, throughput=throughput,
                   interval_s=scn.interval_s, blocking_s=scn.blocking_s, extra_s=extra, d_bar_s=d_bar,
                   downtime_plain_s=d_bar_plain, mean_restart_s=mean_restart, planned_cost_s=planned_cost,
                   planned_share=planned_share, stretch=stretch)

    def checkpoints(self, work_s: float) -> tuple[int, float]:
        """Completed checkpoints and the length of the last, uncheckpointed piece of ``work_s``."""
        work_time = work_s / self.throughput
        tau = self.interval_s
        if math.isfinite(tau):
            n_ck = max(math.ceil(work_time / tau) - 1, 0)
            return n_ck, work_time - n_ck * tau
        return 0, work_time

    def unplanned_wall(self, work_s: float) -> float:
        """Expected wall time of ``work_s`` compute seconds before the planned-stop stretch."""
        n_ck, last = self.checkpoints(work_s)
        return (n_ck * segment_expected_s(self.interval_s + self.blocking_s, self.lam, self.d_bar_s)
                if n_ck else 0.0) + segment_expected_s(last, self.lam, self.downtime_plain_s)

    def wall(self, work_s: float) -> tuple[float, float, float]:
        """Expected wall time (s), ETTR and unplanned interruptions of ``work_s`` compute seconds."""
        wall = self.unplanned_wall(work_s) * self.stretch
        ettr = work_s / wall if wall > 0 and math.isfinite(wall) else 0.0
        return wall, ettr, self.lam * wall


def analytic(scn: Scenario) -> AnalyticResult:
    """Expected wall time, ETTR and overheads of ``scn`` (formulas in the module docstring)."""
    m = RunModel.of(scn)
    lam, lam_p, tau, b = m.lam, m.lam_p, m.interval_s, m.blocking_s
    throughput, d_bar, d_bar_plain, planned_cost = m.throughput, m.d_bar_s, m.downtime_plain_s, m.planned_cost_s
    if scn.work_s is not None:
        unplanned_wall = m.unplanned_wall(scn.work_s)
        wall = unplanned_wall * m.stretch
        productive = scn.work_s
        ckpt = m.checkpoints(scn.work_s)[0] * b
    else:
        wall = scn.horizon_s  # type: ignore[assignment]
        # long-run wall seconds per compute second: E_seg(τ + b) / τ
        if math.isfinite(tau):
            per_work = segment_expected_s(tau + b, lam, d_bar) / tau
        else:
            per_work = 1.0 if lam == 0 else math.inf
        productive = wall / (per_work * m.stretch) * throughput if math.isfinite(per_work) else 0.0
        unplanned_wall = wall / m.stretch
        ckpt = productive / throughput * b / tau if math.isfinite(tau) else 0.0
    n_unexp = lam * wall
    n_plan = lam_p * wall
    # interruptions that start a restart strike while computing (time U − D): D = λ (U − D) D̄
    downtime = lam * unplanned_wall * d_bar_plain / (1.0 + lam * d_bar_plain) + n_plan * planned_cost
    rework = max(wall - productive - ckpt - downtime, 0.0)
    ettr = productive / wall if wall > 0 and math.isfinite(wall) else 0.0
    return AnalyticResult(
        wall_s=wall, productive_s=productive, ettr=ettr, unexpected_interruptions=n_unexp,
        planned_interruptions=n_plan, checkpoint_s=ckpt, downtime_s=downtime, rework_s=rework,
        mean_restart_s=m.mean_restart_s, p_wait_for_node=m.p_wait if m.lam_hw > 0 else 0.0,
        throughput_fraction=throughput,
        breakdown={
            "formula": "E[T] = (n E_seg(tau + b) + E_seg(W - n tau)) / (1 - lambda_p c_p); "
                       "E_seg(s) = (e^{lambda s} - 1)(1/lambda + D); D = q / (lambda (1 - q))",
            "lambda_unplanned_per_h": lam * 3600.0, "lambda_planned_per_h": lam_p * 3600.0,
            "expected_downtime_per_interruption_s": d_bar, "async_extra_restart_s": m.extra_s,
            "planned_stop_s": planned_cost, "planned_wall_share": m.planned_share,
            "nodes_in_repair_mean": m.mean_out,
        },
    )
