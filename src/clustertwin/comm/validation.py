"""``collective`` validation cases (format: validation/README.md of the shared data).

A case gives ``node`` (preset id or inline node spec), ``nodes`` and/or ``gpus``, ``op``, ``bytes``
(nccl-tests size S), optionally ``algorithm``/``protocol`` (forced as NCCL_ALGO/NCCL_PROTO),
``ranks_per_node``, ``network`` (else the cluster default: InfiniBand matching the NIC rate) and
``calibration`` (``{comm: {...}}``), ``gpus_per_process`` (nccl-tests ``-g``, default 1: one process
per GPU as with mpirun), ``cuda_graph`` (nccl-tests ``-G``, default false) and ``symmetric_memory``
(nccl-tests ``-R 2``, default false); a setting the case states only in its ``source``/``notes`` is read from
there (:mod:`clustertwin.comm.case_text`). Predicted keys: ``busbw_gb_per_s``, ``algbw_gb_per_s``,
``time_us``, plus the chosen ``algorithm`` and ``protocol``.
"""

from __future__ import annotations

from typing import Any

from clustertwin import specs
from clustertwin.comm.case_text import settings_from_text
from clustertwin.comm.model import collective
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.inputs import CASE_METADATA_KEYS
from clustertwin.units import parse_size

CASE_KEYS = CASE_METADATA_KEYS | frozenset({
    "node", "nodes", "gpus", "op", "bytes", "algorithm", "protocol", "ranks_per_node", "network", "cluster",
    "calibration", "gpus_per_process", "cuda_graph", "symmetric_memory", "nccl_version", "nvls"})


def _cluster(case: dict[str, Any]) -> specs.ClusterSpec:
    if "cluster" in case:
        return specs.load(specs.ClusterSpec, case["cluster"], kind="cluster")
    if "node" not in case:
        raise SpecError("a collective case needs 'node' (or 'cluster')", path=("node",))
    try:
        node = specs.load(specs.NodeSpec, case["node"], kind="node")
    except SpecError as e:
        raise e.with_context(prefix=("node",)) from None
    gpus = case.get("gpus")
    nodes = case.get("nodes")
    if nodes is None:
        if gpus is None:
            raise SpecError("a collective case needs 'nodes' or 'gpus'", path=("nodes",))
        nodes = -(-int(gpus) // node.gpus)
    data: dict[str, Any] = {"node": node.model_dump(exclude_none=True), "nodes": int(nodes)}
    if "network" in case:
        data["network"] = case["network"]
    return specs.build(specs.ClusterSpec, data)


def _flag(case: dict[str, Any], key: str, default: bool) -> bool:
    value = case.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"expected true or false (got {value!r})", path=(key,))
    return value


def evaluate(case: dict[str, Any]) -> dict[str, Any]:
    """Predict busbw, algbw and time of one measured collective case."""
    unknown = sorted(set(case) - CASE_KEYS)
    if unknown:
        raise SpecError(f"unknown key '{unknown[0]}'{did_you_mean(unknown[0], CASE_KEYS)}", path=(unknown[0],))
    for key in ("op", "bytes"):
        if key not in case:
            raise SpecError("required field missing", path=(key,))
    read = settings_from_text(case)
    case = {**read, **case}
    cluster = _cluster(case)
    gpus = int(case.get("gpus") or cluster.total_gpus)
    calibration = specs.build(specs.Calibration, case["calibration"], prefix=("calibration",)) \
        if "calibration" in case else None
    res = collective(cluster, str(case["op"]), float(parse_size(case["bytes"])), gpus,
                     ranks_per_node=case.get("ranks_per_node"), algorithm=case.get("algorithm"),
                     protocol=case.get("protocol"), calibration=calibration,
                     gpus_per_process=int(case.get("gpus_per_process", 1)),
                     cuda_graph=bool(case.get("cuda_graph", False)),
                     symmetric_memory=bool(case.get("symmetric_memory", False)),
                     nccl_version=None if case.get("nccl_version") is None else str(case["nccl_version"]),
                     nvls=_flag(case, "nvls", True))
    return {
        "busbw_gb_per_s": round(float(res.busbw_gb_per_s), 3),
        "algbw_gb_per_s": round(float(res.algbw_gb_per_s), 3),
        "time_us": round(float(res.time_s) * 1e6, 3),
        "algorithm": res.algorithm,
        "protocol": res.protocol,
        "bottleneck": res.breakdown.get("bottleneck"),
        "read_from_text": read,
    }
