"""Job-size terms beyond independent nodes: why a large job fails more often than its nodes alone.

The series model (every unit fails independently, ``λ_job = Σ_c rate_c × units_c``) makes a job's MTTF
exactly ``1 / N`` of one node's. Two published mechanisms make it fall faster:

* **Shared leaf switches.** A leaf (ToR) switch failure interrupts every job with a node under it. A job of
  ``n`` nodes with ``p`` fabric ports per node spans ``p × ceil(n / 32)`` leaf switches in a rail-optimised
  fabric (one leaf per rail per 32-node scalable unit: NVIDIA DGX SuperPOD reference architecture), so a
  1-node job already carries ``p`` switches. Rate per switch: Alibaba HPN (Qian et al., SIGCOMM'24,
  section 2.3): "about 0.051% of ToR switches encounter critical errors and crashes" each month.
* **Software hangs growing with ranks.** The Llama 3 software causes (software bugs, NCCL watchdog
  timeouts: 61 of 419 interruptions) are per rank; a collective's ring or tree has ``log2(ranks)`` steps
  in which one slow or stuck rank stops everyone, so the per-rank rate grows as
  ``g(ranks) = log2(ranks) / log2(16,384)`` (1 at the Llama 3 job, so its calibration is kept). Between 8
  and 1,024 GPUs this makes the job's MTTF fall 1.04 × faster than ``1 / N``; Meta's RSC-1 cluster measured
  1.13 × (job MTTF 47.7 days at 8 GPUs, 7.9 h at 1,024: 145 × for 128 × the nodes; Kokolis et al.,
  "Revisiting Reliability in Large-Scale Machine Learning Research Clusters", arXiv 2410.21680). The log
  form is an assumption; the RSC ratio is the data it is checked on (validation/reliability_field.yaml),
  and the model explains about a third of the measured excess.

Lemon nodes (a few nodes that fail again and again; RSC found 40 and removing them cut the failure rate of
512+-GPU jobs from 14 % to 4 %) add to the rate *in proportion* to the nodes a job spans, so in expectation
they are part of a site's per-node rate and of its spread across sites (:mod:`clustertwin.reliability.sites`),
not of the size exponent.
"""

from __future__ import annotations

import math

from clustertwin.units import DAY_S, HOUR_S

NODES_PER_LEAF = 32
"""Nodes under one leaf switch per rail: the 32-node scalable unit of NVIDIA's DGX SuperPOD reference
architecture (one leaf per rail per unit)."""
MONTH_H = 365.25 / 12.0 * DAY_S / HOUR_S
"""Hours in a mean calendar month (730.5 h), for rates published per month."""
LEAF_SWITCH_FAILURES_PER_SWITCH_HOUR = 0.00051 / MONTH_H
"""Alibaba HPN (SIGCOMM'24, section 2.3): 0.051 % of ToR switches crash with critical errors per month."""
NIC_LINK_FAILURES_PER_PORT_MONTH = 0.00057
"""Alibaba HPN (SIGCOMM'24, section 2.3): 0.057 % of NIC-ToR links fail each month (one site's network
rate; :mod:`clustertwin.reliability.sites`)."""
RANK_GROWTH_REFERENCE = 16384
"""Ranks at which :func:`rank_factor` is 1: the Llama 3 405B job the software rates were calibrated on."""


def leaf_switches(nodes: int, ports_per_node: int, nodes_per_leaf: int = NODES_PER_LEAF) -> int:
    """Leaf switches a job of ``nodes`` nodes spans: ``ports_per_node × ceil(nodes / nodes_per_leaf)``
    (rail-optimised: each port goes to its rail's leaf)."""
    if nodes <= 0 or ports_per_node <= 0:
        return 0
    return ports_per_node * math.ceil(nodes / nodes_per_leaf)


def rank_factor(ranks: int) -> float:
    """Growth of the per-rank software-hang rate with the job's ranks: ``log2(ranks) / log2(16,384)``,
    at least ``log2(2)`` (one rank talking to one other)."""
    return math.log2(max(int(ranks), 2)) / math.log2(RANK_GROWTH_REFERENCE)
