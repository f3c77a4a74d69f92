"""``diagnose LOG|DIR...``: rules that turn training-job logs, kernel logs and node metrics into findings.

Log rules (signatures as PyTorch, NCCL, the CUDA runtime and the NVIDIA driver print them):

- ``NCCL_TIMEOUT``: ``ProcessGroupNCCL ... Watchdog caught collective operation timeout: WorkNCCL(SeqNum=,
  OpType=, ..., Timeout(ms)=) ran for N milliseconds`` (PyTorch's default timeout is 10 min).
- ``IB_COMPLETION_ERROR``: ``NCCL WARN NET/IB : Got completion from peer ... with error 12`` (12 = transport
  retry counter exceeded: the peer or the path died; 5 = work request flushed, a consequence).
- ``NCCL_COMM_ERROR``: ``ncclRemoteError`` / ``ncclSystemError`` / ``ncclInternalError`` / ``ncclUnhandledCudaError``.
- ``NCCL_NVLS``: ``Failed to bind NVLink SHARP (NVLS) Multicast memory`` (Fabric Manager / NVSwitch state).
- ``CUDA_OOM``: ``CUDA out of memory. Tried to allocate X. GPU g has a total capacity of T of which F is free
  ... A is allocated by PyTorch, and R is reserved by PyTorch but unallocated`` (older torch: "capacty").
  Given the job (:class:`~clustertwin.ops.oom_advice.JobContext`), the action comes from the training
  memory model (:mod:`clustertwin.ops.oom_advice`); without it, generic advice naming the flags.
- ``CUDA_ECC``: ``uncorrectable ECC error encountered``.
- ``XID_<code>`` / ``GPU_FELL_OFF_BUS``: kernel-log ``NVRM: Xid`` lines (see :mod:`clustertwin.ops.xid`).
- ``DRIVER_MISMATCH``: ``CUDA driver version is insufficient for CUDA runtime version``, ``Driver/library
  version mismatch``, ``NVRM: API mismatch``, ``The NVIDIA driver on your system is too old``.
- ``IB_LINK_DOWN_EVENT``: ``mlx5_core <pci> <netdev>: Link down`` kernel lines; ``ibstat`` and ``perfquery``
  outputs found among the inputs are checked like ``node check`` does.
- ``DIST_TEARDOWN``: c10d store / ``ChildFailedError`` lines, symptoms of another rank's exit.

Metrics CSV rule (``INPUT_PIPELINE_STALL``): rows where GPU utilisation < 40 % while CPU iowait >= 20 %;
reported when they are at least a quarter of the samples.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.ops import ib as ibmod
from clustertwin.ops.findings import Evidence, Finding, Severity, sort_findings
from clustertwin.ops.oom_advice import JobContext, OomFinding, advise
from clustertwin.ops.xid import count_malformed_xid, parse_kernel_log, xid_findings
from clustertwin.units import GIB, KIB, MIB, TIB, human_bytes

MAX_EVIDENCE = 10
"""Evidence lines kept per finding (the title carries the full count)."""
GPU_UTIL_LOW_PCT = 40.0
"""GPU utilisation below this while the CPU waits on I/O marks an input-bound step."""
IOWAIT_HIGH_PCT = 20.0
"""CPU iowait at or above this share of CPU time: loader threads mostly wait on storage."""
STALL_MIN_FRACTION = 0.25
"""Share of samples that must look input-bound before a stall is reported."""
BINARY_SNIFF_BYTES = 8192
GPU_UTIL_COLUMNS = ("gpu_util_pct", "gpu_util", "utilization.gpu [%]", "utilization.gpu", "DCGM_FI_DEV_GPU_UTIL")
IOWAIT_COLUMNS = ("iowait_pct", "cpu_iowait_pct", "iowait", "cpu_iowait")
_UNIT = {"B": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB, "TiB": TIB}

_OOM_RE = re.compile(r"CUDA out of memory\. Tried to allocate ([\d.]+) (\w+)\. GPU (\d+) has a total "
                     r"capac(?:i)?ty of ([\d.]+) (\w+) of which ([\d.]+) (\w+) is free")
_OOM_OLD_RE = re.compile(r"CUDA out of memory\. Tried to allocate ([\d.]+) (\w+) \(GPU (\d+); ([\d.]+) (\w+) total "
                         r"capacity; ([\d.]+) (\w+) already allocated; ([\d.]+) (\w+) free; ([\d.]+) (\w+) reserved")
"""torch < 2.1 wording: ``(GPU 3; 39.59 GiB total capacity; 36.12 GiB already allocated; 1.02 GiB free;
37.40 GiB reserved in total by PyTorch)``."""
_OOM_ALLOC_RE = re.compile(r"([\d.]+) (\w+) is allocated by PyTorch, and ([\d.]+) (\w+) is reserved by PyTorch "
                           r"but unallocated")
_TIMEOUT_RE = re.compile(r"(?:\[Rank (\d+)\] )?Watchdog caught collective operation timeout: WorkNCCL\("
                         r"SeqNum=(\d+), OpType=(\w+).*?Timeout\(ms\)=(\d+)\) ran for (\d+) milliseconds")
_IB_COMPLETION_RE = re.compile(r"NCCL WARN NET/IB ?: Got completion from peer (\S+) with error (\d+)")
_NCCL_ERR_RE = re.compile(r"\b(ncclRemoteError|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|"
                          r"ncclInvalidUsage)\b")
_NVLS_RE = re.compile(r"Failed to bind NVLink SHARP \(NVLS\) Multicast memory")
_ECC_RE = re.compile(r"uncorrectable ECC error encountered", re.IGNORECASE)
_DRIVER_RE = re.compile(r"CUDA driver version is insufficient for CUDA runtime version|Driver/library version "
                        r"mismatch|NVRM: API mismatch|The NVIDIA driver on your system is too old")
_LINK_DOWN_RE = re.compile(r"mlx5_core [0-9a-fA-F:.]+ (\S+): Link down")
_TEARDOWN_RE = re.compile(r"ChildFailedError|recvValue failed|Failed to recv, got 0 bytes|TCPStore.*"
                          r"(?:Connection reset|Broken pipe)|heartbeat.*(?:timeout|failed)", re.IGNORECASE)


@dataclass
class DiagnoseResult:
    findings: list[Finding]
    files_read: int
    lines_read: int

    def to_dict(self) -> dict[str, Any]:
        """``{"findings": [...], "files_read", "lines_read"}`` (the documented --json schema)."""
        return {"findings": [f.to_dict() for f in self.findings], "files_read": self.files_read,
                "lines_read": self.lines_read}


def _bytes(value: str, unit: str) -> float:
    return float(value) * _UNIT.get(unit, 1)


@dataclass
class _Hits:
    """Evidence per (code), with the details each rule's title and action need."""

    lines: dict[str, list[Evidence]] = field(default_factory=dict)
    details: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, code: str, ev: Evidence, **detail: Any) -> None:
        self.lines.setdefault(code, []).append(ev)
        self.details.setdefault(code, []).append(detail)


def _scan_lines(lines: list[str], file: str, hits: _Hits) -> None:
    for i, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            continue
        ev = Evidence(file, i, text)
        if m := _TIMEOUT_RE.search(text):
            hits.add("NCCL_TIMEOUT", ev, rank=m.group(1), seq=int(m.group(2)), op=m.group(3),
                     timeout_ms=int(m.group(4)), ran_ms=int(m.group(5)))
        elif m := _IB_COMPLETION_RE.search(text):
            hits.add("IB_COMPLETION_ERROR", ev, peer=m.group(1), error=int(m.group(2)))
        elif _NVLS_RE.search(text):
            hits.add("NCCL_NVLS", ev)
        elif m := _NCCL_ERR_RE.search(text):
            hits.add("NCCL_COMM_ERROR", ev, kind=m.group(1))
        elif m := _OOM_RE.search(text):
            d: dict[str, Any] = {"requested_bytes": _bytes(m.group(1), m.group(2)), "gpu": int(m.group(3)),
                                 "total_bytes": _bytes(m.group(4), m.group(5)),
                                 "free_bytes": _bytes(m.group(6), m.group(7))}
            if a := _OOM_ALLOC_RE.search(text):
                d["allocated_bytes"] = _bytes(a.group(1), a.group(2))
                d["reserved_unallocated_bytes"] = _bytes(a.group(3), a.group(4))
            hits.add("CUDA_OOM", ev, **d)
        elif m := _OOM_OLD_RE.search(text):
            alloc, reserved = _bytes(m.group(6), m.group(7)), _bytes(m.group(10), m.group(11))
            hits.add("CUDA_OOM", ev, requested_bytes=_bytes(m.group(1), m.group(2)), gpu=int(m.group(3)),
                     total_bytes=_bytes(m.group(4), m.group(5)), free_bytes=_bytes(m.group(8), m.group(9)),
                     allocated_bytes=alloc, reserved_unallocated_bytes=max(reserved - alloc, 0.0))
        elif _ECC_RE.search(text):
            hits.add("CUDA_ECC", ev)
        elif _DRIVER_RE.search(text):
            hits.add("DRIVER_MISMATCH", ev)
        elif m := _LINK_DOWN_RE.search(text):
            hits.add("IB_LINK_DOWN_EVENT", ev, port=m.group(1))
        elif _TEARDOWN_RE.search(text):
            hits.add("DIST_TEARDOWN", ev)


def _gib(n: float) -> str:
    return human_bytes(n)


MODEL_FLAGS_HINT = ("for advice from the training memory model give the job's --model, --cluster, --layout and "
                    "--global-batch (and --seq-len)")
"""Appended to the generic OOM advice: the flags that enable the model-based advice."""


def oom_action(d: dict[str, Any]) -> str:
    """Generic advice from the parsed OOM numbers: fragmentation when the reserved-but-unallocated pool could
    have held the request, otherwise a memory reduction ordered by cost to throughput; both name the flags
    that enable the model-based advice."""
    frag = d.get("reserved_unallocated_bytes", 0.0)
    if frag >= d["requested_bytes"]:
        return (f"fragmentation: {_gib(frag)} is reserved but unallocated, more than the {_gib(d['requested_bytes'])} "
                f"requested; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; {MODEL_FLAGS_HINT}")
    return ("the model state and activations do not fit: in order of throughput cost, enable selective "
            "activation recompute, halve the micro-batch (keep the global batch with more accumulation), "
            "shard optimizer state (ZeRO-1/2, distributed optimizer), raise tensor or pipeline parallelism, "
            f"or full recompute; check a layout first with 'clustertwin train estimate'; {MODEL_FLAGS_HINT}")


_OOM_FIGURES = ("requested_bytes", "free_bytes", "total_bytes", "allocated_bytes", "reserved_unallocated_bytes")


def _finding_from_hits(code: str, evs: list[Evidence], details: list[dict[str, Any]],
                       job: JobContext | None = None) -> Finding:
    n = len(evs)
    kept = tuple(evs[:MAX_EVIDENCE])
    sev: Severity
    if code == "NCCL_TIMEOUT":
        ops = sorted({d["op"] for d in details})
        ranks = sorted({d["rank"] for d in details if d["rank"] is not None}, key=int)
        seqs = sorted({d["seq"] for d in details})
        tmo = max(d["timeout_ms"] for d in details) / 1e3
        title = (f"NCCL collective timeout ({', '.join(ops)}, SeqNum {seqs[0]}"
                 f"{'..' + str(seqs[-1]) if len(seqs) > 1 else ''}, timeout {tmo:.0f} s) on "
                 f"{len(ranks) or n} rank(s){': ' + ','.join(ranks) if ranks else ''}")
        return Finding("error", code, title, kept,
                       "a rank stopped entering the collective: find the first error on any rank (Xid, OOM, "
                       "exception, IB error) before the timeout; ranks missing from this list are the suspects; "
                       "rerun with NCCL_DEBUG=INFO; raise the timeout only for known-slow phases (checkpointing)")
    if code == "IB_COMPLETION_ERROR":
        peers = sorted({d["peer"] for d in details})
        errs = sorted({d["error"] for d in details})
        sev = "error"
        hint = ("error 12 = transport retry counter exceeded: the link or the peer node failed"
                if 12 in errs else "error 5 = work request flushed, a consequence of an earlier failure")
        return Finding(sev, code, f"NCCL InfiniBand completion errors {errs} from peer(s) {', '.join(peers)} ({n}x)",
                       kept, f"{hint}; check ibstat/perfquery on this node and the peer and the switch port "
                       "between them")
    if code == "CUDA_OOM":
        d = max(details, key=lambda x: x["requested_bytes"])
        parts = [f"GPU {d['gpu']}: tried to allocate {_gib(d['requested_bytes'])}",
                 f"{_gib(d['free_bytes'])} free of {_gib(d['total_bytes'])}"]
        if "allocated_bytes" in d:
            parts.append(f"{_gib(d['allocated_bytes'])} allocated, {_gib(d['reserved_unallocated_bytes'])} "
                         "reserved-unallocated by PyTorch")
        figures = tuple((k, float(d[k])) for k in _OOM_FIGURES if k in d)
        title = f"CUDA out of memory ({n}x): " + "; ".join(parts)
        if job is None:
            return OomFinding("error", code, title, kept, oom_action(d), oom=figures)
        advice = advise(job)
        return OomFinding("error", code, title, kept, advice.action(d), oom=figures, advice=advice)
    table: dict[str, tuple[Severity, str, str]] = {
        "NCCL_COMM_ERROR": ("error", "NCCL communicator error", "ncclRemoteError: a peer exited or the network "
                            "failed, look at the other ranks' first error; ncclSystemError: check the NIC, "
                            "/dev/shm size and ulimits; ncclUnhandledCudaError: a CUDA fault, check Xid"),
        "NCCL_NVLS": ("error", "NVLink SHARP (NVLS) setup failed", "check nvidia-fabricmanager status and "
                      "NVSwitch health; NCCL_NVLS_ENABLE=0 works around it at some bandwidth cost"),
        "CUDA_ECC": ("critical", "uncorrectable ECC error hit a CUDA kernel", "drain the node and reset the GPU; "
                     "check the kernel log for Xid 48/94/95 and the ECC counters (node check)"),
        "DRIVER_MISMATCH": ("error", "NVIDIA driver / CUDA version mismatch", "the loaded kernel module, the "
                            "user-space driver libraries and the CUDA runtime must agree: reboot after a driver "
                            "upgrade, or install a driver that supports this CUDA version (node check)"),
        "IB_LINK_DOWN_EVENT": ("warning", "network link went down", "check for flapping (repeats) with "
                               "ibstat/perfquery LinkDownedCounter; reseat or replace the cable/transceiver"),
        "DIST_TEARDOWN": ("info", "distributed teardown messages", "symptoms of another rank's exit, not a "
                          "cause: look for that rank's first error"),
    }
    sev, title, action = table[code]
    return Finding(sev, code, f"{title} ({n}x)", kept, action)


def _is_binary(path: Path) -> bool:
    with path.open("rb") as f:
        return b"\0" in f.read(BINARY_SNIFF_BYTES)


def _files(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*") if q.is_file()))
        elif p.is_file():
            out.append(p)
        else:
            raise SpecError(f"{p}: no such file or directory")
    return out


def _metrics_findings(text: str, file: str) -> tuple[list[Finding], int, int]:
    """(findings, rows read, malformed rows) of a metrics CSV."""
    reader = csv.DictReader(io.StringIO(text))
    cols = reader.fieldnames or []
    util_col = next((c for c in GPU_UTIL_COLUMNS if c in cols), None)
    io_col = next((c for c in IOWAIT_COLUMNS if c in cols), None)
    if util_col is None or io_col is None:
        return [], 0, 0
    rows = malformed = 0
    stalled: list[Evidence] = []
    for i, row in enumerate(reader, 2):
        rows += 1
        try:
            util, iowait = float(row[util_col]), float(row[io_col])
        except (TypeError, ValueError):
            malformed += 1
            continue
        if util < GPU_UTIL_LOW_PCT and iowait >= IOWAIT_HIGH_PCT:
            stalled.append(Evidence(file, i, ",".join(str(row.get(c, "")) for c in cols)))
    good = rows - malformed
    out: list[Finding] = []
    if good and len(stalled) / good >= STALL_MIN_FRACTION:
        out.append(Finding("warning", "INPUT_PIPELINE_STALL",
                           f"input pipeline stall: {len(stalled)} of {good} samples with GPU utilisation "
                           f"< {GPU_UTIL_LOW_PCT:.0f}% and iowait >= {IOWAIT_HIGH_PCT:.0f}%",
                           tuple(stalled[:MAX_EVIDENCE]),
                           "the GPUs wait for data: add DataLoader workers and prefetch, stage the dataset on "
                           "local NVMe, use larger sequential shards (WebDataset/TFRecord), check storage "
                           "bandwidth with 'node bench --storage PATH'"))
    return out, rows, malformed


def diagnose(paths: Iterable[str | Path], job: JobContext | None = None) -> DiagnoseResult:
    """Read every file (directories recursively) and apply the rules; findings most severe first.
    ``job`` (model, cluster, layout) turns the CUDA OOM advice into the memory model's suggestions."""
    files = _files(paths)
    hits = _Hits()
    findings: list[Finding] = []
    files_read = lines_read = malformed = 0
    for path in files:
        if _is_binary(path):
            continue
        raw = path.read_bytes()
        text = raw.decode("utf-8", errors="replace")
        lines = text.splitlines()
        name = str(path)
        files_read += 1
        lines_read += len(lines)
        malformed += sum(1 for ln in lines if "\ufffd" in ln)
        if path.suffix.lower() == ".csv":
            f, _, bad = _metrics_findings(text, name)
            findings += f
            malformed += bad
            continue
        _scan_lines(lines, name, hits)
        events, fell = parse_kernel_log(lines)
        findings += xid_findings(events, fell, name)
        malformed += count_malformed_xid(lines)
        if lines and lines[0].startswith("CA '"):
            findings += ibmod.ib_findings(ibmod.parse_ibstat(text, name))
        elif any(ln.startswith("# Port counters") for ln in lines[:2]):
            port = ibmod.IbPort(path.stem, 1, "Active", "LinkUp", None, "InfiniBand",
                                ibmod.parse_perfquery(text), source=name, line=1)
            findings += ibmod.ib_findings([port])
    for code, evs in hits.lines.items():
        findings.append(_finding_from_hits(code, evs, hits.details[code], job))
    if malformed:
        findings.append(Finding("info", "MALFORMED_LINES", f"{malformed} malformed line(s) skipped "
                                "(undecodable bytes, unparsable Xid lines or non-numeric metric rows)", (),
                                "none; check for truncated or mixed-encoding logs if counts are high"))
    return DiagnoseResult(sort_findings(findings), files_read, lines_read)
