"""Synthetic GPU job traces: Poisson or diurnal arrivals, heavy-tailed sizes and durations.

Defaults follow published trace statistics (the trace publishers' papers and the Acme/AcmeTrace summary):

- durations: log-normal with the Microsoft Philly median 874 s and mean 18,006 s (Acme
  ``cluster_summary.csv``): ``sigma = sqrt(2 ln(mean / median))`` = 2.46, ``mu = ln(median)``; capped at
  ``max_runtime_s``.
- GPUs per job: powers of two, mostly single-GPU; the default mix has mean 2.6 GPUs, between Philly (1.93)
  and Helios (3.7) means.
- arrivals: Poisson at the rate that offers ``target_load`` x the cluster's GPU capacity in expectation
  (``rate = load x gpus / (E[gpus] x E[min(runtime, cap)])``), or diurnal: the rate times
  ``1 + amplitude x sin(2 pi t / day)``, drawn by thinning.
- time limits: runtime x U(1, ``limit_factor_max``): users over-request, never under-request.
- users: ``users`` users drawn with Zipf-like weights ``1 / rank`` (a few heavy users).
- teams (``teams > 1``): each job belongs to a team drawn with weights ``1 / rank**team_skew`` (a few teams
  carry most of the demand, the case where fixed team shares strand GPUs); users are named
  ``teamNN/userMMM`` (Slurm account / user), and :func:`team_of_jobs` reads the team back.
- per-job GPU utilisation (``gpu_util_mean`` set): Beta with that mean and concentration
  ``gpu_util_concentration`` (an assumption; no trace here publishes the per-job distribution).

Jobs larger than a node ask for whole nodes (``units = gpus / gpus_per_node``) when the size divides.

Work cap: a trace holds at most :data:`MAX_SYNTHETIC_JOBS` (10^6) jobs, checked before anything is drawn
(:func:`generate`); a spec asking for more is refused naming its ``jobs`` field. Measured on a 2-core machine:
generating 10^6 jobs takes about 2 s and 0.35 GB; ``sched simulate`` replaying them under two policies
about 4 minutes and 1.3 GB peak, with a progress bar. 10^7 jobs would take about 13 GB and 40 minutes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from clustertwin.errors import SpecError
from clustertwin.sched.jobs import JobTable, make_jobs
from clustertwin.specs.base import Spec
from clustertwin.units import DAY_S

PHILLY_MEDIAN_RUNTIME_S = 874.0
"""Philly median GPU-job runtime (Acme cluster_summary.csv)."""
PHILLY_MEAN_RUNTIME_S = 18006.0
"""Philly mean GPU-job runtime (Acme cluster_summary.csv)."""
DEFAULT_GPU_MIX = {1: 0.70, 2: 0.10, 4: 0.10, 8: 0.07, 16: 0.02, 32: 0.007, 64: 0.003}
"""GPUs per job and their probabilities (assumption shaped on Philly/Helios: most jobs take one GPU,
a thin tail of multi-node jobs)."""
MAX_RUNTIME_S = 30 * DAY_S
"""Longest synthetic job (30 days)."""
MAX_SYNTHETIC_JOBS = 1_000_000
"""Largest synthetic trace (module docstring: about 0.35 GB to generate, 1.3 GB to replay under two policies);
the CLI never lifts it, ``--max-jobs N`` only generates fewer."""
GENERATE_STEPS = 4
"""Steps :func:`generate` reports to its ``progress`` callback (draws, user names, job ids, job table)."""
MAX_GPUS_PER_JOB = 1 << 20
"""Largest GPU count in a job mix."""


class SyntheticSpec(Spec):
    """Parameters of the synthetic trace generator (YAML/JSON file for ``--format synthetic``)."""

    jobs: int = Field(1000, ge=1)
    """Number of jobs (at most ``MAX_SYNTHETIC_JOBS``, 10^6, unless a library caller raises the cap)."""
    target_load: float = Field(0.9, gt=0)
    """Offered load: GPU-seconds asked per second over the cluster's GPUs."""
    cluster_gpus: int | None = Field(None, ge=1)
    """GPUs the load refers to; defaults to the simulated cluster's."""
    gpus_per_node: int = Field(8, ge=1)
    """GPUs per node, to express multi-node jobs as whole nodes."""
    arrival: Literal["poisson", "diurnal"] = "poisson"
    diurnal_amplitude: float = Field(0.5, ge=0, le=1)
    """Relative swing of the diurnal arrival rate."""
    median_runtime_s: float = Field(PHILLY_MEDIAN_RUNTIME_S, gt=0)
    mean_runtime_s: float = Field(PHILLY_MEAN_RUNTIME_S, gt=0)
    max_runtime_s: float = Field(MAX_RUNTIME_S, gt=0)
    gpu_mix: dict[int, float] = Field(default_factory=lambda: dict(DEFAULT_GPU_MIX))
    """GPUs per job -> probability (normalised)."""
    limit_factor_max: float = Field(3.0, ge=1)
    users: int = Field(50, ge=1, le=1_000_000)
    seed: int = Field(0, ge=0, lt=2**63)
    teams: int = Field(1, ge=1, le=10_000)
    team_skew: float = Field(1.0, ge=0, le=10)
    gpu_util_mean: float | None = Field(None, gt=0, lt=1)
    gpu_util_concentration: float = Field(4.0, gt=0, le=1e6)

    @model_validator(mode="after")
    def _check(self) -> SyntheticSpec:
        if self.mean_runtime_s < self.median_runtime_s:
            raise ValueError("mean_runtime_s must be >= median_runtime_s for a log-normal")
        if not self.gpu_mix or any(not 1 <= g <= MAX_GPUS_PER_JOB or not math.isfinite(p) or p < 0
                                   for g, p in self.gpu_mix.items()) or sum(self.gpu_mix.values()) <= 0:
            raise ValueError(f"gpu_mix needs GPU counts 1-{MAX_GPUS_PER_JOB} with finite, non-negative "
                             "probabilities (not all zero)")
        for name in ("target_load", "median_runtime_s", "mean_runtime_s", "max_runtime_s", "limit_factor_max"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite")
        return self


def lognormal_params(median_s: float, mean_s: float) -> tuple[float, float]:
    """``(mu, sigma)`` of a log-normal with this median and mean: ``mu = ln median``,
    ``sigma = sqrt(2 ln(mean / median))``."""
    return math.log(median_s), math.sqrt(2.0 * math.log(mean_s / median_s))


def capped_lognormal_mean(mu: float, sigma: float, cap: float) -> float:
    """``E[min(X, cap)]`` for ``X ~ LogNormal(mu, sigma)``:
    ``exp(mu + sigma^2/2) Phi((ln cap - mu - sigma^2) / sigma) + cap (1 - Phi((ln cap - mu) / sigma))``."""

    def phi(x: float) -> float:
        return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))

    lc = math.log(cap)
    return (math.exp(mu + sigma**2 / 2) * phi((lc - mu - sigma**2) / sigma)
            + cap * (1.0 - phi((lc - mu) / sigma)))


def generate(spec: SyntheticSpec, cluster_gpus: int | None = None, *, max_jobs: int = MAX_SYNTHETIC_JOBS,
             progress: Callable[[int], None] | None = None) -> JobTable:
    """A seeded synthetic :class:`JobTable`; more than ``max_jobs`` jobs is refused (SpecError at field
    ``jobs``) before anything is drawn. ``progress(k)`` is called after each of :data:`GENERATE_STEPS` steps."""
    gpus_total = spec.cluster_gpus or cluster_gpus
    if not gpus_total:
        raise SpecError("synthetic trace needs cluster_gpus (or a cluster to take it from)")
    if spec.jobs > max_jobs:
        raise SpecError(f"synthetic trace asks for {spec.jobs:,} jobs, more than the cap of {max_jobs:,}; "
                        f"pass --max-jobs N (N <= {max_jobs:,}) to generate only N", path=("jobs",))
    step = progress or (lambda _k: None)
    rng = np.random.default_rng(spec.seed)
    n = spec.jobs
    sizes = np.array(sorted(spec.gpu_mix), dtype=np.int64)
    probs = np.array([spec.gpu_mix[int(s)] for s in sizes], dtype=float)
    gpus = rng.choice(sizes, size=n, p=probs / probs.sum())
    mu, sigma = lognormal_params(spec.median_runtime_s, spec.mean_runtime_s)
    runtime = np.minimum(np.rint(rng.lognormal(mu, sigma, size=n)), spec.max_runtime_s)
    runtime = np.maximum(runtime, 1.0)
    limit = np.ceil(runtime * rng.uniform(1.0, spec.limit_factor_max, size=n))
    mean_gpus = float((sizes * probs).sum() / probs.sum())
    rate = spec.target_load * gpus_total / (mean_gpus * capped_lognormal_mean(mu, sigma, spec.max_runtime_s))
    submit = _arrivals(rng, n, rate, spec)
    weights = 1.0 / np.arange(1, spec.users + 1)
    user = rng.choice(spec.users, size=n, p=weights / weights.sum())
    util = None
    if spec.gpu_util_mean is not None:
        a = spec.gpu_util_mean * spec.gpu_util_concentration
        util = rng.beta(a, spec.gpu_util_concentration - a if spec.gpu_util_concentration > a else 1e-9, size=n)
    step(1)
    drawn, inverse = np.unique(user, return_inverse=True)  # format each drawn user's name once
    user_names = [f"user{u:03d}" for u in drawn.tolist()]
    names = [user_names[i] for i in inverse.reshape(-1).tolist()]
    if spec.teams > 1:
        tw = 1.0 / np.arange(1, spec.teams + 1) ** spec.team_skew
        team = rng.choice(spec.teams, size=n, p=tw / tw.sum())
        names = [f"team{k:02d}/{u}" for k, u in zip(team.tolist(), names, strict=True)]
    gpn = spec.gpus_per_node
    multi = (gpus > gpn) & (gpus % gpn == 0)
    units = np.where(multi, gpus // gpn, 0)
    per_unit = np.where(multi, gpn, gpus)
    step(2)
    ids = list(map(f"syn-{{:0{len(str(n))}d}}".format, range(n)))
    step(3)
    table = make_jobs(ids, submit, runtime, per_unit, units=units, limit_s=limit, users=names, gpu_util=util)
    step(GENERATE_STEPS)
    return table


def team_of_jobs(jobs: JobTable) -> tuple[tuple[str, ...], np.ndarray]:
    """Teams (Slurm accounts) from ``team/user`` user names: ``(team names, team index of each job)``.
    Users without a ``/`` are their own team."""
    team_of_user = [u.split("/", 1)[0] for u in jobs.users]
    names = tuple(sorted(set(team_of_user)))
    code = {t: i for i, t in enumerate(names)}
    per_user = np.array([code[t] for t in team_of_user], dtype=np.int64)
    return names, per_user[jobs.user] if len(jobs) else np.zeros(0, dtype=np.int64)


def _arrivals(rng: np.random.Generator, n: int, rate: float, spec: SyntheticSpec) -> np.ndarray:
    """``n`` arrival times (s, from 0): Poisson at ``rate``, or diurnal by thinning a Poisson process of
    rate ``rate x (1 + amplitude)``."""
    if spec.arrival == "poisson":
        return np.rint(np.cumsum(rng.exponential(1.0 / rate, size=n)) - 1.0 / rate).clip(0)
    amp = spec.diurnal_amplitude
    peak = rate * (1.0 + amp)
    out: list[np.ndarray] = []
    t0 = 0.0
    got = 0
    while got < n:
        batch = max(2 * (n - got), 16)
        t = t0 + np.cumsum(rng.exponential(1.0 / peak, size=batch))
        accept = rng.uniform(size=batch) * peak <= rate * (1.0 + amp * np.sin(2 * np.pi * t / DAY_S))
        kept = t[accept][: n - got]
        out.append(kept)
        got += len(kept)
        t0 = float(t[-1])
    return np.rint(np.concatenate(out))
