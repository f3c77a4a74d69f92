"""Failure model: interruption causes per component class, rates per device-hour, job-level rates.

Every cause is a Poisson process whose rate scales with the number of *units* a job spans (GPUs, nodes
or NIC ports): ``λ_job,c = rate_c × units_c(job)`` per hour, so the job's interruption rate grows
linearly with its size (the series model that Meta's RSC study uses, ``MTTF = 1 / (N_nodes × r_f)``).

Default rates are calibrated **once** on the Llama 3 405B 54-day snapshot (arXiv 2407.21783, Table 5:
16,384 H100 GPUs, 2,048 servers with 8 GPUs and 8 RoCE NICs each, 1,296 hours, 419 unexpected and 47
planned interruptions): ``rate_c = count_c / (units_c(Llama 3 job) × 1,296 h)``. The calibration uses
the published *counts*; the paper's percentage for "Faulty GPU" (30.1 %) does not match its count
(148 / 419 = 35.3 %), a 5.2-point error in the table that the counts avoid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.reliability.scaling import LEAF_SWITCH_FAILURES_PER_SWITCH_HOUR, leaf_switches, rank_factor
from clustertwin.units import DAY_S, HOUR_S

Unit = Literal["gpu", "node", "nic_port", "leaf_switch"]
UNITS: tuple[str, ...] = ("gpu", "node", "nic_port", "leaf_switch")

#: Component classes (issue 5): what a planner can act on.
COMPONENT_CLASSES: tuple[str, ...] = (
    "gpu", "gpu_memory", "nic", "network", "host", "software", "storage", "planned",
)

# ---- Llama 3 405B calibration run (arXiv 2407.21783, section 3.3 and Table 5) ----
LLAMA3_GPUS = 16384
"""GPUs of the Llama 3 405B pre-training job."""
LLAMA3_GPUS_PER_NODE = 8
"""Grand Teton servers: 8 H100 each (paper section 3.3.1)."""
LLAMA3_NIC_PORTS_PER_NODE = 8
"""One 400 Gb/s RoCE NIC per GPU (paper section 3.3.1)."""
LLAMA3_DAYS = 54.0
"""Length of the snapshot over which Table 5 counts interruptions."""
LLAMA3_UNEXPECTED = 419
"""Unexpected interruptions in the snapshot (Table 5 counts sum to this)."""
LLAMA3_PLANNED = 47
"""Planned interruptions (automated maintenance, firmware/config changes) in the snapshot."""


@dataclass(frozen=True)
class FailureCause:
    """One root cause of job interruptions.

    ``unit`` is what its rate scales with; ``replaces_node`` says whether the job must get another
    node (hardware fault: the node is drained for repair) or can restart in place; ``hang`` whether the
    fault shows up as a hang that only the NCCL watchdog detects; ``planned`` whether it is announced
    (the job checkpoints first and loses no work)."""

    name: str
    component: str
    unit: Unit
    rate_per_unit_hour: float
    replaces_node: bool
    hang: bool = False
    planned: bool = False
    llama3_count: int | None = None
    """Count in the Llama 3 snapshot the default rate was calibrated on (None for user causes)."""
    llama3_published_pct: float | None = None
    """Percentage of the 419 unexpected interruptions as printed in Table 5."""


@dataclass(frozen=True)
class _Row:
    name: str
    component: str
    unit: Unit
    count: int
    pct: float | None
    replaces_node: bool
    hang: bool = False
    planned: bool = False


# Llama 3 Table 5 rows (count, published %), mapped to component classes and scaling units.
# GPU-resident faults scale with GPUs; host parts, host maintenance and dependencies with servers;
# NICs and switch/cable faults with NIC ports (each port has one cable and one switch port);
# software bugs and NCCL watchdog timeouts with ranks (GPUs).
_LLAMA3_ROWS: tuple[_Row, ...] = (
    _Row("faulty_gpu", "gpu", "gpu", 148, 30.1, True),
    _Row("gpu_hbm3", "gpu_memory", "gpu", 72, 17.2, True),
    _Row("software_bug", "software", "gpu", 54, 12.9, False),
    _Row("network_switch_cable", "network", "nic_port", 35, 8.4, False),
    _Row("host_maintenance", "host", "node", 32, 7.6, True),
    _Row("gpu_sram", "gpu_memory", "gpu", 19, 4.5, True),
    _Row("gpu_system_processor", "gpu", "gpu", 17, 4.1, True),
    _Row("nic", "nic", "nic_port", 7, 1.7, True),
    _Row("nccl_watchdog_timeout", "software", "gpu", 7, 1.7, False, hang=True),
    _Row("silent_data_corruption", "gpu", "gpu", 6, 1.4, True),
    _Row("gpu_thermal_sensor", "gpu", "gpu", 6, 1.4, True),
    _Row("ssd", "storage", "node", 3, 0.7, True),
    _Row("power_supply", "host", "node", 3, 0.7, True),
    _Row("server_chassis", "host", "node", 2, 0.5, True),
    _Row("io_expansion_board", "host", "node", 2, 0.5, True),
    _Row("dependency", "software", "node", 2, 0.5, False),
    _Row("cpu", "host", "node", 2, 0.5, True),
    _Row("system_memory", "host", "node", 2, 0.5, True),
    _Row("planned_maintenance", "planned", "node", LLAMA3_PLANNED, None, False, planned=True),
)


def units_of_job(gpus: int, gpus_per_node: int, nic_ports_per_node: int) -> dict[str, int]:
    """Units a job spans: GPUs, nodes ``ceil(gpus / gpus_per_node)``, NIC ports ``nodes × ports`` and leaf
    switches (:func:`clustertwin.reliability.scaling.leaf_switches`)."""
    if gpus <= 0 or gpus_per_node <= 0 or nic_ports_per_node < 0:
        raise SpecError(f"gpus ({gpus}), gpus per node ({gpus_per_node}) must be > 0 and NIC ports "
                        f"per node ({nic_ports_per_node}) >= 0")
    nodes = math.ceil(gpus / gpus_per_node)
    return {"gpu": gpus, "node": nodes, "nic_port": nodes * nic_ports_per_node,
            "leaf_switch": leaf_switches(nodes, nic_ports_per_node)}


def _calibrated_causes() -> tuple[FailureCause, ...]:
    exposure = units_of_job(LLAMA3_GPUS, LLAMA3_GPUS_PER_NODE, LLAMA3_NIC_PORTS_PER_NODE)
    hours = LLAMA3_DAYS * DAY_S / HOUR_S
    return tuple(
        FailureCause(name=r.name, component=r.component, unit=r.unit,
                     rate_per_unit_hour=r.count / (exposure[r.unit] * hours), replaces_node=r.replaces_node,
                     hang=r.hang, planned=r.planned, llama3_count=r.count, llama3_published_pct=r.pct)
        for r in _LLAMA3_ROWS
    )


def _field_causes() -> tuple[FailureCause, ...]:
    """The Llama 3 causes with a shared leaf-switch cause split out of "network switch/cable": the switch
    rate is Alibaba HPN's (:data:`~clustertwin.reliability.scaling.LEAF_SWITCH_FAILURES_PER_SWITCH_HOUR`);
    the expected switch failures of the Llama 3 job are taken out of the cable row, so the 16,384-GPU job
    keeps its 419 unexpected interruptions."""
    exposure = units_of_job(LLAMA3_GPUS, LLAMA3_GPUS_PER_NODE, LLAMA3_NIC_PORTS_PER_NODE)
    hours = LLAMA3_DAYS * DAY_S / HOUR_S
    switch_rate = LEAF_SWITCH_FAILURES_PER_SWITCH_HOUR
    switch_count = switch_rate * exposure["leaf_switch"] * hours
    out = []
    for c in _calibrated_causes():
        if c.name == "network_switch_cable":
            c = replace(c, rate_per_unit_hour=(c.llama3_count - switch_count) / (exposure[c.unit] * hours))
        out.append(c)
    out.append(FailureCause(name="leaf_switch", component="network", unit="leaf_switch",
                            rate_per_unit_hour=switch_rate, replaces_node=False))
    return tuple(out)


@dataclass(frozen=True)
class FailureModel:
    """A set of interruption causes with per-unit-hour rates (default: Llama 3 calibration)."""

    causes: tuple[FailureCause, ...] = field(default_factory=_calibrated_causes)
    rate_scale: float = 1.0
    """Site factor: every per-unit rate is multiplied by it (1: the Llama 3 cluster; see
    :mod:`clustertwin.reliability.sites`)."""
    rank_growth: bool = False
    """Software causes that scale with ranks grow with ``log2(ranks)`` (:func:`scaling.rank_factor`)."""
    site: str | None = None
    """Where ``rate_scale`` comes from (a site id, a GPU generation's median, or None)."""

    @classmethod
    def default(cls) -> FailureModel:
        """The Llama 3 calibration, independent causes, linear in job size (the model other layers use)."""
        return cls()

    @classmethod
    def fleet(cls, rate_scale: float = 1.0, site: str | None = None) -> FailureModel:
        """The fleet model: Llama 3 causes with the job-size terms (shared leaf switches, software hangs
        growing with ranks) and a site factor ``rate_scale`` (:func:`clustertwin.reliability.sites.field_model`
        picks it by site or GPU generation)."""
        if not (math.isfinite(rate_scale) and rate_scale >= 0):
            raise SpecError(f"site rate factor must be a finite number >= 0 (got {rate_scale!r})")
        return cls(causes=_field_causes(), rate_scale=float(rate_scale), rank_growth=True, site=site)

    def with_scale(self, rate_scale: float) -> FailureModel:
        """The same causes at another site factor."""
        if not (math.isfinite(rate_scale) and rate_scale >= 0):
            raise SpecError(f"site rate factor must be a finite number >= 0 (got {rate_scale!r})")
        return replace(self, rate_scale=float(rate_scale))

    def with_rates(self, overrides: Mapping[str, float]) -> FailureModel:
        """Override rates per unit-hour by cause name (``faulty_gpu``) or component class (``gpu``).

        A class override sets the class's total rate *per unit of each cause*, split between its causes
        in proportion to their current rates (a class whose causes all have rate 0 splits evenly)."""
        names = {c.name for c in self.causes}
        causes = list(self.causes)
        for key, value in overrides.items():
            v = float(value)
            if not math.isfinite(v) or v < 0:
                raise SpecError(f"rate for '{key}' must be a finite number >= 0 per unit-hour (got {value!r})")
            if key in names:
                causes = [replace(c, rate_per_unit_hour=v) if c.name == key else c for c in causes]
            elif key in COMPONENT_CLASSES:
                members = [c for c in causes if c.component == key]
                total = sum(c.rate_per_unit_hour for c in members)
                causes = [
                    replace(c, rate_per_unit_hour=v * (c.rate_per_unit_hour / total if total > 0
                                                       else 1.0 / len(members)))
                    if c.component == key else c
                    for c in causes
                ]
            else:
                raise SpecError(f"unknown failure cause or component class '{key}'"
                                f"{did_you_mean(key, [*COMPONENT_CLASSES, *names])}")
        return replace(self, causes=tuple(causes))


@dataclass(frozen=True)
class JobFailureRates:
    """Interruption rates of one job (per hour of wall-clock time), by cause and by component class.

    ``mtbf_h`` is the mean time between *unexpected* interruptions, ``1 / Σ_c λ_c`` over unplanned
    causes (3.09 h for the Llama 3 job); ``mtbi_h`` counts planned interruptions too."""

    gpus: int
    units: dict[str, int]
    causes: tuple[FailureCause, ...]
    rate_per_h: tuple[float, ...]
    """Job-level rate of each cause, per hour: ``rate_per_unit_hour × units[cause.unit]``."""

    @property
    def unexpected_per_h(self) -> float:
        return sum(r for c, r in zip(self.causes, self.rate_per_h, strict=True) if not c.planned)

    @property
    def planned_per_h(self) -> float:
        return sum(r for c, r in zip(self.causes, self.rate_per_h, strict=True) if c.planned)

    @property
    def total_per_h(self) -> float:
        return self.unexpected_per_h + self.planned_per_h

    @property
    def mtbf_h(self) -> float:
        u = self.unexpected_per_h
        return math.inf if u == 0 else 1.0 / u

    @property
    def mtbi_h(self) -> float:
        t = self.total_per_h
        return math.inf if t == 0 else 1.0 / t

    def by_class_per_h(self) -> dict[str, float]:
        out = dict.fromkeys(COMPONENT_CLASSES, 0.0)
        for c, r in zip(self.causes, self.rate_per_h, strict=True):
            out[c.component] = out.get(c.component, 0.0) + r
        return out

    def by_cause_per_h(self) -> dict[str, float]:
        return {c.name: r for c, r in zip(self.causes, self.rate_per_h, strict=True)}

    @property
    def breakdown(self) -> dict[str, object]:
        return {
            "formula": "lambda_job = sum_c rate_c[per unit-hour] x units_c(job); MTBF = 1 / sum(unplanned)",
            "units": self.units,
            "by_class_per_h": self.by_class_per_h(),
            "by_cause_per_h": self.by_cause_per_h(),
        }

    def to_dict(self) -> dict[str, object]:
        return {"gpus": self.gpus, "unexpected_per_h": self.unexpected_per_h,
                "planned_per_h": self.planned_per_h, "mtbf_h": self.mtbf_h, "mtbi_h": self.mtbi_h,
                "breakdown": self.breakdown}


def job_failure_rates(gpus: int, gpus_per_node: int = LLAMA3_GPUS_PER_NODE,
                      nic_ports_per_node: int = LLAMA3_NIC_PORTS_PER_NODE,
                      model: FailureModel | None = None) -> JobFailureRates:
    """Job-level interruption rates: ``λ_c = s × rate_c × units_c × g_c(gpus)`` (per hour) for a job of
    ``gpus`` GPUs, with ``s`` the model's site factor and ``g_c`` the rank growth of software causes (1 in the
    default model)."""
    fm = model or FailureModel.default()
    units = units_of_job(gpus, gpus_per_node, nic_ports_per_node)
    growth = rank_factor(gpus) if fm.rank_growth else 1.0
    rates = tuple(c.rate_per_unit_hour * units[c.unit] * fm.rate_scale
                  * (growth if c.component == "software" and c.unit == "gpu" else 1.0) for c in fm.causes)
    return JobFailureRates(gpus=gpus, units=units, causes=fm.causes, rate_per_h=rates)
