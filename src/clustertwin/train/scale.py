"""Scaling curves (``train scale``) and time-to-train.

**Scaling**: for each GPU count from one node up to N (doubling), the best fitting layout at the same
global batch; throughput, per-GPU throughput and scaling efficiency

    efficiency(N) = (tokens/s per GPU at N) / (tokens/s per GPU at the first GPU count that fits)

and the step time split into compute (GEMMs, attention, element-wise, host overhead, optimizer),
communication (exposed TP, CP, EP, PP, DP, ZeRO-3), pipeline bubble and stragglers, as
fractions of the step, so that the loss of efficiency is attributed to what grows.

**Time-to-train** for a token budget D on G GPUs at throughput X tokens/s:
``seconds = D / X``; ``GPU-hours = G x seconds / 3600``; energy ``= G / gpus_per_node x node power (kW)
x hours x PUE`` (the node's system power as drawn under training load, ``cluster.node.system_power_kw``,
and the facility PUE, default :data:`DEFAULT_PUE`); cost = energy x USD/kWh (+ GPU-hours x an optional
rental price).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.train.breakdown import TERM_GROUP, group_fractions
from clustertwin.train.data import DEFAULT_DATASET
from clustertwin.train.estimate import TrainEstimate
from clustertwin.train.params import TrainParams
from clustertwin.train.search import search
from clustertwin.units import DAY_S, HOUR_S

#: PUE when the facility does not state one (liquid-cooled AI data centre, cf. FacilitySpec defaults:
#: air 1.4, liquid 1.15)
DEFAULT_PUE = {"air": 1.4, "liquid": 1.15, "auto": 1.3}
#: kWh per MWh
KWH_PER_MWH = 1000.0

#: step terms by the group ``train scale`` attributes them to (generated from ``StepBreakdown``)
COMM_TERMS = tuple(k for k, g in TERM_GROUP.items() if g == "communication")
COMPUTE_TERMS = tuple(k for k, g in TERM_GROUP.items() if g == "compute")


@dataclass
class TimeToTrain:
    """Wall-clock, GPU-hours, energy and cost of a token budget."""

    tokens: float
    gpus: int
    tokens_per_s: float
    days: float
    gpu_hours: float
    energy_mwh: float
    pue: float
    cost_usd: float
    energy_cost_usd: float
    ramp_extra_tokens: float = 0.0
    """Tokens of steady steps a batch-size ramp's slower steps are worth, included in the days
    (:mod:`clustertwin.train.ramp`); 0 without a ramp."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def facility_pue(cluster: ClusterSpec) -> float:
    """The facility's PUE, or the default for its cooling."""
    f = cluster.facility
    return f.pue if f.pue is not None else DEFAULT_PUE.get(f.cooling, DEFAULT_PUE["auto"])


def time_to_train(est: TrainEstimate, tokens: float, cluster: ClusterSpec,
                  usd_per_gpu_hour: float = 0.0, ramp_extra_tokens: float = 0.0) -> TimeToTrain:
    """Days, GPU-hours, energy (MWh) and cost of ``tokens`` at the throughput of ``est``; a batch-size ramp
    adds the time of ``ramp_extra_tokens`` more steady-step tokens (:mod:`clustertwin.train.ramp`), and
    ``tokens_per_s`` is then the run's average."""
    if tokens <= 0:
        raise SpecError(f"tokens must be > 0 (got {tokens})", path=("tokens",))
    seconds = (tokens + ramp_extra_tokens) / est.tokens_per_s
    hours = seconds / HOUR_S
    gpu_hours = est.gpus * hours
    pue = facility_pue(cluster)
    node = cluster.node
    kwh = est.gpus / node.gpus * node.system_power_kw * hours * pue
    energy_cost = kwh * cluster.facility.usd_per_kwh
    return TimeToTrain(tokens=tokens, gpus=est.gpus,
                       tokens_per_s=tokens / seconds if ramp_extra_tokens else est.tokens_per_s, days=seconds / DAY_S,
                       gpu_hours=gpu_hours, energy_mwh=kwh / KWH_PER_MWH, pue=pue,
                       energy_cost_usd=energy_cost, cost_usd=energy_cost + gpu_hours * usd_per_gpu_hour,
                       ramp_extra_tokens=ramp_extra_tokens)


@dataclass
class ScalePoint:
    gpus: int
    estimate: TrainEstimate | None
    efficiency: float | None
    fractions: dict[str, float] = field(default_factory=dict)
    """Share of the step by group (``breakdown.STEP_GROUPS``)."""
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        e = self.estimate
        d: dict[str, Any] = {"gpus": self.gpus, "scaling_efficiency": self.efficiency, "fractions": self.fractions,
                             "note": self.note}
        if e is not None:
            d.update({"step_time_s": e.step_time_s, "tokens_per_s": e.tokens_per_s,
                      "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu, "mfu": e.mfu, "hfu": e.hfu,
                      "model_tflops_per_gpu": e.model_tflops_per_gpu,
                      "hardware_tflops_per_gpu": e.hardware_tflops_per_gpu,
                      "memory_gib_per_gpu": e.memory_gib_per_gpu, "layout": e.layout, "breakdown": e.breakdown})
        return d


@dataclass
class ScaleResult:
    points: list[ScalePoint]
    global_batch: int
    precision: str

    def to_dict(self) -> dict[str, Any]:
        return {"global_batch": self.global_batch, "precision": self.precision,
                "points": [p.to_dict() for p in self.points]}


def fractions(est: TrainEstimate) -> dict[str, float]:
    """Step-time shares by :data:`~clustertwin.train.breakdown.STEP_GROUPS` (sum 1): every breakdown term
    counts in the group its ``StepBreakdown`` field names."""
    return group_fractions(est.breakdown, est.step_time_s)


def gpu_counts(start: int, stop: int) -> list[int]:
    """Doubling GPU counts from ``start`` to ``stop`` (``stop`` included)."""
    out, n = [], start
    while n < stop:
        out.append(n)
        n *= 2
    out.append(stop)
    return out


def scale(model: ModelSpec, cluster: ClusterSpec, *, global_batch: int, max_gpus: int | None = None,
          start_gpus: int | None = None, precision: str = "bf16", seq_len: int | None = None,
          fixed: dict[str, Any] | None = None, params: TrainParams | None = None,
          calibration: Calibration | None = None, placement="contiguous",
          dataset=DEFAULT_DATASET, software_stack: str = "auto") -> ScaleResult:
    """Best layout and scaling efficiency at each doubling of the GPU count (``placement`` and
    ``dataset`` as :func:`~clustertwin.train.estimate.estimate`; an explicit node list serves every
    count with its first nodes; ``software_stack``: the run's stack, as :func:`~clustertwin.train.search.search`
    takes it)."""
    top = cluster.total_gpus if max_gpus is None else max_gpus
    first = cluster.node.gpus if start_gpus is None else start_gpus
    if min(top, first) < 1:
        raise SpecError(f"GPU counts must be >= 1 (got {min(top, first)})", path=("gpus",))
    if top > cluster.total_gpus:
        raise SpecError(f"max GPUs {top} exceeds the cluster's {cluster.total_gpus}", path=("gpus",))
    if first > top:
        raise SpecError(f"start GPUs {first} exceeds max GPUs {top}", path=("gpus",))
    points: list[ScalePoint] = []
    base: float | None = None
    for n in gpu_counts(first, top):
        res = search(model, cluster, global_batch=global_batch, gpus=n, precision=precision, seq_len=seq_len,
                     fixed=fixed, top=1, params=params, calibration=calibration, placement=placement,
                     dataset=dataset, software_stack=software_stack)
        e = res.best
        if e is None:
            points.append(ScalePoint(n, None, None, note=f"no fitting layout ({res.no_fit_reason})"))
            continue
        if base is None:
            base = e.tokens_per_s_per_gpu
        points.append(ScalePoint(n, e, e.tokens_per_s_per_gpu / base, fractions(e)))
    return ScaleResult(points=points, global_batch=global_batch, precision=precision)
