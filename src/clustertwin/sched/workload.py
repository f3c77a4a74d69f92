"""Jobs with a body: a typed mix of job classes (model, GPUs, global batch, duration) and an arrival process,
drawn into a :class:`~clustertwin.sched.jobs.JobTable` deterministically by seed.

A workload file (YAML, safe loader) names the classes and their shares of the job count::

    name: llm-mix
    jobs: 2000
    arrival: {process: poisson, mean_interarrival_s: 240}
    classes:
      - {name: llama3-8b-pretrain, model: llama3-8b, gpus: 64, global_batch: 512, share: 0.4,
         duration: {steps: 1500}}
      - {name: finetune-7b, model: llama2-7b, gpus: [2, 4, 8], global_batch: 32, share: 0.5,
         duration: {hours: 1.0}, duration_sigma: 0.5}

Durations are steps, tokens (``steps = tokens / (global_batch x seq_len)``) or hours of isolated run time;
``duration_sigma`` spreads each job's duration by a lognormal factor of median 1 (``exp(sigma Z)``). The
arrival process is Poisson (exponential inter-arrival times of the given mean, Kleinrock 1975 vol. 1 §2) or
``uniform`` (fixed spacing). A job's GPUs go on whole nodes when it needs at least a node, else on one node.
The trace's runtime of a job is its isolated runtime on a compact allocation
(:mod:`clustertwin.sched.bodies` evaluates the training model); its time limit is ``limit_factor`` times that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.sched.jobs import JobTable, make_jobs
from clustertwin.units import HOUR_S

NO_BODY = -1
"""Class index of a trace job that no class of the mix describes (:func:`assign_trace`)."""

MAX_WORKLOAD_JOBS = 2_000_000
"""Most jobs one workload may draw (a guard against a typo such as ``jobs: 1e9``)."""
DEFAULT_LIMIT_FACTOR = 2.0
"""Time limit / isolated runtime (the SWF benchmark mix of issue 31 uses limit = 2 x runtime)."""


class Duration(BaseModel):
    """How long a job of the class runs: exactly one of ``steps``, ``tokens`` or ``hours`` (isolated)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    steps: int | None = Field(None, gt=0)
    tokens: float | None = Field(None, gt=0)
    hours: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one(self) -> Duration:
        given = [k for k in ("steps", "tokens", "hours") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of steps, tokens, hours (got {given or 'none'})")
        return self


class JobClass(BaseModel):
    """One class of the mix: a training job of ``model`` on ``gpus`` GPUs (one value or a list to draw from
    uniformly), ``share`` of the jobs."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)
    model: str = Field(min_length=1)
    gpus: tuple[int, ...]
    global_batch: int = Field(gt=0)
    share: float = Field(gt=0, allow_inf_nan=False)
    duration: Duration
    duration_sigma: float = Field(0.0, ge=0, le=5, allow_inf_nan=False)
    seq_len: int | None = Field(None, gt=0)
    layout: dict[str, int | str | bool] | None = None
    """Fixed parallelism (``tp``, ``pp``, ``cp``, ``zero`` ...); None: the training model's best layout."""
    priority: int = Field(0, ge=0)

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v: object) -> object:
        return (v,) if isinstance(v, int) else v

    @field_validator("gpus")
    @classmethod
    def _positive(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(g < 1 for g in v):
            raise ValueError("gpus must be a positive integer or a non-empty list of them")
        return v


class Arrival(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    process: Literal["poisson", "uniform"] = "poisson"
    mean_interarrival_s: float = Field(gt=0, allow_inf_nan=False)


class WorkloadMix(BaseModel):
    """A mix of job classes, how many jobs to draw and when they arrive."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "workload"
    jobs: int = Field(gt=0, le=MAX_WORKLOAD_JOBS)
    arrival: Arrival
    classes: tuple[JobClass, ...] = Field(min_length=1)
    limit_factor: float = Field(DEFAULT_LIMIT_FACTOR, ge=1.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _names(self) -> WorkloadMix:
        names = [c.name for c in self.classes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"class names must be unique (repeated: {', '.join(dup)})")
        return self

    @property
    def shares(self) -> np.ndarray:
        s = np.array([c.share for c in self.classes], dtype=float)
        return s / s.sum()


def load_workload(path: str | Path) -> WorkloadMix:
    """Read and check a workload file; any problem is one :class:`SpecError` naming the file and field."""
    from clustertwin.yaml_load import load_yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read workload file: {getattr(e, 'strerror', None) or e}", file=str(p)) from None
    try:
        data = load_yaml(text, file=str(p))
    except yaml.YAMLError as e:
        raise SpecError(f"invalid YAML: {getattr(e, 'problem', None) or e}", file=str(p)) from None
    if not isinstance(data, dict):
        raise SpecError("a workload file must be a mapping with jobs, arrival and classes", file=str(p))
    try:
        return WorkloadMix.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(str(x) for x in err["loc"])
        field = loc[-1] if loc else ""
        known = {"top": list(WorkloadMix.model_fields), "class": list(JobClass.model_fields)}
        hint = ""
        if err["type"] == "extra_forbidden":
            hint = did_you_mean(field, known["class" if "classes" in loc else "top"])
        raise SpecError(f"{err['msg']}{hint}", file=str(p), path=loc) from None


class DrawnWorkload:
    """The jobs drawn from a mix: the job table, each job's class, GPU count and duration spec."""

    def __init__(self, mix: WorkloadMix, jobs: JobTable, job_class: np.ndarray, scale: np.ndarray) -> None:
        self.mix = mix
        self.jobs = jobs
        self.job_class = job_class
        """Index into ``mix.classes`` per job (JobTable order)."""
        self.scale = scale
        """Each job's lognormal duration factor (1 without ``duration_sigma``)."""


def draw(mix: WorkloadMix, iso_runtime_s, gpus_per_node: int, *, seed: int = 0,
         max_jobs: int | None = None) -> DrawnWorkload:
    """Draw ``mix.jobs`` jobs (or ``max_jobs``): class by share, GPUs uniformly from the class's list,
    arrival times from the process, durations from the class (scaled by ``exp(sigma Z)``).
    ``iso_runtime_s(class_index, gpus)`` is the isolated runtime of one nominal job of the class on a compact
    allocation (it gives the trace runtime and the time limit)."""
    n = min(mix.jobs, max_jobs) if max_jobs else mix.jobs
    rng = np.random.default_rng(seed)
    cls = rng.choice(len(mix.classes), size=n, p=mix.shares)
    if mix.arrival.process == "poisson":
        gaps = rng.exponential(mix.arrival.mean_interarrival_s, size=n)
    else:
        gaps = np.full(n, mix.arrival.mean_interarrival_s)
    submit = np.cumsum(gaps) - gaps[0]
    pick = rng.random(n)
    z = rng.standard_normal(n)
    gpus = np.empty(n, dtype=np.int64)
    scale = np.ones(n)
    for k, c in enumerate(mix.classes):
        sel = cls == k
        opts = np.array(c.gpus, dtype=np.int64)
        gpus[sel] = opts[np.minimum((pick[sel] * len(opts)).astype(np.int64), len(opts) - 1)]
        scale[sel] = np.exp(c.duration_sigma * z[sel])
    runtime = np.empty(n)
    for k in range(len(mix.classes)):
        for g in np.unique(gpus[cls == k]).tolist():
            sel = (cls == k) & (gpus == g)
            runtime[sel] = iso_runtime_s(k, int(g)) * scale[sel]
    whole = gpus >= gpus_per_node
    units = np.where(whole, gpus // gpus_per_node, 1)
    per_unit = np.where(whole, gpus_per_node, gpus)
    if np.any(whole & (gpus % gpus_per_node != 0)):
        bad = sorted({int(g) for g in gpus[whole & (gpus % gpus_per_node != 0)]})
        raise SpecError(f"jobs of {bad} GPUs span nodes but are not whole nodes of {gpus_per_node} GPUs",
                        path=("classes", "gpus"))
    names = [c.name for c in mix.classes]
    ids = [f"{names[k]}-{i}" for i, k in enumerate(cls.tolist())]
    prio = np.array([mix.classes[k].priority for k in cls.tolist()], dtype=np.int64)
    jobs = make_jobs(ids, submit, runtime, per_unit, units=units, limit_s=runtime * mix.limit_factor,
                     users=[names[k] for k in cls.tolist()], priority=prio)
    return DrawnWorkload(mix, jobs, cls, scale)


def hours_s(d: Duration) -> float | None:
    """Isolated run time of a duration given in hours, seconds (None for steps or tokens)."""
    return None if d.hours is None else d.hours * HOUR_S


def assign_trace(mix: WorkloadMix, jobs: JobTable, iso_runtime_s, *, seed: int = 0) -> DrawnWorkload:
    """Trace jobs with the mix's bodies (``sched simulate --trace T --workload MIX``). A job of ``g`` GPUs runs
    a class whose ``gpus`` list holds ``g`` (drawn by the classes' shares among those that do, seeded), with
    as many steps as make its isolated compact runtime the trace's: ``scale = runtime / iso_runtime_s(k, g)``
    (the trace's runtime already holds whatever interference the job met; the co-simulation adds the
    contention of the replayed placement on top). A job of a size no class lists carries no body
    (:data:`NO_BODY`): it runs for its trace runtime, with no inter-node traffic
    and no checkpoints. Arrivals, sizes, limits and users are the trace's."""
    rng = np.random.default_rng(seed)
    gpus = jobs.total_gpus
    cls = np.full(len(jobs), NO_BODY, dtype=np.int64)
    shares = np.asarray(mix.shares, dtype=float)
    for g in np.unique(gpus).tolist():
        fit = np.array([int(g) in c.gpus for c in mix.classes])
        if not fit.any():
            continue
        sel = np.flatnonzero(gpus == g)
        p = np.where(fit, shares, 0.0)
        cls[sel] = rng.choice(len(mix.classes), size=len(sel), p=p / p.sum())
    scale = np.ones(len(jobs))
    runtime = jobs.runtime_s
    for k in range(len(mix.classes)):
        for g in np.unique(gpus[cls == k]).tolist():
            sel = (cls == k) & (gpus == g)
            scale[sel] = runtime[sel] / iso_runtime_s(k, int(g))
    none = cls == NO_BODY
    scale[none] = runtime[none]
    return DrawnWorkload(mix, jobs, cls, scale)
