"""``diagnose LOG|DIR...``: rules that turn training-job logs, kernel logs and node metrics into findings.

Log rules (signatures as PyTorch, NCCL, the CUDA runtime and the NVIDIA driver print them):

- ``NCCL_TIMEOUT``: ``ProcessGroupNCCL ... Watchdog caught collective operation timeout: WorkNCCL(SeqNum=,
  OpType=, ..., Timeout(ms)=) ran for N milliseconds`` (PyTorch's default timeout is 10 min).
- ``IB_COMPLETION_ERROR``: ``NCCL WARN NET/IB : Got completion from peer ... with error 12`` (or ``status=IBV_WC_
  RETRY_EXC_ERR(12)``): 12 = transport retry counter exceeded, the peer or path died; 5 = flushed, a consequence.
- ``NCCL_COMM_ERROR``: ``ncclRemoteError`` / ``ncclSystemError`` / ``ncclInternalError`` / ``ncclUnhandledCudaError``.
- ``NCCL_NVLS``: ``Failed to bind NVLink SHARP (NVLS) Multicast memory`` (Fabric Manager / NVSwitch state).
- ``CUDA_OOM``: ``CUDA out of memory. Tried to allocate X. GPU g has a total capacity of T of which F is free
  ... A is allocated by PyTorch, and R is reserved by PyTorch but unallocated`` (older torch: "capacty").
  Given the job (:class:`~clustertwin.ops.diagnosis.oom_advice.JobContext`), the action comes from the training
  memory model (:mod:`clustertwin.ops.diagnosis.oom_advice`); without it, generic advice naming the flags.
- ``CUDA_ECC``: ``uncorrectable ECC error encountered``.
- ``XID_<code>`` / ``GPU_FELL_OFF_BUS``: kernel-log ``NVRM: Xid`` lines (see :mod:`clustertwin.ops.health.xid`).
- ``DRIVER_MISMATCH``: ``CUDA driver version is insufficient for CUDA runtime version``, ``Driver/library
  version mismatch``, ``NVRM: API mismatch``, ``The NVIDIA driver on your system is too old``.
- ``IB_LINK_DOWN_EVENT``: ``mlx5_core <pci> <netdev>: Link down`` kernel lines; ``ibstat`` and ``perfquery``
  outputs found among the inputs are checked like ``node check`` does.
- ``DIST_TEARDOWN``: c10d store / ``ChildFailedError`` lines, symptoms of another rank's exit.

Findings of one job are also chained in causal order (``JOB_FAILURE_CHAIN``, :mod:`clustertwin.ops.diagnosis.incidents`):
the first OOM on rank 7, then the NCCL timeouts on ranks 12-13. Files are decoded as UTF-8, or UTF-16/32 when
they start with a byte-order mark; binary files are skipped and counted (``BINARY_SKIPPED``), never silently.

Metrics CSV rule (``INPUT_PIPELINE_STALL``): rows where GPU utilisation < 40 % while CPU iowait >= 20 %;
reported when they are at least a quarter of the samples.
"""

from __future__ import annotations

import codecs
import dataclasses
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.inputs import RowDamage, csv_rows
from clustertwin.ops.diagnosis import incidents as inc
from clustertwin.ops.diagnosis.oom_advice import JobContext, OomFinding, advise
from clustertwin.ops.findings import Evidence, Finding, Severity, sort_findings
from clustertwin.ops.health import ib as ibmod
from clustertwin.ops.health.xid import count_malformed_xid, parse_kernel_log, xid_findings
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

_N = r"(\d{1,20}(?:\.\d{1,20})?)"
"""A size figure as PyTorch prints it (``2.50``); malformed figures (``1.2.3``, 400 digits) do not match and the
line counts as malformed."""
_OOM_RE = re.compile(rf"CUDA out of memory\. Tried to allocate {_N} (\w+)\. GPU (\d{{1,7}}) has a total "
                     rf"capac(?:i)?ty of {_N} (\w+) of which {_N} (\w+) is free")
_OOM_OLD_RE = re.compile(rf"CUDA out of memory\. Tried to allocate {_N} (\w+) \(GPU (\d{{1,7}}); {_N} (\w+) total "
                         rf"capacity; {_N} (\w+) already allocated; {_N} (\w+) free; {_N} (\w+) reserved")
_OOM_ANY_RE = re.compile(r"CUDA out of memory")
"""torch < 2.1 wording: ``(GPU 3; 39.59 GiB total capacity; 36.12 GiB already allocated; 1.02 GiB free;
37.40 GiB reserved in total by PyTorch)``."""
_OOM_ALLOC_RE = re.compile(rf"{_N} (\w+) is allocated by PyTorch, and {_N} (\w+) is reserved by PyTorch "
                           r"but unallocated")
_TIMEOUT_RE = re.compile(r"(?:\[Rank (\d+)\] )?Watchdog caught collective operation timeout: WorkNCCL\("
                         r"SeqNum=(\d+), OpType=(\w+).*?Timeout\(ms\)=(\d+)\) ran for (\d+) milliseconds")
_IB_COMPLETION_RE = re.compile(r"NCCL WARN NET/IB ?: Got completion from peer (\S+) with (?:error |status=(?:\w+\()?)(\d+)")
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
    files_skipped: int = 0
    """Binary (or undecodable) files not read; each is named in a BINARY_SKIPPED finding."""

    def to_dict(self) -> dict[str, Any]:
        """``{"findings": [...], "files_read", "lines_read", "files_skipped"}`` (the documented --json schema)."""
        return {"findings": [f.to_dict() for f in self.findings], "files_read": self.files_read,
                "lines_read": self.lines_read, "files_skipped": self.files_skipped}


def _bytes(value: str, unit: str) -> float:
    return float(value) * _UNIT.get(unit, 1)


@dataclass
class _Hits:
    """Evidence per (code), with the details each rule's title and action need."""

    lines: dict[str, list[Evidence]] = field(default_factory=dict)
    details: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    order: int = 0
    """Lines seen so far over all files (the order of lines without time stamps)."""

    def add(self, code: str, ev: Evidence, **detail: Any) -> None:
        self.lines.setdefault(code, []).append(ev)
        self.details.setdefault(code, []).append(detail)


def _scan_lines(lines: list[str], file: str, hits: _Hits, job: str = ".", default_rank: int | None = None) -> int:
    """Apply the line rules (first match wins); every hit records its job, rank, time stamp and order.
    Returns the number of malformed OOM reports (counted, not parsed)."""
    bad = 0
    for i, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            continue
        ev = Evidence(file, i, text)
        rank = inc.rank_of(text)
        ctx = {"job": job, "rank": default_rank if rank is None else rank, "time": inc.time_of(text),
               "order": hits.order}
        hits.order += 1

        def add(code: str, _ev: Evidence = ev, _ctx: dict[str, Any] = ctx, **detail: Any) -> None:
            hits.add(code, _ev, **{**_ctx, **detail})

        if m := _TIMEOUT_RE.search(text):
            add("NCCL_TIMEOUT", seq=int(m.group(2)), op=m.group(3), timeout_ms=int(m.group(4)),
                ran_ms=int(m.group(5)), **({"rank": int(m.group(1))} if m.group(1) else {}))
        elif m := _IB_COMPLETION_RE.search(text):
            add("IB_COMPLETION_ERROR", peer=m.group(1), error=int(m.group(2)))
        elif _NVLS_RE.search(text):
            add("NCCL_NVLS")
        elif m := _NCCL_ERR_RE.search(text):
            add("NCCL_COMM_ERROR", kind=m.group(1))
        elif m := _OOM_RE.search(text):
            d: dict[str, Any] = {"requested_bytes": _bytes(m.group(1), m.group(2)), "gpu": int(m.group(3)),
                                 "total_bytes": _bytes(m.group(4), m.group(5)),
                                 "free_bytes": _bytes(m.group(6), m.group(7))}
            if a := _OOM_ALLOC_RE.search(text):
                d["allocated_bytes"] = _bytes(a.group(1), a.group(2))
                d["reserved_unallocated_bytes"] = _bytes(a.group(3), a.group(4))
            add("CUDA_OOM", **d)
        elif m := _OOM_OLD_RE.search(text):
            alloc, reserved = _bytes(m.group(6), m.group(7)), _bytes(m.group(10), m.group(11))
            add("CUDA_OOM", requested_bytes=_bytes(m.group(1), m.group(2)), gpu=int(m.group(3)),
                total_bytes=_bytes(m.group(4), m.group(5)), free_bytes=_bytes(m.group(8), m.group(9)),
                allocated_bytes=alloc, reserved_unallocated_bytes=max(reserved - alloc, 0.0))
        elif _OOM_ANY_RE.search(text) and "Tried to allocate" in text:
            bad += 1  # an OOM report whose figures do not parse
        elif _ECC_RE.search(text):
            add("CUDA_ECC")
        elif _DRIVER_RE.search(text):
            add("DRIVER_MISMATCH")
        elif m := _LINK_DOWN_RE.search(text):
            add("IB_LINK_DOWN_EVENT", port=m.group(1))
        elif _TEARDOWN_RE.search(text):
            add("DIST_TEARDOWN")
    return bad


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
        ranks = [str(r) for r in sorted({d["rank"] for d in details if d.get("rank") is not None})]
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
        ranks = sorted({x["rank"] for x in details if x.get("rank") is not None})
        who = f"{inc.rank_list(ranks)} (GPU {d['gpu']})" if ranks else f"GPU {d['gpu']}"
        parts = [f"{who}: tried to allocate {_gib(d['requested_bytes'])}",
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


_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def decode_log(raw: bytes) -> str | None:
    """Text of a log file: by its byte-order mark (UTF-8/16/32), else UTF-8 with undecodable bytes replaced;
    None for a binary file (NUL bytes without a BOM)."""
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            return raw.decode(enc, errors="replace")
    if b"\0" in raw[:BINARY_SNIFF_BYTES]:
        return None
    return raw.decode("utf-8", errors="replace")


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


def _metrics_findings(text: str, file: str) -> tuple[list[Finding], int, int, str | None]:
    """(findings, rows read, malformed rows, why the file cannot be read) of a metrics CSV. One line per
    record (:func:`~clustertwin.inputs.csv_rows`): a broken quote or a field over 128 KiB damages its row
    only; a header that does not parse makes the file unreadable (listed as skipped, never an exception)."""
    lines = text.splitlines()
    head = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if head is None:
        return [], 0, 0, None
    head_damage = RowDamage()
    header = next(csv_rows(lines[head:head + 1], damage=head_damage, start_line=head + 1), None)
    if header is None:
        return [], 0, 0, f"metrics CSV header unreadable: {head_damage.summary()}"
    cols = header[1]
    util_col = next((c for c in GPU_UTIL_COLUMNS if c in cols), None)
    io_col = next((c for c in IOWAIT_COLUMNS if c in cols), None)
    if util_col is None or io_col is None:
        return [], 0, 0, None
    iu, ii = cols.index(util_col), cols.index(io_col)
    damage = RowDamage()
    rows = malformed = 0
    stalled: list[Evidence] = []
    for i, row in csv_rows(lines[head + 1:], min_fields=max(iu, ii) + 1, damage=damage, start_line=head + 2):
        rows += 1
        try:
            util, iowait = float(row[iu]), float(row[ii])
        except ValueError:
            malformed += 1
            continue
        if not (math.isfinite(util) and math.isfinite(iowait)):
            malformed += 1
            continue
        if util < GPU_UTIL_LOW_PCT and iowait >= IOWAIT_HIGH_PCT:
            stalled.append(Evidence(file, i, ",".join(row)))
    rows += damage.total
    malformed += damage.total
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
    return out, rows, malformed, None


def diagnose(paths: Iterable[str | Path], job: JobContext | None = None) -> DiagnoseResult:
    """Read every file (directories recursively) and apply the rules; findings most severe first.
    ``job`` (model, cluster, layout) turns the CUDA OOM advice into the memory model's suggestions."""
    files = _files(paths)
    hits = _Hits()
    findings: list[Finding] = []
    files_read = lines_read = malformed = 0
    skipped: list[Evidence] = []
    for path in files:
        try:
            raw = path.read_bytes()
        except OSError as e:
            skipped.append(Evidence(str(path), None, f"not readable: {e.strerror or e}"))
            continue
        text = decode_log(raw)
        if text is None:
            skipped.append(Evidence(str(path), None, f"binary ({len(raw):,} bytes, NUL bytes and no text BOM)"))
            continue
        lines = text.splitlines()
        name = str(path)
        if path.suffix.lower() == ".csv":
            f, _, bad, unreadable = _metrics_findings(text, name)
            if unreadable is not None:  # a damaged header: the file is listed as not read
                skipped.append(Evidence(name, 1, unreadable))
                continue
        files_read += 1
        lines_read += len(lines)
        malformed += sum(1 for ln in lines if "\ufffd" in ln)
        if path.suffix.lower() == ".csv":
            findings += f
            malformed += bad
            continue
        malformed += _scan_lines(lines, name, hits, inc.job_of(path, lines), inc.file_rank(path))
        events, fell = parse_kernel_log(lines)
        findings += xid_findings(events, fell, name)
        malformed += count_malformed_xid(lines)
        bad_numbers = RowDamage()  # malformed numbers in ibstat/perfquery dumps: counted, left out
        if lines and lines[0].startswith("CA '"):
            findings += ibmod.ib_findings(ibmod.parse_ibstat(text, name, bad_numbers))
        elif any(ln.startswith("# Port counters") for ln in lines[:2]):
            port = ibmod.IbPort(path.stem, 1, "Active", "LinkUp", None, "InfiniBand",
                                ibmod.parse_perfquery(text, name, bad_numbers), source=name, line=1)
            findings += ibmod.ib_findings([port])
        malformed += bad_numbers.total
    actions: dict[str, str] = {}
    for code, evs in hits.lines.items():
        by_job: dict[str, tuple[list[Evidence], list[dict[str, Any]]]] = {}
        for ev, d in zip(evs, hits.details[code], strict=True):
            by_job.setdefault(d["job"], ([], []))[0].append(ev)
            by_job[d["job"]][1].append(d)
        for job_id, (j_evs, j_ds) in by_job.items():
            f = _finding_from_hits(code, j_evs, j_ds, job)
            subject = f.subject or (f"job {job_id}" if not job_id.startswith(inc.FILE_JOB_PREFIX) else None)
            findings.append(dataclasses.replace(f, subject=subject))
            actions.setdefault(code, f.action)
    findings = inc.chains(hits.details, hits.lines, actions) + findings  # a job's chain first within its severity
    if skipped:
        findings.append(Finding("warning", "BINARY_SKIPPED", f"{len(skipped)} file(s) not read (binary or "
                                "unreadable)", tuple(skipped[:MAX_EVIDENCE]), "convert them to text (zstd -d, "
                                "journalctl --file F -o short-iso) and rerun"))
    if malformed:
        findings.append(Finding("info", "MALFORMED_LINES", f"{malformed} malformed line(s) skipped "
                                "(undecodable bytes, unparsable Xid lines or non-numeric metric rows)", (),
                                "none; check for truncated or mixed-encoding logs if counts are high"))
    return DiagnoseResult(sort_findings(findings), files_read, lines_read, len(skipped))
