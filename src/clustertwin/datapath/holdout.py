"""How well the MLPerf Storage predictor's global numbers carry to submitters it was not fitted on.

The predictor (:mod:`clustertwin.datapath.mlperf`) has nine global numbers (:class:`DlioFit`): the NIC and
storage-port efficiencies, the kernel clients' read ceiling ``C = a + g x cores`` (Lustre ``a`` and ``g``,
NFS ``g``), the parse cost per record of resnet50 and cosmoflow and the host cores per emulated
accelerator. :func:`fit` minimises the median |relative error| of ``accelerators_supported`` over a set of
``data_loading`` cases by coordinate descent (each number scaled by a few factors in turn, ``sweeps``
rounds); :func:`held_out_by_submitter` refits on all submitters but one, predicts that one's rows, and
pools the errors of every submitter so left out. The median of that pool estimates the error on rows of
submitters the model has not seen (docs/datapath.md).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from clustertwin.datapath.mlperf import (
    DLIO_CLIENT_CEILING_GB_PER_S,
    DLIO_CLIENT_GB_PER_S_PER_CORE,
    DLIO_CORES_PER_ACCELERATOR,
    DLIO_ETA_NET,
    DLIO_ETA_STORAGE_NET,
    DLIO_PARAMS,
    WORKLOADS,
    mlperf_storage,
)
from clustertwin.datapath.validation import CLIENT_KEYS, accelerator_of, storage_from_case
from clustertwin.errors import SpecError

FACTORS = (0.7, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.4)
"""Scale factors tried for each number in one coordinate-descent step."""


@dataclass(frozen=True)
class DlioFit:
    """The predictor's global numbers (defaults: the shipped fit)."""

    eta_net: float = DLIO_ETA_NET
    eta_storage_net: float = DLIO_ETA_STORAGE_NET
    lustre_gb_per_s: float = DLIO_CLIENT_CEILING_GB_PER_S["lustre"]
    lustre_gb_per_s_per_core: float = DLIO_CLIENT_GB_PER_S_PER_CORE["lustre"]
    nfs_gb_per_s_per_core: float = DLIO_CLIENT_GB_PER_S_PER_CORE["nfs"]
    resnet50_parse_core_s: float = WORKLOADS["resnet50"].parse_core_s
    cosmoflow_parse_core_s: float = WORKLOADS["cosmoflow"].parse_core_s
    cores_per_accelerator: float = DLIO_CORES_PER_ACCELERATOR

    def predict(self, case: dict, prepared: tuple | None = None) -> int:
        """``accelerators_supported`` of one ``data_loading`` case under these numbers."""
        acc, storage, kw = prepared if prepared is not None else _prepare(case)
        params = replace(DLIO_PARAMS, eta_net=self.eta_net, eta_storage_net=self.eta_storage_net,
                         client_ceiling_gb_per_s={"lustre": self.lustre_gb_per_s, "gpfs": self.lustre_gb_per_s},
                         client_gb_per_s_per_core={"lustre": self.lustre_gb_per_s_per_core,
                                                   "gpfs": self.lustre_gb_per_s_per_core,
                                                   "nfs": self.nfs_gb_per_s_per_core,
                                                   "object": self.nfs_gb_per_s_per_core})
        parse = {"resnet50": self.resnet50_parse_core_s, "cosmoflow": self.cosmoflow_parse_core_s}
        w = str(case["workload"])
        return mlperf_storage(w, acc, case["client_nodes"], storage, params=params,
                              min_accelerator_utilization=case.get("min_accelerator_utilization"),
                              cores_per_accelerator=self.cores_per_accelerator, parse_core_s=parse.get(w),
                              **kw).accelerators_supported


def _prepare(case: dict) -> tuple:
    client = case.get("client") or {}
    return (accelerator_of(case["gpu"]), storage_from_case(case["storage"]),
            {CLIENT_KEYS[k]: v for k, v in client.items()})


def submitter(case: dict) -> str:
    """The submitter of an MLPerf Storage row: ``<Division>/<Submitter>/`` in its ``source``."""
    m = re.search(r"(?:Closed|Open)/([^/]+)/", str(case.get("source", "")))
    if m is None:
        raise SpecError(f"case '{case.get('id')}': source names no <Division>/<Submitter>/ path", path=("source",))
    return m.group(1)


def errors(fit_: DlioFit, cases: list[dict], prepared: list[tuple] | None = None) -> list[float]:
    """|predicted / measured - 1| of ``accelerators_supported`` for every case."""
    prepared = prepared if prepared is not None else [_prepare(c) for c in cases]
    out = []
    for c, pre in zip(cases, prepared, strict=True):
        m = float(c["measured"]["accelerators_supported"])
        out.append(abs(fit_.predict(c, pre) - m) / m)
    return out


def fit(cases: list[dict], start: DlioFit | None = None, sweeps: int = 2) -> tuple[DlioFit, float]:
    """Coordinate descent of the median |error| from ``start`` (module docstring); (best fit, its median)."""
    prepared = [_prepare(c) for c in cases]
    best = start or DlioFit()
    score = statistics.median(errors(best, cases, prepared))
    names = [f.name for f in fields(DlioFit)]
    for _ in range(sweeps):
        for name in names:
            for f in FACTORS:
                trial = replace(best, **{name: getattr(best, name) * f})
                s = statistics.median(errors(trial, cases, prepared))
                if s < score - 1e-12:
                    best, score = trial, s
    return best, score


def held_out_by_submitter(cases: list[dict], start: DlioFit | None = None, sweeps: int = 2) -> dict[str, Any]:
    """Refit without each submitter, predict its rows; the pooled median and each submitter's median."""
    subs = sorted({submitter(c) for c in cases})
    pooled: list[float] = []
    per: dict[str, float] = {}
    for s in subs:
        train = [c for c in cases if submitter(c) != s]
        test = [c for c in cases if submitter(c) == s]
        f, _ = fit(train, start, sweeps)
        e = errors(f, test)
        per[s] = statistics.median(e)
        pooled += e
    return {"median": statistics.median(pooled), "rows": len(pooled), "by_submitter": per,
            "start": asdict(start or DlioFit())}
