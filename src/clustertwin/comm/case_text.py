"""Run settings a ``collective`` case states only in words: read from its ``source`` and ``notes`` when the
case leaves the field out (a field the case gives always wins).

Published nccl-tests / rccl-tests results quote the command line and the kernels in prose; the twin needs
them as fields. The rules, each a convention of the tools named, never of one case:

* ``gpus_per_process``: the nccl-tests flag ``-g N``; the Azure AI-benchmarking-guide's NCCL/RCCL tables
  (a source naming ``ai-benchmarking-guide``) come from one process driving every GPU of the VM, so the
  case's GPU count on one node;
* ``cuda_graph``: the flag ``-G N`` with N >= 1 (nccl-tests launches from CUDA/HIP graphs);
* ``symmetric_memory``: the flag ``-R 2`` (NCCL 2.27's symmetric-memory registration);
* ``algorithm``: DeepEP's kernels by name (``DeepEP`` with ``low-latency`` -> ``deepep_ll``, with
  ``normal`` / ``high-throughput`` -> ``deepep``), else ``NCCL_ALGO=X`` / ``RCCL_ALGO=X`` naming one
  algorithm (a list such as ``Ring,Tree`` only allows, it does not force); ``protocol``: ``NCCL_PROTO=X``;
* ``network``: NICs the text names by transport (``TCPXO``: the ``gcp-tcpxo`` fabric of the catalog);
* ``calibration``: ``NCCL_BUFFSIZE=B`` sets the chunk (``chunk_bytes`` = B / NCCL_STEPS 8);
* a platform's documented NCCL profile where the text names the machine type (:data:`PLATFORM_PROFILES`:
  GCP's ``nccl-env-profile.sh`` for ``a3-megagpu-8g``: Simple protocol, 8 MiB buffers, NVLS off).

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
_BUFFSIZE = re.compile(r"\bNCCL_BUFFSIZE=(\d+)\b")
#: NCCL_PROTO spellings -> the twin's protocol names
_PROTOCOLS = {"simple": "Simple", "ll": "LL", "ll128": "LL128"}
#: NCCL's pipeline steps per buffer (NCCL_STEPS): a chunk is the buffer / 8
NCCL_STEPS = 8
#: transport named in a case's text -> catalog fabric
TRANSPORT_FABRICS = {"tcpxo": "gcp-tcpxo"}
PLATFORM_PROFILES: dict[str, dict[str, Any]] = {
    "a3-megagpu": {"protocol": "Simple", "buffsize": 8388608, "nvls": False,
                   "tuner": {("all_reduce", 2): "tree"}},
}
"""Machine type named in a case's text -> the NCCL settings its platform's documented profile sets (GCP's
``nccl-env-profile.sh`` for A3 Mega, the HOST_VARS its NCCL jobs source: NCCL_PROTO=Simple,
NCCL_BUFFSIZE=8388608, NCCL_NVLS_ENABLE=0) and the algorithm its tuner plugin picks per (op, nodes) (the
a3plus tuner config runs a 2-node x 8-rank all-reduce as Tree at every size; other shapes are left to NCCL)."""


def _nodes(case: dict[str, Any]) -> int | None:
    """The case's node count when it states one."""
    try:
        return int(case["nodes"]) if case.get("nodes") is not None else None
    except (TypeError, ValueError):
        return None


def settings_from_text(case: dict[str, Any]) -> dict[str, Any]:
    """The fields the case's text states and the case leaves out (module docstring)."""
    source, notes = str(case.get("source") or ""), str(case.get("notes") or "")
    text = f"{source}\n{notes}"
    out: dict[str, Any] = {}
    if (m := _FLAG_G.search(text)) and int(m.group(1)) >= 1:
        out["gpus_per_process"] = int(m.group(1))
    elif "ai-benchmarking-guide" in source.lower() and case.get("gpus") and (_nodes(case) or 1) == 1:
        out["gpus_per_process"] = int(case["gpus"])  # one process drives the VM's GPUs (never two hosts)
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
    buffsize = int(m.group(1)) if (m := _BUFFSIZE.search(text)) else None
    for machine, profile in PLATFORM_PROFILES.items():
        if machine in lower:
            out.setdefault("protocol", profile["protocol"])
            out.setdefault("nvls", profile["nvls"])
            buffsize = buffsize or profile["buffsize"]
            algo = profile["tuner"].get((str(case.get("op")), _nodes(case)))
            if algo:
                out.setdefault("algorithm", algo)
    if buffsize:
        out["calibration"] = {"comm": {"chunk_bytes": buffsize / NCCL_STEPS}}
    fabric = next((f for key, f in TRANSPORT_FABRICS.items() if key in lower), None)
    if fabric:
        out["network"] = {"fabric": fabric}
    return {k: v for k, v in out.items() if k not in case}
