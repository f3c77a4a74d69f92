"""Physical latency of collective steps, separate from NCCL's tuner table.

NCCL's ``tuning.cc`` latencies (:mod:`.constants`) are the *tuner's* inputs: they decide which
(algorithm, protocol) NCCL runs, and :mod:`.model` uses them only for that choice. The time a run takes
is composed here from hardware steps, each a named :class:`~clustertwin.comm.params.CommParams` field:

* launch: ``launch_us x gpus_per_process`` without CUDA graphs (one process driving G GPUs, nccl-tests
  ``-g G``, launches G kernels in series), ``graph_launch_us`` inside a graph (nccl-tests ``-G``);
* one scale-up step (NVLink/NVSwitch or GPU mesh: ``nvlink_hop_us_{ll,ll128,simple}``; PCIe:
  ``pcie_hop_us_{ll,simple}``);
* one network step: ``2 x nic_latency_us`` (send and receive NIC) + ``hops x switch_latency_ns`` (the
  fabric's port-to-port latency times the switch hops of the group's span) + ``proxy_step_us_{ll,simple}``
  (NCCL's CPU proxy posting and flushing the step) + the fabric's excess over an RDMA fabric
  (``hop_latency_us - reference_hop_latency_us``: TCP sockets, GPUDirect-TCPXO);
* one NVLink-SHARP phase (``nvls_phase_us``).

Sources for the magnitudes are in each field's docstring; the defaults are fitted to
validation/collective_tables.yaml (see docs/comm.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.comm import constants as C
from clustertwin.comm.params import CommParams


@dataclass(frozen=True)
class StepLatency:
    """Physical step latencies (µs) of one group on one cluster, by protocol."""

    launch_us: float
    """Launch cost of one collective."""
    intra_us: dict[str, float]
    """One scale-up step, by protocol."""
    net_us: dict[str, float]
    """One network step, by protocol (0 on one node)."""
    nvls_phase_us: float
    """One NVLink-SHARP phase."""
    ring_floor_us: float = 0.0
    """Least cost of any step of a multi-node ring (``ring_sync_us``; 0 on one node)."""

    def intra(self, proto: str) -> float:
        return self.intra_us[proto]

    def net(self, proto: str) -> float:
        return self.net_us[proto]


def launch_us(p: CommParams, gpus_per_process: int = 1, cuda_graph: bool = False) -> float:
    """Launch cost of one collective, µs: ``graph_launch_us`` in a CUDA graph, else
    ``launch_us x gpus_per_process`` (the kernels of a multi-GPU process are launched one after another)."""
    if cuda_graph:
        return p.graph_launch_us
    return p.launch_us * max(int(gpus_per_process), 1)


def intra_step_us(p: CommParams, hop: str, proto: str, blackwell: bool = False) -> float:
    """One scale-up step, µs: NVLink-class rows for NVSwitch and GPU meshes, PCIe rows otherwise
    (LL128 does not run on PCIe; it is given the LL row)."""
    if hop == C.NVLINK:
        row = {"LL": p.nvlink_hop_us_ll, "LL128": p.nvlink_hop_us_ll128, "Simple": p.nvlink_hop_us_simple}
        return row[proto] * (p.blackwell_hop_scale if blackwell else 1.0)
    return p.pcie_hop_us_simple if proto == "Simple" else p.pcie_hop_us_ll


def net_step_us(p: CommParams, proto: str, switch_hops: int, switch_latency_ns: float,
                fabric_hop_latency_us: float) -> float:
    """One network step, µs: ``2 nic + hops x switch + proxy(proto) + max(0, fabric hop - RDMA hop)``."""
    proxy = p.proxy_step_us_simple if proto == "Simple" else p.proxy_step_us_ll
    excess = max(0.0, fabric_hop_latency_us - p.reference_hop_latency_us)
    return 2.0 * p.nic_latency_us + max(int(switch_hops), 1) * switch_latency_ns * 1e-3 + proxy + excess


def step_latency(p: CommParams, hop: str, multi_node: bool, switch_hops: int, switch_latency_ns: float,
                 fabric_hop_latency_us: float, gpus_per_process: int = 1,
                 cuda_graph: bool = False, blackwell: bool = False) -> StepLatency:
    """All step latencies of a group (see the module docstring)."""
    intra = {proto: intra_step_us(p, hop, proto, blackwell) for proto in C.PROTOCOLS}
    if multi_node:
        net = {proto: net_step_us(p, proto, switch_hops, switch_latency_ns, fabric_hop_latency_us)
               for proto in C.PROTOCOLS}
    else:
        net = dict.fromkeys(C.PROTOCOLS, 0.0)
    return StepLatency(launch_us(p, gpus_per_process, cuda_graph), intra, net, p.nvls_phase_us,
                       p.ring_sync_us if multi_node else 0.0)
