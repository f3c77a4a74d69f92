"""The twin's prediction for a generated job's header (``train.estimate`` of the layout the framework runs),
and the layout ``--from-search`` picks among the ZeRO stages the framework has."""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.errors import SpecError
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.parallelism import ParallelismSpec
from clustertwin.units import DAY_S, HOUR_S

CHINCHILLA_TOKENS_PER_PARAM = 20
"""Compute-optimal training tokens per parameter (Hoffmann et al. 2022), the default token budget of the
time-to-train line when none is given."""


def human_count(n: float) -> str:
    """``1.41e12 -> '1.41T'`` (decimal K, M, B, T)."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.3g}"



@dataclass(frozen=True)
class Prediction:
    """The twin's prediction for the header comment (from ``train.estimate``)."""

    step_time_s: float
    mfu: float
    tokens_per_s: float
    memory_gib_per_gpu: float
    memory_capacity_gib: float
    fits: bool
    tokens: float
    days: float
    gpu_hours: float
    source: str
    """Where the layout came from: 'given layout' or 'train search: best of N fitting layouts'."""
    parallelism: ParallelismSpec | None = None
    """The layout predicted (the job must run exactly this one)."""

    def lines(self) -> list[str]:
        """Header lines, plain text."""
        fit = "fits" if self.fits else "DOES NOT FIT"
        hours = self.days * DAY_S / HOUR_S
        return [
            f"predicted by the twin ({self.source}):",
            f"  step time {self.step_time_s:.3f} s, MFU {self.mfu * 100:.1f}%, {self.tokens_per_s:,.0f} tokens/s",
            f"  memory {self.memory_gib_per_gpu:.1f} GiB per GPU of {self.memory_capacity_gib:.1f} GiB ({fit})",
            f"  time to train {human_count(self.tokens)} tokens: {self.days:.1f} days ({hours:,.0f} h), "
            f"{self.gpu_hours:,.0f} GPU-hours",
        ]


def predict(model: ModelSpec, cluster: ClusterSpec, parallelism: ParallelismSpec, tokens: float | None = None,
            source: str = "given layout") -> Prediction:
    """Step time, memory and time-to-train of ``parallelism`` from the training model."""
    from clustertwin.train.estimate import estimate
    from clustertwin.train.flops import param_count
    from clustertwin.train.scale import time_to_train

    est = estimate(model, cluster, parallelism)
    budget = tokens if tokens is not None else CHINCHILLA_TOKENS_PER_PARAM * param_count(model)
    ttt = time_to_train(est, budget, cluster)
    return Prediction(step_time_s=est.step_time_s, mfu=est.mfu, tokens_per_s=est.tokens_per_s,
                      memory_gib_per_gpu=est.memory.total_gib, memory_capacity_gib=est.memory.capacity_gib,
                      fits=est.fits, tokens=budget, days=ttt.days, gpu_hours=ttt.gpu_hours, source=source,
                      parallelism=parallelism)


def layout_from_search(model: ModelSpec, cluster: ClusterSpec, *, global_batch: int, gpus: int | None = None,
                       precision: str = "bf16", fixed: dict | None = None, flags: str = "none",
                       software_stack: str = "auto") -> tuple[ParallelismSpec, str]:
    """The fastest fitting layout of ``train search`` among the ZeRO stages the framework ``flags`` has (one
    search per stage when the caller leaves ``zero`` open) on ``software_stack``, as a ParallelismSpec and a
    line saying so."""
    from clustertwin.deploy.layout_flags import FRAMEWORK_NAME, ZERO_STAGES
    from clustertwin.train.search import search

    fixed = dict(fixed or {})
    stages = ZERO_STAGES.get(flags)
    if "zero" in fixed or stages is None:
        runs = [fixed]
    else:
        runs = [{**fixed, "zero": z} for z in sorted(set(stages.values()))]
    results = [search(model, cluster, global_batch=global_batch, gpus=gpus, precision=precision, fixed=f, top=1,
                      software_stack=software_stack) for f in runs]
    found = [r for r in results if r.best is not None]
    if not found:
        res = results[0]
        reasons = "; ".join(f"{k}: {v}" for k, v in sorted(res.rejected.items(), key=lambda kv: -kv[1])[:3])
        raise SpecError(f"train search found no layout of {res.gpus} GPUs that fits ({reasons or 'none valid'})")
    res = min(found, key=lambda r: r.best.step_time_s)  # type: ignore[union-attr]
    lay = dict(res.best.layout)  # type: ignore[union-attr]
    par = ParallelismSpec(**lay, global_batch=global_batch, precision=precision,  # type: ignore[arg-type]
                          software_stack=software_stack)
    fitting = sum(r.fitting for r in results)
    where = "" if len(runs) == 1 else f" with the ZeRO stages {FRAMEWORK_NAME.get(flags, flags)} has"
    return par, f"train search: best of {fitting} fitting layouts{where}"
