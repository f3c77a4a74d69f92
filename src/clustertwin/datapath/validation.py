"""``data_loading`` validation cases (MLPerf Storage v1.0 rows): the case -> :func:`mlperf_storage`.

Case fields (validation/README.md): ``workload``, ``gpu`` (a100/h100, or a catalog GPU id containing
one of them), ``client_nodes``, ``storage`` (``{appliance: catalog id, count, ...overrides}`` or a
storage spec with ``read_gb_per_s``), ``min_accelerator_utilization``; optional ``client`` (``cores``,
``nics``, ``nic_gbit_per_s`` of one benchmark host; defaults: :func:`mlperf_storage`).
"""

from __future__ import annotations

from typing import Any

from clustertwin.catalog import store
from clustertwin.datapath.mlperf import mlperf_storage
from clustertwin.errors import SpecError
from clustertwin.specs import StorageSpec
from clustertwin.specs.loading import build

CLIENT_KEYS = {"cores": "client_cores", "nics": "client_nics", "nic_gbit_per_s": "client_nic_gbit_per_s"}


def storage_from_case(raw: Any) -> StorageSpec:
    """``{appliance: id, count: N, ...}`` -> the catalog appliance scaled to N; else a storage spec."""
    if not isinstance(raw, dict):
        raise SpecError("storage must be {appliance, count} or {read_gb_per_s, ...}", path=("storage",))
    data = dict(raw)
    if "appliance" in data:
        data["preset"] = data.pop("appliance")
        data["appliances"] = data.pop("count", 1)
    if "preset" in data:
        merged = store.raw("storage", str(data.pop("preset")))
        merged.update(data)
        data = merged
    return build(StorageSpec, data, prefix=("storage",))


def accelerator_of(gpu: Any) -> str:
    g = str(gpu).lower()
    for name in ("h100", "a100"):
        if name in g:
            return name
    raise SpecError(f"gpu must be an A100 or H100 (MLPerf Storage v1.0 emulates only those), got '{gpu}'",
                    path=("gpu",))


def evaluate(case: dict) -> dict[str, Any]:
    """Predicted ``accelerators_supported`` and ``throughput_gb_per_s`` (plus the path's breakdown)."""
    for key in ("workload", "gpu", "client_nodes", "storage"):
        if key not in case:
            raise SpecError(f"data_loading case needs '{key}'", path=(key,))
    client = case.get("client") or {}
    if not isinstance(client, dict) or set(client) - set(CLIENT_KEYS):
        raise SpecError(f"client takes {', '.join(CLIENT_KEYS)}", path=("client",))
    kw = {CLIENT_KEYS[k]: v for k, v in client.items()}
    nodes = case["client_nodes"]
    if not isinstance(nodes, int) or nodes < 1:
        raise SpecError(f"client_nodes must be a positive integer (got {nodes!r})", path=("client_nodes",))
    pred = mlperf_storage(str(case["workload"]), accelerator_of(case["gpu"]), nodes, storage_from_case(case["storage"]),
                          min_accelerator_utilization=case.get("min_accelerator_utilization"), **kw)
    return pred.to_dict()
