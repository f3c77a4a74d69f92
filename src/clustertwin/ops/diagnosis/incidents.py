"""Findings of one job in causal order (``diagnose``): which rank failed first and which ranks then followed.

A job's log lines carry the rank that printed them (torchrun's ``[rank7]:`` / ``[default7]:`` prefixes, NCCL's
``[Rank 7]``, or ``rank7`` in a per-rank file name) and usually a time stamp (glog ``E1218 20:27:21.43``, ISO
``2024-12-18T20:27:21``, syslog ``Dec 18 20:27:21``). The job comes from the file path (``slurm-5150.out``,
``job-4242/``) or a ``SLURM_JOB_ID=`` line, else the file alone (unrelated logs in one directory are not
chained). Within a job the steps (one per rule and
the ranks that hit it) are ordered by their first time stamp; without time stamps, by the rule's place in the
failure chain (hardware and memory faults cause communicator errors, which cause collective timeouts, which
cause teardown messages), then by line order. A known job with two or more failure steps besides teardown gets
a ``JOB_FAILURE_CHAIN`` finding naming the first failure as the cause to fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustertwin.ops.findings import Evidence, Finding, Severity

_RANK_RE = re.compile(r"^\[(?:rank|default)(\d{1,7})\]:|\[Rank (\d{1,7})\]")
_FILE_RANK_RE = re.compile(r"rank[-_]?(\d{1,7})", re.IGNORECASE)
_JOB_PATH_RE = re.compile(r"(?:slurm|job)[-_.]?(\d{1,12})", re.IGNORECASE)
_JOB_LINE_RE = re.compile(r"SLURM_JOB_ID[=: ]+(\d{1,12})|clustertwin: job (\d{1,12}) on")
_GLOG_TS = re.compile(r"\b[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2}(?:\.\d+)?)")
_ISO_TS = re.compile(r"\b\d{4}-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2}(?:\.\d+)?)")
_SYSLOG_TS = re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                       "Dec"), 1)}

CHAIN_ORDER = ("CUDA_ECC", "CUDA_OOM", "DRIVER_MISMATCH", "NCCL_NVLS", "IB_LINK_DOWN_EVENT", "IB_COMPLETION_ERROR",
               "NCCL_COMM_ERROR", "NCCL_TIMEOUT", "DIST_TEARDOWN")
"""Rule codes from likely cause to likely consequence (used when lines carry no time stamps)."""
LABEL = {"CUDA_ECC": "uncorrectable ECC error", "CUDA_OOM": "CUDA out of memory", "DRIVER_MISMATCH":
         "driver mismatch", "NCCL_NVLS": "NVLS setup failure", "IB_LINK_DOWN_EVENT": "network link down",
         "IB_COMPLETION_ERROR": "InfiniBand completion error", "NCCL_COMM_ERROR": "NCCL communicator error",
         "NCCL_TIMEOUT": "NCCL collective timeout", "DIST_TEARDOWN": "teardown"}
SEVERITY: dict[str, Severity] = {"CUDA_ECC": "critical"}
_RANKS: list[Severity] = ["critical", "error", "warning", "info"]


def rank_of(text: str) -> int | None:
    m = _RANK_RE.search(text)
    if not m:
        return None
    return int(m.group(1) or m.group(2))


def file_rank(path: Path) -> int | None:
    """The rank a per-rank log file is named after (``oom-rank0.log``, ``rank_7.out``)."""
    m = _FILE_RANK_RE.search(path.name)
    return int(m.group(1)) if m else None


def time_of(text: str) -> float | None:
    """Seconds since the start of the year (months of 31 days; only the order matters), or None."""
    if m := _GLOG_TS.search(text) or _ISO_TS.search(text):
        mon, day = int(m.group(1)), int(m.group(2))
    elif m := _SYSLOG_TS.search(text):
        mon, day = _MONTHS[m.group(1)], int(m.group(2))
    else:
        return None
    return ((mon * 31 + day) * 24 + int(m.group(3))) * 3600.0 + int(m.group(4)) * 60.0 + float(m.group(5))


FILE_JOB_PREFIX = "file:"
"""Job key of a file whose job is unknown (the file alone)."""


def job_of(path: Path, lines: list[str]) -> str:
    """The job a file belongs to: a job id in its path or its first lines, else ``file:<path>``."""
    for part in (path.name, *(p.name for p in path.parents)):
        if m := _JOB_PATH_RE.search(part):
            return m.group(1)
    for ln in lines[:50]:
        if m := _JOB_LINE_RE.search(ln):
            return m.group(1) or m.group(2)
    return FILE_JOB_PREFIX + str(path)


def rank_list(ranks: list[int]) -> str:
    """``[7]`` -> ``rank 7``; ``[12, 13]`` -> ``ranks 12,13``."""
    if not ranks:
        return "unknown rank"
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ",".join(map(str, ranks))


@dataclass
class Step:
    code: str
    ranks: list[int]
    first_time: float | None
    first_order: int
    evidence: Evidence


def chains(details: dict[str, list[dict[str, Any]]], evidence: dict[str, list[Evidence]],
           actions: dict[str, str]) -> list[Finding]:
    """One ``JOB_FAILURE_CHAIN`` finding per job with two or more failure steps (module docstring)."""
    per_job: dict[str, dict[str, list[tuple[dict[str, Any], Evidence]]]] = {}
    for code, ds in details.items():
        if code not in LABEL:
            continue
        for d, ev in zip(ds, evidence[code], strict=True):
            per_job.setdefault(d["job"], {}).setdefault(code, []).append((d, ev))
    out = []
    for job, codes in sorted(per_job.items()):
        steps = []
        for code, items in codes.items():
            times = [d["time"] for d, _ in items if d["time"] is not None]
            first = min(items, key=lambda it: (it[0]["time"] is None, it[0]["time"] or 0.0, it[0]["order"]))
            steps.append(Step(code, sorted({d["rank"] for d, _ in items if d["rank"] is not None}),
                              min(times) if times else None, min(d["order"] for d, _ in items), first[1]))
        if job.startswith(FILE_JOB_PREFIX) or sum(s.code != "DIST_TEARDOWN" for s in steps) < 2:
            continue  # no known job, or nothing but one failure and its teardown
        timed = all(s.first_time is not None for s in steps)
        steps.sort(key=lambda s: ((s.first_time or 0.0) if timed else 0.0, CHAIN_ORDER.index(s.code), s.first_order))
        root = steps[0]
        parts = [f"{LABEL[s.code]} on {rank_list(s.ranks)}" if s.ranks else LABEL[s.code] for s in steps]
        name = job.removeprefix(FILE_JOB_PREFIX)
        title = f"{'job ' + name if name == job else name}: {parts[0]} first, then " + ", then ".join(parts[1:])
        sev = min((SEVERITY.get(s.code, "error") for s in steps if s.code != "DIST_TEARDOWN"),
                  key=_RANKS.index, default="error")
        action = (f"fix the first failure ({parts[0]}): "
                  f"{actions.get(root.code, 'see its finding')}; the later steps are its consequences")
        out.append(Finding(sev, "JOB_FAILURE_CHAIN", title, tuple(s.evidence for s in steps), action,
                           f"job {name}" if name == job else None))
    return out
