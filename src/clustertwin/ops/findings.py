"""Findings: what ``node check`` and ``diagnose`` report. Each finding has a severity, a stable code, a
title, the evidence it rests on (file, line, text) and the action an operator should take."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["critical", "error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "error", "warning", "info")
"""Most severe first: critical = node/GPU unusable (drain), error = job-failing fault, warning = degraded or
at risk, info = context."""
SEVERITY_RANK: dict[str, int] = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Evidence:
    """One line that supports a finding: where it was read and what it said."""

    file: str
    """File (or command/source name, e.g. ``nvml``, ``nvidia-smi -q``) the evidence came from."""
    line: int | None
    """1-based line number in ``file``; None for values read from an API."""
    text: str
    """The line or value, stripped."""


@dataclass(frozen=True)
class Finding:
    """A diagnosis: severity, stable code, title, evidence and action."""

    severity: Severity
    code: str
    """Stable identifier, e.g. ``XID_79``, ``NCCL_TIMEOUT``, ``PCIE_DEGRADED``."""
    title: str
    evidence: tuple[Evidence, ...] = ()
    action: str = ""
    subject: str | None = None
    """What the finding is about (``GPU 3``, ``mlx5_0/1``); None for host-wide findings."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{severity, code, title, evidence: [{file, line, text}], action}`` (+ subject if set)."""
        d: dict[str, Any] = {"severity": self.severity, "code": self.code, "title": self.title,
                             "evidence": [asdict(e) for e in self.evidence], "action": self.action}
        if self.subject is not None:
            d["subject"] = self.subject
        return d


@dataclass
class FindingList:
    """Findings collected in order; ``sorted()`` gives most severe first (stable within a severity)."""

    items: list[Finding] = field(default_factory=list)

    def add(self, severity: Severity, code: str, title: str, action: str = "",
            evidence: list[Evidence] | tuple[Evidence, ...] = (), subject: str | None = None) -> Finding:
        f = Finding(severity, code, title, tuple(evidence), action, subject)
        self.items.append(f)
        return f

    def extend(self, findings: list[Finding] | tuple[Finding, ...]) -> None:
        self.items.extend(findings)

    def sorted(self) -> list[Finding]:
        return sort_findings(self.items)


def sort_findings(findings: list[Finding] | tuple[Finding, ...]) -> list[Finding]:
    """Most severe first; the original order is kept within one severity."""
    return sorted(findings, key=lambda f: SEVERITY_RANK[f.severity])


def worst(findings: list[Finding] | tuple[Finding, ...]) -> Severity | None:
    """The most severe severity present, or None for no findings."""
    return min((f.severity for f in findings), key=SEVERITY_RANK.__getitem__, default=None)
