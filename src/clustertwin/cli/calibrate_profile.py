"""``clustertwin calibrate --profile TRACE...``: the training model's efficiency terms fitted to your own
profiler traces (:mod:`clustertwin.profile.fit`), written as a calibration that ``train estimate/search/scale
--calibration`` take."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from clustertwin.cli.common import console, print_json, table


def calibrate_from_profile(traces: list[Path], *, cluster: str, model: str | None, global_batch: int | None,
                           seq_len: int | None, layout: dict[str, Any], precision: str, stack: str,
                           calibration: str | None,
                           fit_names: list[str] | None, output: Path, json_out: bool) -> None:
    """Read ``traces``, fit, write ``output`` and print the fitted values with their bounds."""
    from clustertwin.cli.traced_job import traced_job
    from clustertwin.ops.calibration.calibrate import write_calibration
    from clustertwin.profile.compare import measured_terms
    from clustertwin.profile.fit import FIT_TERMS, fit_profile
    from clustertwin.profile.report import profile
    from clustertwin.specs.calibration import Calibration

    rep = profile(traces)
    job = traced_job(rep, cluster=cluster, model=model, global_batch=global_batch, seq_len=seq_len,
                     calibration=calibration, dataset="none", layout=layout, what="calibrate --profile",
                     precision=precision, stack=stack)
    base = dict(job.calibration.train) if job.calibration is not None else {}
    res = fit_profile(measured_terms(rep), job.predictor(), fit_names, base)
    gpu = job.cluster.node.gpu
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d")
    prior = job.calibration.model_dump() if job.calibration is not None else {}
    cal = Calibration(**{**prior, "train": {**base, **res.params},
                         "source": f"calibrate --profile: {len(rep.ranks)} rank trace(s), fitted {stamp}",
                         "gpu": gpu.id or gpu.name})
    write_calibration(cal, str(output))
    summary = {"output": str(output), "gpus": job.gpus, "ranks": len(rep.ranks),
               "fitted": {n: {"value": v, "start": res.start[n], "bounds": list(res.bounds[n]), "term": FIT_TERMS[n]}
                          for n, v in res.params.items()},
               "left_out": res.left_out,
               "max_term_error_before": res.max_term_error_before, "max_term_error_after": res.max_term_error_after,
               "measured_s": res.measured, "predicted_before_s": res.before, "predicted_after_s": res.after}
    if json_out:
        print_json(summary)
        return
    console.print(table("fitted training parameters", ["parameter", "term", "start", "fitted", "bounds"],
                        [[n, FIT_TERMS[n], f"{res.start[n]:.4g}", f"{v:.4g}",
                          f"[{res.bounds[n][0]:g}, {res.bounds[n][1]:g}]"] for n, v in res.params.items()]))
    terms = sorted({FIT_TERMS[n] for n in res.params})
    console.print(table("step terms, ms", ["term", "measured", "before", "after"],
                        [[t, 1e3 * res.measured.get(t, 0.0), 1e3 * res.before.get(t, 0.0), 1e3 * res.after.get(t, 0.0)]
                         for t in terms]))
    for n, why in res.left_out.items():
        console.print(f"not fitted: {n}: {why}", markup=False, highlight=False)
    console.print(f"largest term error {res.max_term_error_before:.1%} -> {res.max_term_error_after:.1%} of the "
                  f"measured step; calibration written to {output}", markup=False, highlight=False)
