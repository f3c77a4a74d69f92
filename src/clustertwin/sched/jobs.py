"""Jobs as a struct of numpy arrays (one row per job), and what a trace reader reports.

A job asks for ``units`` co-scheduled units (pods, Slurm nodes), each needing ``gpus_per_unit`` GPUs on one
node. ``gpus_per_unit`` below one is a share of a single GPU (GPU-sharing traces such as Alibaba PAI:
``gpu_milli = 460`` is 0.46 of a GPU). ``units == 0`` means the trace did not say how the GPUs are laid out:
the job goes on one node when some node has that many GPUs, otherwise it spreads over nodes. Jobs are
gang-scheduled: every unit starts and ends together.

Times are seconds from the start of the trace. ``limit_s`` is the requested time limit (Slurm ``--time``,
SWF field 9); the scheduler uses it as the runtime estimate (EASY backfill, SJF), and a job whose runtime
exceeds it is killed at the limit (Slurm ``TIMEOUT``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from clustertwin.errors import SpecError

MILLI_PER_GPU = 1000
"""GPU-sharing requests are expressed in thousandths of a GPU (Alibaba PAI ``gpu_milli``)."""


@dataclass(frozen=True)
class JobTable:
    """Jobs sorted by submit time (ties by input order). All arrays have one entry per job."""

    ids: tuple[str, ...]
    submit_s: np.ndarray
    runtime_s: np.ndarray
    limit_s: np.ndarray
    gpus_per_unit: np.ndarray
    units: np.ndarray
    user: np.ndarray
    users: tuple[str, ...]
    priority: np.ndarray
    gpu_types: tuple[frozenset[str], ...]
    """Allowed GPU models per job; an empty set allows any."""
    cpu_milli: np.ndarray | None = None
    """CPU per unit in milli-cores (PAI ``cpu_milli``); zeros when the trace has none."""
    memory_mib: np.ndarray | None = None
    """Host memory per unit, MiB (PAI ``memory_mib``); zeros when the trace has none."""
    min_gpus: np.ndarray | None = None
    """Elastic jobs: the fewest GPUs the job accepts (0 = rigid). An elastic job (whole GPUs, no unit
    count) may start on ``g' < gpus_per_unit`` GPUs, and then runs ``runtime x gpus_per_unit / g'``: its
    work in GPU-seconds is fixed (linear speed-up)."""
    gpu_util: np.ndarray | None = None
    """The job's own mean GPU utilisation in [0, 1] (NaN: the trace does not say); work utilisation is
    allocation x this."""

    def __post_init__(self) -> None:
        n = len(self.ids)
        for name in ("cpu_milli", "memory_mib", "min_gpus"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.zeros(n, dtype=np.int64))
        if self.gpu_util is None:
            object.__setattr__(self, "gpu_util", np.full(n, np.nan))
        util = self.gpu_util
        if n and np.any(np.isfinite(util) & ((util < 0) | (util > 1))):
            raise SpecError("job GPU utilisation must be within [0, 1]")
        for name in ("submit_s", "runtime_s", "limit_s", "gpus_per_unit", "units", "user", "priority", "cpu_milli",
                     "memory_mib", "min_gpus", "gpu_util"):
            if len(getattr(self, name)) != n:
                raise SpecError(f"job table column '{name}' has {len(getattr(self, name))} rows, expected {n}")
        if len(self.gpu_types) != n:
            raise SpecError(f"job table column 'gpu_types' has {len(self.gpu_types)} rows, expected {n}")
        if n and np.any(np.diff(self.submit_s) < 0):
            raise SpecError("jobs must be sorted by submit time")
        if n and (np.any(self.runtime_s < 0) or np.any(self.limit_s <= 0) or np.any(self.gpus_per_unit <= 0)):
            raise SpecError("job runtimes must be >= 0, time limits > 0 and GPU requests > 0")
        if n and np.any((self.gpus_per_unit > 1) & (self.gpus_per_unit != np.round(self.gpus_per_unit))):
            raise SpecError("GPU requests above one GPU must be whole GPUs")
        elastic = self.min_gpus > 0
        if n and np.any(elastic & ((self.units > 0) | (self.gpus_per_unit < 1) | (self.min_gpus > self.gpus_per_unit))):
            raise SpecError("elastic jobs (min_gpus > 0) must ask for whole GPUs without a unit count, "
                            "and min_gpus <= gpus")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def share_milli(self) -> np.ndarray:
        """Share of one GPU in milli-GPUs for GPU-sharing jobs, ``MILLI_PER_GPU`` for whole-GPU jobs."""
        frac = self.gpus_per_unit < 1
        return np.where(frac, np.rint(self.gpus_per_unit * MILLI_PER_GPU), MILLI_PER_GPU).astype(np.int64)

    @property
    def total_gpus(self) -> np.ndarray:
        """GPUs per job: ``gpus_per_unit x max(units, 1)`` (fractional for shares)."""
        return self.gpus_per_unit * np.maximum(self.units, 1)

    def subset(self, index: np.ndarray | slice) -> JobTable:
        """Rows ``index`` (kept in submit order)."""
        idx = np.arange(len(self))[index]
        idx = np.sort(idx)
        return JobTable(
            ids=tuple(self.ids[i] for i in idx),
            submit_s=self.submit_s[idx],
            runtime_s=self.runtime_s[idx],
            limit_s=self.limit_s[idx],
            gpus_per_unit=self.gpus_per_unit[idx],
            units=self.units[idx],
            user=self.user[idx],
            users=self.users,
            priority=self.priority[idx],
            gpu_types=tuple(self.gpu_types[i] for i in idx),
            cpu_milli=self.cpu_milli[idx],
            memory_mib=self.memory_mib[idx],
            min_gpus=self.min_gpus[idx],
            gpu_util=self.gpu_util[idx],
        )


@dataclass
class JobRows:
    """Row-by-row builder used by the trace readers; ``build()`` sorts by submit time."""

    ids: list[str] = field(default_factory=list)
    submit_s: list[float] = field(default_factory=list)
    runtime_s: list[float] = field(default_factory=list)
    limit_s: list[float | None] = field(default_factory=list)
    gpus_per_unit: list[float] = field(default_factory=list)
    units: list[int] = field(default_factory=list)
    user: list[str] = field(default_factory=list)
    priority: list[int] = field(default_factory=list)
    gpu_types: list[frozenset[str]] = field(default_factory=list)
    cpu_milli: list[int] = field(default_factory=list)
    memory_mib: list[int] = field(default_factory=list)
    gpu_util: list[float] = field(default_factory=list)

    def add(
        self,
        job_id: str,
        submit_s: float,
        runtime_s: float,
        gpus_per_unit: float,
        *,
        units: int = 0,
        limit_s: float | None = None,
        user: str = "",
        priority: int = 0,
        gpu_types: frozenset[str] = frozenset(),
        cpu_milli: int = 0,
        memory_mib: int = 0,
        gpu_util: float = float("nan"),
    ) -> None:
        self.ids.append(job_id)
        self.submit_s.append(float(submit_s))
        self.runtime_s.append(float(runtime_s))
        self.limit_s.append(None if limit_s is None else float(limit_s))
        self.gpus_per_unit.append(float(gpus_per_unit))
        self.units.append(int(units))
        self.user.append(user)
        self.priority.append(int(priority))
        self.gpu_types.append(gpu_types)
        self.cpu_milli.append(int(cpu_milli))
        self.memory_mib.append(int(memory_mib))
        self.gpu_util.append(float(gpu_util))

    def build(self, *, rebase: bool = True) -> JobTable:
        return make_jobs(
            self.ids, self.submit_s, self.runtime_s, self.gpus_per_unit, units=self.units,
            limit_s=self.limit_s, users=self.user, priority=self.priority, gpu_types=self.gpu_types,
            cpu_milli=self.cpu_milli, memory_mib=self.memory_mib, gpu_util=self.gpu_util, rebase=rebase,
        )


MIN_LIMIT_S = 1.0
"""Smallest time limit a job may carry (a zero-second job still needs a positive estimate)."""


def make_jobs(
    ids: Sequence[str],
    submit_s: Sequence[float] | np.ndarray,
    runtime_s: Sequence[float] | np.ndarray,
    gpus_per_unit: Sequence[float] | np.ndarray,
    *,
    units: Sequence[int] | np.ndarray | None = None,
    limit_s: Sequence[float | None] | np.ndarray | None = None,
    users: Sequence[str] | None = None,
    priority: Sequence[int] | np.ndarray | None = None,
    gpu_types: Sequence[frozenset[str]] | None = None,
    cpu_milli: Sequence[int] | np.ndarray | None = None,
    memory_mib: Sequence[int] | np.ndarray | None = None,
    min_gpus: Sequence[int] | np.ndarray | None = None,
    gpu_util: Sequence[float] | np.ndarray | None = None,
    rebase: bool = False,
) -> JobTable:
    """Build a sorted :class:`JobTable`. A missing time limit defaults to the runtime (a perfect estimate,
    as the Tiresias and PAI-2020 simulators assume); ``rebase`` shifts submit times to start at 0."""
    n = len(ids)
    sub = np.asarray(submit_s, dtype=float)
    run = np.asarray(runtime_s, dtype=float)
    if limit_s is None:
        lim = run.copy()
    else:
        lim = np.array([r if v is None else v for v, r in zip(limit_s, run, strict=True)], dtype=float)
    lim = np.maximum(lim, MIN_LIMIT_S)
    user_names = list(users) if users is not None else [""] * n
    table = sorted(set(user_names))
    code = {u: i for i, u in enumerate(table)}
    order = np.lexsort((np.arange(n), sub)) if n else np.zeros(0, dtype=int)
    if rebase and n:
        sub = sub - sub[order[0]]
    gt = list(gpu_types) if gpu_types is not None else [frozenset()] * n
    return JobTable(
        ids=tuple(str(ids[i]) for i in order),
        submit_s=sub[order],
        runtime_s=run[order],
        limit_s=lim[order],
        gpus_per_unit=np.asarray(gpus_per_unit, dtype=float)[order],
        units=(np.zeros(n, dtype=np.int64) if units is None else np.asarray(units, dtype=np.int64))[order],
        user=np.array([code[user_names[i]] for i in order], dtype=np.int64),
        users=tuple(table),
        priority=(np.zeros(n, dtype=np.int64) if priority is None else np.asarray(priority, dtype=np.int64))[order],
        gpu_types=tuple(gt[i] for i in order),
        cpu_milli=(np.zeros(n, dtype=np.int64) if cpu_milli is None else np.asarray(cpu_milli, dtype=np.int64))[order],
        memory_mib=(np.zeros(n, dtype=np.int64) if memory_mib is None
                    else np.asarray(memory_mib, dtype=np.int64))[order],
        min_gpus=(np.zeros(n, dtype=np.int64) if min_gpus is None else np.asarray(min_gpus, dtype=np.int64))[order],
        gpu_util=(np.full(n, np.nan) if gpu_util is None else np.asarray(gpu_util, dtype=float))[order],
    )


@dataclass
class TraceReport:
    """What a reader did with its input: lines read, jobs kept, lines skipped as malformed (with the first
    few reasons), and well-formed records left out on purpose (CPU-only jobs, jobs that never ran ...)."""

    path: str
    format: str
    lines: int = 0
    jobs: int = 0
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    excluded: Counter = field(default_factory=Counter)
    causes: Counter = field(default_factory=Counter)
    """Malformed lines by cause (broken quote, wrong field count, bad number, out of range, ...)."""
    utilisation: dict | None = None
    """Where per-job GPU utilisation came from (a joined measurement file's own accounting), if any."""
    states: Counter = field(default_factory=Counter)
    """Final states of the jobs kept, when the trace records them (Slurm sacct: COMPLETED, FAILED, ...)."""

    MAX_EXAMPLES = 5

    def bad(self, line_no: int, reason: str, cause: str = "malformed") -> None:
        self.malformed += 1
        self.causes[cause] += 1
        if len(self.malformed_examples) < self.MAX_EXAMPLES:
            self.malformed_examples.append(f"line {line_no}: {reason}")

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "format": self.format,
            "lines": self.lines,
            "jobs": self.jobs,
            "skipped_lines": self.malformed,
            "skipped_examples": list(self.malformed_examples),
            "skipped_by_cause": dict(sorted(self.causes.items())),
            "excluded": dict(sorted(self.excluded.items())),
            **({"utilisation": self.utilisation} if self.utilisation is not None else {}),
            **({"states": dict(sorted(self.states.items()))} if self.states else {}),
        }


@dataclass(frozen=True)
class Trace:
    jobs: JobTable
    report: TraceReport
