"""One rank's trace, reduced to what the breakdown needs (kept compact so a 1 GB trace fits in memory).

A reader (Kineto JSON, Nsight Systems SQLite) fills a :class:`RankTrace`: the step windows, the device
activity (kernels, copies, and on CPU-only traces the host threads' operators and the gloo workers'
collectives) each with its term, the host-side markers (data loading, synchronisation waits) and the
counted damage (what it skipped and why). Times are microseconds on the trace's clock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Activity:
    """One interval of device work: ``term`` is a compute class, ``comm`` or ``memcpy``."""

    ts: float
    end: float
    term: str
    name: str
    stream: int = 0
    correlation: int = -1
    kind: str = ""
    """Group kind of a collective (``tp``, ``dp``, ...; see :data:`classify.COMM_KINDS`)."""
    collective: str = ""
    bytes: int = 0
    hta_type: str = ""
    """HTA's kernel type of a GPU event (empty for CPU-mode activity)."""


@dataclass(slots=True)
class Collective:
    """A collective call seen on the host (``record_param_comms``, ``c10d::*``): its group and size."""

    ts: float
    end: float
    tid: int
    collective: str
    kind: str
    pg_name: str = ""
    group_size: int = 0
    bytes: int = 0
    elems: int = 0
    """Elements of the first tensor (``c10d::`` operators, whose input type is a tensor list)."""
    source: str = ""
    """``record_param_comms`` (``param``) or a ``c10d::`` operator (``c10d``)."""


@dataclass
class Step:
    """A step window (``ProfilerStep#N`` or a named NVTX range)."""

    name: str
    number: int
    ts: float
    end: float


@dataclass
class RankTrace:
    source: str
    rank: int | None = None
    world_size: int | None = None
    backend: str = ""
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    """pg_name -> {"desc", "ranks", "kind"} from ``distributedInfo.pg_config``."""
    steps: list[Step] = field(default_factory=list)
    activity: list[Activity] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    data_spans: list[tuple[float, float]] = field(default_factory=list)
    wait_spans: list[tuple[float, float]] = field(default_factory=list)
    launches: dict[int, float] = field(default_factory=dict)
    """correlation id -> host launch time (``cudaLaunchKernel`` and friends)."""
    cpu_mode: bool = False
    """No GPU activity: the host threads' operators are the device timeline."""
    base_time_ns: int | None = None
    float_ts: bool = False
    """Some event time is fractional (a nanosecond-resolution trace): HTA rounds such traces."""
    damage: Counter[str] = field(default_factory=Counter)
    """What the reader skipped, by cause (e.g. ``truncated gzip``, ``event without ts``)."""
    event_kinds: Counter[str] = field(default_factory=Counter)
    """Events read, by category."""

    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else self.source
