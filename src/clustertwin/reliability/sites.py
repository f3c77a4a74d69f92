"""Failure rates as the field measured them: one factor per measured site, their spread by GPU generation.

Each site is one published count of a real cluster (job, window, what was counted). Its **site factor** is
how many times the Llama 3 calibration (:meth:`FailureModel.fleet`, size terms included) that count is:

``f_site = measured / predicted_{f=1}(same job, same window, same quantity)``

so Llama 3's own factor is 1 and a site's other published figures can be predicted with its factor
(validation/reliability_field.yaml). Across sites the factor is log-normal: by GPU generation
``ln f ~ N(μ_gen, σ)``, ``μ_gen`` the mean of ``ln f`` over the generation's sites (all sites when the
generation has none), ``σ`` the pooled within-generation standard deviation (degrees of freedom
``Σ (n_gen − 1)``). Predictions report the median ``e^μ`` and the 10th–90th percentiles; for a site
without figures of its own that is the Student-t prediction interval ``e^{μ ± t_{0.9,ν} σ sqrt(1 + 1/n)}``
(``n`` sites in the median; :class:`RateRange`), for a named site ``e^{μ ± 1.2816 σ}``. The Monte Carlo
draws one factor per trial spanning the same range.

Quantities: ``unexpected`` (all unplanned interruptions of the job), ``gpu`` (GPU and GPU-memory
classes), ``hardware`` (every class but software and planned), ``nic_link`` (per-port NIC and
switch/cable causes), ``mttf_h`` (mean time between unexpected interruptions).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.reliability.failures import FailureModel, JobFailureRates, job_failure_rates
from clustertwin.reliability.scaling import MONTH_H, NIC_LINK_FAILURES_PER_PORT_MONTH
from clustertwin.units import DAY_S, HOUR_S

Quantity = Literal["unexpected", "gpu", "hardware", "nic_link", "mttf_h"]
Z90 = 1.2815515655446004
"""Standard-normal 90th percentile: ``p10, p90 = e^{μ ∓ Z90 σ}``."""
HARDWARE_CLASSES = frozenset({"gpu", "gpu_memory", "nic", "network", "host", "storage"})
GPU_CLASSES = frozenset({"gpu", "gpu_memory"})


@dataclass(frozen=True)
class Site:
    """One published failure count of a cluster (what :func:`site_factor` calibrates on)."""

    id: str
    org: str
    generation: str | None
    """GPU architecture family, lower case (``ampere``, ``hopper``); None when the source does not say."""
    quantity: Quantity
    value: float
    gpus: int
    gpus_per_node: int
    nic_ports_per_node: int
    hours: float
    """Window the count covers (ignored for ``mttf_h``)."""
    source: str
    confidence: Literal["high", "medium"]
    note: str = ""


SITES: tuple[Site, ...] = (
    Site("llama3-405b", "Meta", "hopper", "unexpected", 419, 16384, 8, 8, 54 * 24.0,
         "Llama Team, The Llama 3 Herd of Models (arXiv 2407.21783), Table 5", "high",
         "419 unexpected interruptions in a 54-day snapshot of 16,384 H100 (the calibration run)"),
    Site("meta-rsc1", "Meta RSC-1", "ampere", "mttf_h", 7.9, 1024, 8, 8, 0.0,
         "Kokolis et al., Revisiting Reliability in Large-Scale ML Research Clusters (arXiv 2410.21680)", "medium",
         "observed MTTF of 1,024-GPU jobs 7.9 h (figure read from secondary notes that agree)"),
    Site("opt-175b", "Meta (cloud)", "ampere", "unexpected", 40, 1024, 8, 8, 16 * 24.0,
         "OPT-175B chronicles, metaseq projects/OPT/chronicles/27_percent_update.md (Dec 3 2021)", "high",
         "40+ restarts in ~16 days (Nov 17 - Dec 3 2021) on 1,024 A100-80GB; Azure NDm A100 v4 hosts, "
         "8 x 200G InfiniBand"),
    Site("bloom-176b", "BigScience / IDRIS Jean Zay", "ampere", "gpu", 1.5, 384, 8, 8, 7 * 24.0,
         "Bekman, The Technology Behind BLOOM Training (Hugging Face blog, 2022)", "high",
         "1-2 GPU failures a week on 384 A100-80GB in use (midpoint 1.5); fabric ports per node assumed 8 "
         "(they do not enter a GPU count)"),
    Site("fire-flyer-2", "DeepSeek / High-Flyer", "ampere", "hardware", 172, 10000, 8, 1, 183 * 24.0,
         "An et al., Fire-Flyer AI-HPC (SC'24, arXiv 2408.14158), Fig. 10 and Appendix Table VII", "high",
         "292 hardware events Oct 2023 - Mar 2024 on 1,250 nodes of 8 A100-PCIe and one 200G IB NIC, less the "
         "120 Xid 63 row-remapping events (NVIDIA's Xid catalog: no action, not an interruption) = 172"),
    Site("alibaba-hpn", "Alibaba Cloud", None, "nic_link", NIC_LINK_FAILURES_PER_PORT_MONTH, 8, 8, 1, MONTH_H,
         "Qian et al., Alibaba HPN: A Data Center Network for LLM Training (SIGCOMM'24), section 2.3", "high",
         "0.057 % of NIC-ToR links fail each month (one port over one month)"),
)
SITE_IDS: tuple[str, ...] = tuple(s.id for s in SITES)


def quantity_of(rates: JobFailureRates, quantity: Quantity, hours: float) -> float:
    """The expected ``quantity`` of a job with ``rates`` over ``hours`` (``mttf_h``: its MTTF)."""
    if quantity == "mttf_h":
        return rates.mtbf_h
    per_h = 0.0
    for c, r in zip(rates.causes, rates.rate_per_h, strict=True):
        if c.planned:
            continue
        if (quantity == "unexpected" or (quantity == "gpu" and c.component in GPU_CLASSES)
                or (quantity == "hardware" and c.component in HARDWARE_CLASSES)
                or (quantity == "nic_link" and c.unit == "nic_port")):
            per_h += r
    return per_h * hours


def site_factor(site: Site) -> float:
    """``f_site = measured / predicted`` with the unscaled fleet model (``mttf_h``: predicted / measured)."""
    rates = job_failure_rates(site.gpus, site.gpus_per_node, site.nic_ports_per_node, FailureModel.fleet())
    predicted = quantity_of(rates, site.quantity, site.hours)
    return predicted / site.value if site.quantity == "mttf_h" else site.value / predicted


def site(site_id: str) -> Site:
    for s in SITES:
        if s.id == site_id:
            return s
    raise SpecError(f"unknown failure site '{site_id}'{did_you_mean(site_id, SITE_IDS)} "
                    f"(known: {', '.join(SITE_IDS)})")


def generation_of(arch: str) -> str:
    """The generation key of a GPU architecture name (``Ampere`` -> ``ampere``)."""
    return arch.strip().lower()


@dataclass(frozen=True)
class RateRange:
    """The site-factor distribution a prediction uses: median, 10th and 90th percentiles.

    For a site without its own figures (``predictive``) the range is the Student-t prediction interval of
    a new draw from the sites measured: ``ln p90/p50 = t_{0.9, ν} σ sqrt(1 + 1/n)``, ``n`` the sites the
    median is taken over and ``ν`` the pooled degrees of freedom of ``σ`` (the textbook interval for one
    new observation of a normal sample with estimated mean and spread, e.g. NIST/SEMATECH e-Handbook
    7.2.2); with ``ν = 0`` or a named site it is ``Z90 σ``."""

    generation: str | None
    sites: tuple[str, ...]
    """Sites the median is taken over (one id when the prediction is for a named site)."""
    log_mean: float
    log_sd: float
    """Pooled σ of ``ln f`` across sites."""
    dof: int = 0
    """Degrees of freedom of ``log_sd`` (``Σ (n_gen − 1)``)."""
    predictive: bool = False
    """True when the prediction is for a site not among :attr:`sites` (the t interval applies)."""

    @property
    def half_width(self) -> float:
        """``ln(p90 / p50)``: ``t_{0.9, ν} σ sqrt(1 + 1/n)`` when :attr:`predictive` and ``ν > 0``, else
        ``Z90 σ``."""
        if not (self.predictive and self.dof > 0):
            return Z90 * self.log_sd
        from scipy.special import stdtrit  # lazy: the CLI's start-up does not pay for scipy

        return float(stdtrit(self.dof, 0.9)) * self.log_sd * math.sqrt(1.0 + 1.0 / len(self.sites))

    @property
    def draw_sd(self) -> float:
        """σ of the normal the Monte Carlo draws ``ln f`` from (truncated at ``±Z90``), so its draws span
        exactly p10–p90: ``half_width / Z90``."""
        return self.half_width / Z90

    @property
    def p50(self) -> float:
        return math.exp(self.log_mean)

    @property
    def p10(self) -> float:
        return math.exp(self.log_mean - self.half_width)

    @property
    def p90(self) -> float:
        return math.exp(self.log_mean + self.half_width)

    def to_dict(self) -> dict[str, object]:
        return {"generation": self.generation, "sites": list(self.sites), "factor_p10": self.p10,
                "factor_p50": self.p50, "factor_p90": self.p90, "log_sd": self.log_sd, "dof": self.dof,
                "interval": "student-t prediction" if self.predictive and self.dof > 0 else "normal"}


@functools.cache
def _log_factors() -> dict[str, float]:
    return {s.id: math.log(site_factor(s)) for s in SITES}


def _pooled_sd(ids: list[str]) -> tuple[float, int]:
    """Pooled within-generation standard deviation of ``ln f`` over the sites ``ids`` (generations with two
    or more of them) and its degrees of freedom ``Σ (n_gen − 1)``."""
    logs = _log_factors()
    chosen = [s for s in SITES if s.id in ids]
    ss, dof = 0.0, 0
    for gen in {s.generation for s in chosen if s.generation is not None}:
        xs = [logs[s.id] for s in chosen if s.generation == gen]
        if len(xs) >= 2:
            m = sum(xs) / len(xs)
            ss += sum((x - m) ** 2 for x in xs)
            dof += len(xs) - 1
    return (math.sqrt(ss / dof) if dof else 0.0), dof


def pooled_log_sd() -> float:
    """Pooled within-generation standard deviation of ``ln f`` (generations with two or more sites)."""
    return _pooled_sd(list(SITE_IDS))[0]


def rate_range(generation: str | None = None, site_id: str | None = None,
               exclude: str | None = None) -> RateRange:
    """The factor distribution for a named site (its own factor as median) or a GPU generation (the median
    over its sites, all sites when it has none); both with the pooled spread. ``exclude`` leaves one site
    out of the medians and the spread (the leave-one-site-out check: what a site without its own figures
    would be predicted)."""
    logs = _log_factors()
    if exclude is not None:
        site(exclude)
    pool = [i for i in SITE_IDS if i != exclude]
    sd, dof = _pooled_sd(pool)
    if site_id is not None:
        s = site(site_id)
        if s.id == exclude:
            raise SpecError(f"site '{site_id}' is the one left out")
        return RateRange(s.generation, (s.id,), logs[s.id], sd, dof)
    gen = generation_of(generation) if generation else None
    by_id = {s.id: s for s in SITES}
    ids = [i for i in pool if gen is not None and by_id[i].generation == gen] or pool
    return RateRange(gen, tuple(ids), sum(logs[i] for i in ids) / len(ids), sd, dof, predictive=True)


def fleet_model(generation: str | None = None, site_id: str | None = None,
                exclude: str | None = None) -> tuple[FailureModel, RateRange]:
    """The fleet failure model at the median factor of a site or generation, and its range (``exclude``: as
    :func:`rate_range`)."""
    rr = rate_range(generation, site_id, exclude)
    return FailureModel.fleet(rr.p50, site=site_id or (f"median of {rr.generation}" if rr.generation
                                                        else "median of all sites")), rr


def node_rate_per_1000_node_days(gpus_per_node: int, nic_ports_per_node: int, rr: RateRange) -> dict[str, float]:
    """Unexpected interruptions of a one-node job per 1,000 node-days at the factor's p10 / p50 / p90."""
    base = job_failure_rates(gpus_per_node, gpus_per_node, nic_ports_per_node, FailureModel.fleet())
    per_1000 = base.unexpected_per_h * DAY_S / HOUR_S * 1000.0
    return {"p10": per_1000 * rr.p10, "p50": per_1000 * rr.p50, "p90": per_1000 * rr.p90}


def job_mttf_curve(gpus_list: list[int], gpus_per_node: int, nic_ports_per_node: int,
                   rr: RateRange) -> list[dict[str, float]]:
    """Job MTTF (h) against GPU count: median and 10th–90th percentile range over sites (a high factor is a
    short MTTF), and ``independent_nodes_h``, one node's MTTF divided by the nodes (the ``1 / N`` model)."""
    one = job_failure_rates(gpus_per_node, gpus_per_node, nic_ports_per_node, FailureModel.fleet(rr.p50)).mtbf_h
    out = []
    for g in gpus_list:
        m = job_failure_rates(g, gpus_per_node, nic_ports_per_node, FailureModel.fleet(rr.p50)).mtbf_h
        nodes = math.ceil(g / gpus_per_node)
        out.append({"gpus": g, "mttf_h": m, "mttf_h_p10": m * rr.p50 / rr.p90, "mttf_h_p90": m * rr.p50 / rr.p10,
                    "independent_nodes_h": one / nodes})
    return out


def leave_one_out() -> list[dict[str, object]]:
    """Each site's calibration figure predicted without it: the median and pooled spread of the other sites
    of its generation (all other sites when it is alone). ``rel_error`` is that prediction's relative error on
    the published figure (an MTTF is inversely proportional to the factor); ``in_range`` whether the figure
    falls inside the 10th–90th percentile range."""
    logs = _log_factors()
    out = []
    for s in SITES:
        rr = rate_range(s.generation, exclude=s.id)
        ratio = math.exp(rr.log_mean - logs[s.id])  # predicted factor / the site's own
        err = (1.0 / ratio if s.quantity == "mttf_h" else ratio) - 1.0
        out.append({"site": s.id, "generation": s.generation, "peers": list(rr.sites),
                    "rel_error": err, "in_range": abs(logs[s.id] - rr.log_mean) <= rr.half_width})
    return out
