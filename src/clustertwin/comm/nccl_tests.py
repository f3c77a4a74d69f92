"""nccl-tests / rccl-tests logs: read them, write them, and fit the collective model's named parameters.

Reader (:func:`parse_log`): the header (``nThread``, ``nGpus`` = GPUs per thread, ``graph: 1`` for CUDA
graph launches), the ``#  Rank ... on HOST device ...`` lines (ranks and distinct hosts), the collective
(``Collective test starting: all_reduce_perf``, a ``*_perf`` command line, or the file name), and every
NCCL release (``nccl-library=`` or ``NCCL version``), and every
data row: ``size count type [redop] [root]`` then the out-of-place ``time algbw busbw #wrong`` and, when
printed, the in-place block (a block of ``N/A`` is one the tool did not run: ``node bench`` prints its
all_reduce, which torch runs in place, that way). A line that starts with a number but does not parse is counted as
malformed, never dropped silently; rows with ``#wrong > 0`` are counted and left out of the fit.

Writer (:func:`format_log`): the same layout from a model prediction (both blocks), so a fit can be
checked by a round trip.

Fit (:func:`fit`): least squares of ``log(predicted time / measured time)`` over every kept row and both
blocks, in log-parameter space with physical bounds, for a few named :class:`CommParams` fields: the
bandwidth efficiency of the links the logs exercise (``nvlink_efficiency`` / ``mesh_efficiency`` /
``pcie_efficiency``; ``network_efficiency`` across nodes) and the latency terms (``launch_us`` or
``graph_launch_us``, the scale-up step ``nvlink_hop_us_ll`` / ``pcie_hop_us_ll``, and across nodes
``proxy_step_us_ll`` and ``proxy_step_us_simple``, the per-network-step costs of the two protocol
families). The scale-up efficiency is fitted only from single-host logs, where that link limits; logs of a
whole NVL72-class domain add ``nvls_fanin_gb_per_s`` and, across such domains, ``tree_stage_gb_per_s``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from clustertwin.comm.algorithms import NVLS_MAX_ARITY
from clustertwin.comm.links import MESH_KINDS
from clustertwin.comm.model import OPS, collective
from clustertwin.comm.nccl_rows import BadRow, Block, Row, looks_like_row, parse_row  # noqa: F401 (Block: re-exported)
from clustertwin.comm.params import DEFAULT_PARAMS, CommParams
from clustertwin.errors import SpecError
from clustertwin.inputs import MAX_DOCUMENT_BYTES, RowDamage, parse_int, read_dirty_text
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec

_OP_RE = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall|all_to_all|broadcast|reduce|sendrecv)_perf")
_VERSION_RE = re.compile(r"\bNCCL\s+(?:version\s+)?(\d+\.\d+\.\d+)")
_LIBRARY_RE = re.compile(r"nccl-library=(\d+)")
_NVLS_ENV_RE = re.compile(r"NCCL_NVLS_ENABLE set by environment to (\d+)")
_RANK_RE = re.compile(r"#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)")
_OP_NAMES = {"alltoall": "all_to_all", "sendrecv": "send_recv"}

BOUNDS: dict[str, tuple[float, float]] = {
    "nvlink_efficiency": (0.2, 1.06), "mesh_efficiency": (0.2, 1.06), "pcie_efficiency": (0.2, 1.06),
    "network_efficiency": (0.2, 1.06), "launch_us": (0.2, 50.0), "graph_launch_us": (0.05, 20.0),
    "nvlink_hop_us_ll": (0.05, 10.0), "pcie_hop_us_ll": (0.1, 20.0), "proxy_step_us_ll": (0.05, 50.0),
    "nvlink_hop_us_simple": (0.1, 20.0), "nic_latency_us": (0.05, 20.0),
    "proxy_step_us_simple": (0.5, 2000.0), "nvls_fanin_gb_per_s": (2000.0, 200000.0),
    "tree_stage_gb_per_s": (2.0, 200.0),
}
"""Search box of the fitted parameters; the efficiencies' boxes reach past their physical bound (<= 1, CommParams)
so that a fit above it is reported as failed (:meth:`Calibration.fit_problem`) instead of pinned at 1."""


@dataclass
class NcclTestsLog:
    """One parsed log."""

    name: str
    op: str
    ranks: int
    hosts: int
    gpus_per_process: int
    cuda_graph: bool
    rows: list[Row] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    """Data-looking lines that did not parse or broke a number rule (kept verbatim, counted in reports)."""
    nvls: bool = True
    """False when the log shows ``NCCL_NVLS_ENABLE set by environment to 0`` (NCCL_DEBUG=INFO)."""
    nccl_version: str | None = None
    """The NCCL release the run used, from ``# nccl-tests version ... nccl-library=22602`` (nccl-tests >= 2.13)
    or an ``NCCL version 2.26.2+cuda12.8`` line (NCCL_DEBUG=INFO); None when the log does not say."""
    damage: RowDamage = field(default_factory=RowDamage)
    """The malformed lines by cause (``time <= 0``, ``not finite``, ...) with the first line of each."""

    @property
    def wrong_rows(self) -> int:
        return sum(1 for r in self.rows if _bad(r))

    @property
    def blocks(self) -> int:
        return sum((r.out_of_place is not None) + (r.in_place is not None) for r in self.rows)


def _bad(r: Row) -> bool:
    return any(b is not None and b.wrong not in (None, 0) for b in (r.out_of_place, r.in_place))


MAX_RANKS = 2**24
"""Most ranks (and threads x GPUs) a log header may declare."""


def _header_int(text: str, what: str, line: int, name: str, lo: int = 1, hi: int = MAX_RANKS) -> int:
    """A header number (``nThread``, ``nGpus``, a rank); out of range is a SpecError naming file and line."""
    return parse_int(text, f"line {line}: {what}", min_value=lo, max_value=hi, file=name)


def parse_log(text: str, name: str = "<log>", op: str | None = None) -> NcclTestsLog:
    """Parse nccl-tests / rccl-tests output (see the module docstring). ``op`` overrides detection. A data
    line that does not parse, or whose numbers break a rule (:mod:`clustertwin.comm.nccl_rows`), is
    malformed: counted by cause and left out."""
    detected = op
    n_gpus, n_thread, graph = 1, 1, False
    ranks: dict[int, str] = {}
    rows: list[Row] = []
    malformed: list[str] = []
    damage = RowDamage()
    version: str | None = None
    nvls = True
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if version is None:
            version = _version(line, i, name)
        env = _NVLS_ENV_RE.search(line)
        if env:
            nvls = _header_int(env.group(1), "NCCL_NVLS_ENABLE", i, name, lo=0) != 0
        if detected is None:
            m = _OP_RE.search(line)
            if m:
                detected = _OP_NAMES.get(m.group(1), m.group(1))
        if line.startswith("#"):
            m = re.search(r"nThread\s+(\d+)\s+nGpus\s+(\d+)", line)
            if m:
                n_thread = _header_int(m.group(1), "nThread", i, name)
                n_gpus = _header_int(m.group(2), "nGpus", i, name)
            g = re.search(r"\bgraph:\s*(\d+)", line)
            if g:
                graph = _header_int(g.group(1), "graph", i, name, lo=0) > 0
            r = _RANK_RE.search(line)
            if r:
                ranks[_header_int(r.group(1), "Rank", i, name, lo=0, hi=MAX_RANKS - 1)] = r.group(2)
            continue
        if not looks_like_row(line):
            continue
        try:
            rows.append(parse_row(line))
        except BadRow as e:
            malformed.append(raw)
            damage.add(e.cause, i)
        except (ValueError, IndexError):
            malformed.append(raw)
            damage.add("unparsable", i)
    if detected is None:
        m = _OP_RE.search(Path(name).name) or re.search(r"(all_reduce|all_gather|reduce_scatter|alltoall|"
                                                         r"broadcast|reduce|sendrecv)", Path(name).name)
        if m:
            detected = _OP_NAMES.get(m.group(1), m.group(1))
    if detected is None:
        raise SpecError("cannot tell which collective this log measured (no '*_perf' line; "
                        "name the file after the test, e.g. all_reduce_perf.log)", file=name)
    if detected not in OPS:
        raise SpecError(f"unsupported collective '{detected}'", file=name)
    if not rows:
        raise SpecError("no nccl-tests data rows found"
                        + (f" ({len(malformed)} malformed lines: {damage.summary()})" if malformed else ""),
                        file=name)
    n_ranks = len(ranks) if ranks else n_thread * n_gpus
    hosts = len(set(ranks.values())) if ranks else 1
    return NcclTestsLog(name, detected, n_ranks, hosts, n_gpus, graph, rows, malformed, nvls, version, damage)


def _version(line: str, i: int = 0, name: str = "<log>") -> str | None:
    """The NCCL release a header line names: ``nccl-library=22602`` (NCCL_VERSION_CODE, major x 10000 +
    minor x 100 + patch), ``NCCL version 2.26.2`` or ``NCCL 2.26.2`` (``node bench``'s header)."""
    m = _VERSION_RE.search(line)
    if m:
        return m.group(1)
    m = _LIBRARY_RE.search(line)
    if m:
        code = _header_int(m.group(1), "nccl-library", i, name, lo=0, hi=10**8)
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return None


def read_logs(paths: list[str | Path]) -> list[NcclTestsLog]:
    """Read and parse each file; a missing, unreadable or oversize file is a one-line SpecError naming it
    (bytes that are not UTF-8 become U+FFFD, so a data line holding one is counted as malformed)."""
    out = []
    for p in paths:
        path = Path(p)
        if not path.is_file() and not path.is_dir():
            raise SpecError(f"nccl-tests log not found: {path}")
        out.append(parse_log(read_dirty_text(path, max_bytes=MAX_DOCUMENT_BYTES).text, str(path)))
    return out


# ---------------------------------------------------------------------------------------------- writer

def format_log(op: str, sizes: np.ndarray, out_of_place_us: np.ndarray, in_place_us: np.ndarray | None,
               ranks: int, hosts: int = 1, gpus_per_process: int = 1, cuda_graph: bool = False,
               dtype: str = "float", dtype_bytes: int = 4, device: str = "GPU",
               nccl_version: str | None = None) -> str:
    """An nccl-tests style log (header, rank lines, both blocks, summary) from times per size; with
    ``nccl_version`` a ``# NCCL version X`` line names the release the times are for."""
    from clustertwin.comm.result import busbw_factor

    factor = busbw_factor(op, ranks)
    redop = "none" if op in ("all_gather", "all_to_all", "broadcast", "send_recv") else "sum"
    root = 0 if op in ("broadcast", "reduce") else -1
    per_host = -(-ranks // max(hosts, 1))
    lines = [f"# Collective test starting: {op}_perf",
             f"# nThread 1 nGpus {gpus_per_process} minBytes {int(sizes[0])} maxBytes {int(sizes[-1])} step: "
             f"2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: {int(cuda_graph)}", "#",
             "# Using devices"]
    if nccl_version is not None:
        lines.insert(1, f"# NCCL version {nccl_version}")
    for r in range(ranks):
        lines.append(f"#  Rank {r:>2} Group  0 Pid {1000 + r // gpus_per_process:>6} on node{r // per_host:03d} "
                     f"device {r % per_host:>2} [0x00] {device}")
    lines += ["#", "#" + " " * 62 + "out-of-place                       in-place",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
              "   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
              "  (GB/s)"]
    busbws = []
    for i, s in enumerate(sizes):
        cells = []
        for t in (out_of_place_us[i], None if in_place_us is None else in_place_us[i]):
            if t is None:
                continue
            alg = s / (t * 1e-6) / 1e9 if t > 0 else 0.0
            busbws.append(alg * factor)
            cells.append(f"{t:>8.2f} {alg:>7.2f} {alg * factor:>7.2f} {0:>6}")
        lines.append(f"{int(s):>12} {int(s) // dtype_bytes:>13} {dtype:>9} {redop:>7} {root:>7} " + " ".join(cells))
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {np.mean(busbws):.4f}", "#"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------- fit

@dataclass(frozen=True)
class FitResult:
    calibration: Calibration
    params: dict[str, float]
    blocks_used: int
    rows_wrong: int
    rows_malformed: int
    median_abs_error_before: float
    median_abs_error_after: float


def default_names(cluster: ClusterSpec, logs: list[NcclTestsLog]) -> list[str]:
    """The parameters a set of logs can pin down: the scale-up efficiency of the node's link kind (from
    single-host logs, where it is the limiting link), the network efficiency when a log spans hosts, the
    launch term of the launch mode used, the scale-up LL step, and the LL and Simple network-step
    costs across hosts. On an NVLink domain wider than NVLS's 32 heads (an NVL72 rack) a single-host log of
    more than 32 ranks also pins the NVLS fan-in ceiling, and a multi-host log of more than 8 ranks per
    host the store-and-forward rate of the tree's long chain."""
    kind = cluster.node.scale_up.kind
    eff = "nvlink_efficiency" if kind == "nvswitch" else "mesh_efficiency" if kind in MESH_KINDS \
        else "pcie_efficiency"
    nodes = [_nodes(cluster, lg) for lg in logs]
    names = [eff] if any(m == 1 for m in nodes) else []
    multi = any(m > 1 for m in nodes)
    if multi:
        names.append("network_efficiency")
    if any(not lg.cuda_graph for lg in logs):
        names.append("launch_us")
    if any(lg.cuda_graph for lg in logs):
        names.append("graph_launch_us")
    names.append("pcie_hop_us_ll" if eff == "pcie_efficiency" else "nvlink_hop_us_ll")
    if multi:
        names += ["proxy_step_us_ll", "proxy_step_us_simple"]
    wide = kind == "nvswitch" and cluster.node.gpu.nvls
    if wide and any(m == 1 and lg.ranks > NVLS_MAX_ARITY for lg, m in zip(logs, nodes, strict=True)):
        names.append("nvls_fanin_gb_per_s")
    if any(m > 1 and ranks_per_node(cluster, lg) > 8 for lg, m in zip(logs, nodes, strict=True)):
        names.append("tree_stage_gb_per_s")
    return names


def _samples(logs: list[NcclTestsLog]) -> list[tuple[NcclTestsLog, np.ndarray, np.ndarray]]:
    out = []
    for lg in logs:
        sizes, times = [], []
        for r in lg.rows:
            if _bad(r) or r.size_bytes <= 0:
                continue
            for b in (r.out_of_place, r.in_place):
                if b is not None and b.time_us > 0:
                    sizes.append(float(r.size_bytes))
                    times.append(b.time_us)
        if sizes:
            out.append((lg, np.array(sizes), np.array(times)))
    return out


def ranks_per_node(cluster: ClusterSpec, lg: NcclTestsLog) -> int:
    """Ranks per cluster node of a log: ``ranks / hosts``, except on a multi-node NVLink domain (a node spec
    of more than 8 NVSwitch-connected GPUs, e.g. a GB200 NVL72 rack), where nccl-tests counts every compute
    tray as a host but NCCL treats the domain as one node: there the ranks fill the domain first."""
    node = cluster.node
    per_host = -(-lg.ranks // lg.hosts)
    if node.scale_up.kind == "nvswitch" and node.gpus > 8 and per_host < node.gpus:
        return min(lg.ranks, node.gpus)
    return per_host


def _nodes(cluster: ClusterSpec, lg: NcclTestsLog) -> int:
    """Cluster nodes a log spans (:func:`ranks_per_node`)."""
    return -(-lg.ranks // ranks_per_node(cluster, lg))


def _check_rank_table(cluster: ClusterSpec, lg: NcclTestsLog) -> None:
    """The log's rank table (ranks, and ranks per host) fits ``cluster``; a SpecError naming the log if not."""
    ppn = ranks_per_node(cluster, lg)
    if lg.ranks > cluster.total_gpus:
        raise SpecError(f"{lg.ranks} ranks but the cluster has {cluster.total_gpus} GPUs", file=lg.name)
    if ppn > cluster.node.gpus or _nodes(cluster, lg) > cluster.nodes:
        raise SpecError(f"the rank table puts {lg.ranks} ranks on {lg.hosts} host(s) ({ppn} per host); the cluster "
                        f"has {cluster.nodes} node(s) of {cluster.node.gpus} GPUs", file=lg.name)


def _residuals(cluster: ClusterSpec, samples: list, p: CommParams) -> np.ndarray:
    res = []
    for lg, sizes, times in samples:
        ppn = ranks_per_node(cluster, lg)
        try:
            pred = collective(cluster, lg.op, sizes, lg.ranks, ranks_per_node=ppn, params=p,
                              gpus_per_process=lg.gpus_per_process, cuda_graph=lg.cuda_graph,
                              nccl_version=lg.nccl_version, nvls=lg.nvls).time_s
        except SpecError as e:  # a semantic error of one log (its rank table against the cluster)
            raise e.with_context(file=lg.name) from None
        res.append(np.log(np.asarray(pred) * 1e6 / times))
    return np.concatenate(res)


def fit(cluster: ClusterSpec, logs: list[NcclTestsLog], names: list[str] | None = None,
        base: CommParams | None = None) -> FitResult:
    """Fit ``names`` (default :func:`default_names`) to the logs' times; returns the Calibration."""
    from scipy.optimize import least_squares

    base = base or DEFAULT_PARAMS
    names = names or default_names(cluster, logs)
    for n in names:
        if n not in CommParams.model_fields:
            raise SpecError(f"cannot fit unknown comm parameter '{n}'")
    samples = _samples(logs)
    if not samples:
        raise SpecError("no usable rows in the nccl-tests logs (all malformed or #wrong > 0)")
    for lg in logs:
        _check_rank_table(cluster, lg)
    lo = np.log([BOUNDS.get(n, (1e-3, 1e3))[0] for n in names])
    hi = np.log([BOUNDS.get(n, (1e-3, 1e3))[1] for n in names])
    x0 = np.clip(np.log([float(getattr(base, n)) for n in names]), lo + 1e-9, hi - 1e-9)

    def params(x: np.ndarray) -> CommParams:
        return base.model_copy(update=dict(zip(names, np.exp(x).tolist(), strict=True)))

    before = _residuals(cluster, samples, base)
    sol = least_squares(lambda x: _residuals(cluster, samples, params(x)), x0, bounds=(lo, hi),
                        loss="soft_l1", f_scale=0.05, x_scale=1.0, diff_step=1e-3)
    fitted = {n: float(round(v, 6)) for n, v in zip(names, np.exp(sol.x), strict=True)}
    after = _residuals(cluster, samples, params(sol.x))
    used = int(sum(s[1].size for s in samples))
    wrong = sum(lg.wrong_rows for lg in logs)
    bad = sum(len(lg.malformed) for lg in logs)
    err_b = float(np.median(np.abs(np.expm1(before))))
    err_a = float(np.median(np.abs(np.expm1(after))))
    src = (f"clustertwin calibrate --nccl-tests: {len(logs)} log(s) "
           f"({', '.join(sorted({lg.op for lg in logs}))}; {', '.join(Path(lg.name).name for lg in logs[:4])}"
           f"{' ...' if len(logs) > 4 else ''}), {used} timings, {wrong} rows with #wrong > 0 and {bad} malformed "
           f"lines left out; median |time error| {err_b:.1%} -> {err_a:.1%}")
    if not math.isfinite(err_a):
        raise SpecError("the fit did not converge (non-finite residuals)")
    cal = Calibration(comm=fitted, source=src)
    if problem := cal.fit_problem():  # a fit past a physical bound: the logs are faster than the spec allows
        raise SpecError(f"failed fit: {problem}; no calibration written (a damaged log, or a cluster spec with "
                        "slower links than the measured hosts)")
    return FitResult(cal, fitted, used, wrong, bad, err_b, err_a)
