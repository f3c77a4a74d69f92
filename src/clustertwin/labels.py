"""Human labels for the snake_case keys that models return (breakdown terms, metrics), shared by the CLI tables
and the HTML report, so neither shows a raw key such as ``zero3_gather`` or ``avg_queue_s``.

A key is split at ``_``; known abbreviations are written as engineers write them (TP, MFU, ZeRO-3, KV, GiB) and a
trailing unit becomes ``, unit`` (``avg_queue_s`` -> ``avg queue, s``). A label map entry overrides the rule.
"""

from __future__ import annotations

WORDS: dict[str, str] = {
    "tp": "TP", "pp": "PP", "dp": "DP", "cp": "CP", "ep": "EP", "etp": "ETP", "edp": "expert-DP", "sp": "SP",
    "mfu": "MFU", "hfu": "HFU", "gpu": "GPU", "gpus": "GPUs", "cpu": "CPU", "hbm": "HBM", "kv": "KV", "nvme": "NVMe",
    "p2p": "P2P", "jct": "JCT", "ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL", "slo": "SLO",
    "zero": "ZeRO", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3", "moe": "MoE", "a2a": "all-to-all",
    "fp8": "FP8", "bf16": "BF16", "fp16": "FP16", "fp32": "FP32", "nic": "NIC", "pcie": "PCIe", "usd": "USD",
    "avg": "average", "p50": "p50", "p90": "p90", "p99": "p99", "io": "I/O",
}
"""Word -> how it is written in a label."""

UNITS: dict[str, str] = {
    "s": "s", "ms": "ms", "us": "µs", "h": "h", "gib": "GiB", "gb": "GB", "tb": "TB", "bytes": "bytes",
    "gbps": "GB/s", "tflops": "TFLOP/s", "pflops": "PFLOP/s", "kw": "kW", "mwh": "MWh", "usd": "USD",
}
"""Trailing unit word -> unit as printed after a comma."""

LABELS: dict[str, str] = {
    "gpu_utilization": "GPU utilisation (allocated)",
    "bounded_slowdown": "bounded slowdown",
    "fragmented_gpus": "fragmented GPUs",
}
"""Whole-key overrides where the rule would read badly."""


def term_label(key: str) -> str:
    """The human label of ``key``: ``"zero3_gather" -> "ZeRO-3 gather"``, ``"avg_queue_s" -> "average queue, s"``."""
    if key in LABELS:
        return LABELS[key]
    words = [w for w in key.split("_") if w]
    unit = ""
    if len(words) > 1 and words[-1].lower() in UNITS:
        unit = UNITS[words.pop().lower()]
    text = " ".join(WORDS.get(w.lower(), w) for w in words)
    return f"{text}, {unit}" if unit else text
