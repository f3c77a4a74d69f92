"""``node check --inventory DIR``: the ``node check --json`` reports of many nodes side by side. Versions that
differ across nodes of one cluster (driver, CUDA, PyTorch, NCCL, kernel, GPU model) are flagged as skew, and
every node's stack is checked against the compatibility matrix (:func:`compat.stack_findings`).

NCCL and PyTorch must match on every rank of a job (mismatched NCCL protocol versions hang or fail at init),
so their skew is an error; the others are warnings (they change performance or failure behaviour, not
correctness, but make a fleet hard to reason about)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.ops.findings import Evidence, Finding, sort_findings
from clustertwin.ops.health.compat import accelerator_findings, stack_findings
from clustertwin.ops.health.gpu import catalog_gpu_id

SKEW_SEVERITY = {"nccl": "error", "torch": "error", "driver": "warning", "cuda_runtime": "warning",
                 "kernel": "warning", "gpu_model": "warning", "gpu_count": "warning", "rocm": "error",
                 "cann": "error"}
"""Severity of a version that differs across nodes (module docstring)."""


@dataclass
class NodeFacts:
    """What the inventory compares of one node."""

    name: str
    file: str
    values: dict[str, str | None]
    gpu_ids: list[str | None]


@dataclass
class Inventory:
    nodes: list[NodeFacts]
    unreadable: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def _text(doc: dict[str, Any], key: str, where: str) -> str | None:
    """``doc[key]`` as a string (None when absent or null); any other type is a ValueError naming the field,
    so the file is listed as unreadable instead of a number reaching the version comparisons."""
    v = doc.get(key)
    if v is None or isinstance(v, str):
        return v
    raise ValueError(f"{where}{key}: expected a string, got {type(v).__name__} {str(v)[:40]}")


def _section(doc: dict[str, Any], key: str, kind: type) -> Any:
    v = doc.get(key) or kind()
    if not isinstance(v, kind):
        raise ValueError(f"{key}: expected {'a mapping' if kind is dict else 'a list'}, got {type(v).__name__}")
    return v


def node_facts(doc: dict[str, Any], file: str) -> NodeFacts:
    """Facts of one ``node check --json`` document (a live report: ``host`` present). A field of the wrong
    type (``catalog_id: 5``, ``gpus: 3``) is a ValueError naming it (the caller lists the file as unreadable)."""
    host = _section(doc, "host", dict)
    gpus = _section(doc, "gpus", list)
    for i, g in enumerate(gpus):
        if not isinstance(g, dict):
            raise ValueError(f"gpus[{i}]: expected a mapping, got {type(g).__name__}")
    gpu_names = [_text(g, "name", f"gpus[{i}].") for i, g in enumerate(gpus)]
    catalog = [_text(g, "catalog_id", f"gpus[{i}].") for i, g in enumerate(gpus)]
    names = sorted({str(n) for n in gpu_names})
    values = {
        "driver": _text(doc, "driver_version", ""), "cuda_runtime": _text(host, "torch_cuda_version", "host."),
        "torch": _text(host, "torch_version", "host."), "nccl": _text(host, "nccl_version", "host."),
        "kernel": _text(host, "kernel", "host."),
        "gpu_model": ", ".join(names) if names else None, "gpu_count": str(len(gpus)) if gpus else None,
        "rocm": _text(host, "rocm_version", "host."), "cann": _text(host, "cann_version", "host."),
    }
    return NodeFacts(_text(host, "hostname", "host.") or Path(file).stem, file, values,
                     [c or catalog_gpu_id(n or "") for c, n in zip(catalog, gpu_names, strict=True)])


def _no_constant(name: str) -> Any:
    """JSON ``NaN`` / ``Infinity``: not JSON (Python's reader accepts them); the file is unreadable."""
    raise ValueError(f"{name} is not a JSON number")


def read_inventory(directory: Path) -> Inventory:
    """Every ``*.json`` under ``directory``; files that do not parse are listed, never dropped silently."""
    if not directory.is_dir():
        raise SpecError(f"--inventory: {directory} is not a directory")
    inv = Inventory([])
    for path in sorted(directory.glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
            if not isinstance(doc, dict) or "gpus" not in doc:
                raise ValueError("not a 'node check --json' report (no 'gpus')")
            inv.nodes.append(node_facts(doc, path.name))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
            inv.unreadable.append(f"{path.name}: {str(e).splitlines()[0][:200]}")
    if not inv.nodes:
        raise SpecError(f"--inventory: no readable 'node check --json' files in {directory} "
                        f"({len(inv.unreadable)} unreadable)")
    inv.findings = sort_findings(skew_findings(inv.nodes) + _stack(inv.nodes) + _unreadable(inv))
    return inv


def skew_findings(nodes: list[NodeFacts]) -> list[Finding]:
    """One finding per fact with more than one value across the nodes; the evidence lists who has which."""
    out = []
    for key, severity in SKEW_SEVERITY.items():
        groups: dict[str, list[str]] = defaultdict(list)
        for n in nodes:
            if n.values.get(key) is not None:
                groups[str(n.values[key])].append(n.name)
        if len(groups) < 2:
            continue
        ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        ev = tuple(Evidence(key, None, f"{v}: {len(hosts)} node(s) ({', '.join(hosts[:5])}"
                            f"{', ...' if len(hosts) > 5 else ''})") for v, hosts in ranked)
        majority = ranked[0][0]
        out.append(Finding(severity, f"SKEW_{key.upper()}", f"{key.replace('_', ' ')} differs across nodes: "
                           f"{len(groups)} versions ({', '.join(v for v, _ in ranked)})", ev,
                           f"bring the {sum(len(h) for _, h in ranked[1:])} other node(s) to the majority's {majority} "
                           "(or drain them from multi-node jobs) before scheduling across them"))
    return out


def _stack(nodes: list[NodeFacts]) -> list[Finding]:
    out = []
    for n in nodes:
        found = stack_findings(n.values["driver"], n.values["torch"], n.values["cuda_runtime"], n.gpu_ids,
                               n.values["nccl"], source=n.file)
        found += accelerator_findings(n.gpu_ids, n.values["rocm"], n.values["cann"], source=n.file)
        for f in found:
            out.append(Finding(f.severity, f.code, f"{n.name}: {f.title}", f.evidence, f.action, n.name))
    return out


def _unreadable(inv: Inventory) -> list[Finding]:
    if not inv.unreadable:
        return []
    return [Finding("warning", "INVENTORY_UNREADABLE", f"{len(inv.unreadable)} inventory file(s) not read",
                    tuple(Evidence(u.split(":", 1)[0], None, u.split(":", 1)[1].strip()) for u in inv.unreadable),
                    "re-collect them with 'clustertwin node check --json > NODE.json'")]
