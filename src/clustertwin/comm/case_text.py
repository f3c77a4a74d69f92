"""Run settings a ``collective`` case states only in words: read from its ``source`` and ``notes`` when the
case leaves the field out (a field the case gives always wins).

Published nccl-tests / rccl-tests results quote the command line and the kernels in prose; the twin needs
them as fields. The rules, each a convention of the tools named, never of one case:

* ``gpus_per_process``: the nccl-tests flag ``-g N``; the Azure AI-benchmarking-guide's NCCL/RCCL tables
  (a source naming ``ai-benchmarking-guide``) come from one process driving every GPU of the VM, so the
  case's GPU count;
* ``cuda_graph``: the flag ``-G N`` with N >= 1 (nccl-tests launches from CUDA/HIP graphs);
* ``symmetric_memory``: the flag ``-R 2`` (NCCL 2.27's symmetric-memory registration);
* ``algorithm``: DeepEP's kernels by name (``DeepEP`` with ``low-latency`` -> ``deepep_ll``, with
  ``normal`` / ``high-throughput`` -> ``deepep``), else ``NCCL_ALGO=X`` / ``RCCL_ALGO=X`` naming one
  algorithm (a list such as ``Ring,Tree`` only allows, it does not force); ``protocol``: ``NCCL_PROTO=X``.

``validate`` lists what it read under ``predicted.read_from_text``.
"""

from __future__ import annotations

import re
from typing import Any

_FLAG_G = re.compile(r"(?<![\w-])-g\s*(\d+)\b")
_FLAG_BIG_G = re.compile(r"(?<![\w-])-G\s*([1-9]\d*)\b")
_FLAG_R = re.compile(r"(?<![\w-])-R\s*2\b")
_ALGO = re.compile(r"\b[NR]CCL_ALGO=([A-Za-z]+)(?![,\w])")
_PROTO = re.compile(r"\b[NR]CCL_PROTO=([A-Za-z0-9]+)(?![,\w])")
#: NCCL_PROTO spellings -> the twin's protocol names
_PROTOCOLS = {"simple": "Simple", "ll": "LL", "ll128": "LL128"}


def settings_from_text(case: dict[str, Any]) -> dict[str, Any]:
    """The fields the case's text states and the case leaves out (module docstring)."""
    source, notes = str(case.get("source") or ""), str(case.get("notes") or "")
    text = f"{source}\n{notes}"
    out: dict[str, Any] = {}
    if (m := _FLAG_G.search(text)) and int(m.group(1)) >= 1:
        out["gpus_per_process"] = int(m.group(1))
    elif "ai-benchmarking-guide" in source.lower() and case.get("gpus"):
        out["gpus_per_process"] = int(case["gpus"])
    if _FLAG_BIG_G.search(text):
        out["cuda_graph"] = True
    if _FLAG_R.search(text):
        out["symmetric_memory"] = True
    lower = text.lower()
    if "deepep" in lower and "low-latency" in lower:
        out["algorithm"] = "deepep_ll"
    elif "deepep" in lower and ("normal" in lower or "high-throughput" in lower):
        out["algorithm"] = "deepep"
    elif m := _ALGO.search(text):
        out["algorithm"] = m.group(1).lower()
    if (m := _PROTO.search(text)) and m.group(1).lower() in _PROTOCOLS:
        out["protocol"] = _PROTOCOLS[m.group(1).lower()]
    return {k: v for k, v in out.items() if k not in case}
