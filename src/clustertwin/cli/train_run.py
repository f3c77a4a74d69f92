"""The computations behind ``clustertwin train estimate|search|scale``, from the commands' own arguments to
the objects they print and the dicts their ``--json`` prints: the commands (``cli/train_cmd.py``) and the web
API (``clustertwin.web``) share this one code path, so both give the same numbers."""

from __future__ import annotations

from typing import Any

from clustertwin.cli.common import load_calibration, load_cluster, load_model, require_gpus
from clustertwin.cli.layout_options import LAYOUT_OPTIONS, layout_fields, layout_from_params, resolve_layout
from clustertwin.errors import SpecError

RECOMPUTE = ("none", "selective", "full")


def path_inputs(placement: str, dataset: str, nodes: int | None = None) -> dict[str, Any]:
    """``placement`` and ``dataset`` keyword arguments of the train library calls; a node list is checked
    against the cluster's ``nodes`` before it is listed."""
    from clustertwin.datapath import dataset as get_dataset
    from clustertwin.train.topology_comm import parse_placement, placement_key

    pl = parse_placement(placement, nodes)
    placement_key(pl)
    ds = None if dataset in ("none", "") else get_dataset(dataset).name
    return {"placement": pl, "dataset": ds}


def seq_model(model: str, seq_len: int | None):
    m = load_model(model)
    if seq_len:
        m = m.model_copy(update={"seq_len": seq_len})
    return m


def check_fixed(**kw: Any) -> dict[str, Any]:
    """Layout fields given on the command line (None = searched)."""
    if kw.get("recompute") is not None and kw["recompute"] not in RECOMPUTE:
        raise SpecError(f"--recompute must be one of {', '.join(RECOMPUTE)} (got {kw['recompute']!r})")
    if kw.get("zero") is not None and kw["zero"] not in (0, 1, 2, 3):
        raise SpecError(f"--zero must be 0, 1, 2 or 3 (got {kw['zero']})")
    return {k: v for k, v in kw.items() if v is not None}


def estimate_result(*, cluster: str, model: str, gpus: int | None, global_batch: int, seq_len: int | None,
                    precision: str, tokens: float | None, usd_per_gpu_hour: float, calibration: str | None,
                    force: bool, stack: str, placement: str, dataset: str, with_failures: bool,
                    async_checkpoint: bool, hot_spares: int | None, trials: int, seed: int,
                    strict_layout: bool = False, batch_ramp: str | None = None,
                    **layout: Any) -> tuple[Any, Any, Any, Any, Any]:
    """(estimate, time to train, with failures, model, cluster) of ``train estimate``'s arguments: the
    command and the web API share this (``layout``: the layout options, :data:`LAYOUT_PARAMS`). With
    ``batch_ramp`` (``START,TOKENS``) the time to train adds the ramp's slower steps
    (:mod:`clustertwin.train.ramp`); its tokens/s is then the run's average."""
    from clustertwin.train import estimate, time_to_train

    args, recompute, zero = layout, layout["recompute"], layout["zero"]
    require_gpus(gpus)
    c = load_cluster(cluster)
    m = seq_model(model, seq_len)
    check_fixed(recompute=recompute, zero=zero)
    cal = load_calibration(calibration, c, force)
    fields = layout_from_params(args)
    par = resolve_layout(fields, c, m, gpus=gpus or c.total_gpus, global_batch=global_batch, precision=precision,
                         stack=stack, calibration=cal, searched=not strict_layout)
    if with_failures and not tokens:
        raise SpecError("--with-failures needs a token budget (--tokens)")
    if batch_ramp and not tokens:
        raise SpecError("--batch-ramp needs a token budget (--tokens)")
    inputs = path_inputs(placement, dataset, c.nodes)
    if strict_layout:
        e = estimate(m, c, par, calibration=cal, **inputs)
    else:
        from clustertwin.train.complete import complete_layout

        e, _ = complete_layout(m, c, par, gpus or c.total_gpus, set(fields), calibration=cal, **inputs)
    extra = _ramp_extra(batch_ramp, tokens, m, c, e, par) if tokens else 0.0
    ttt = time_to_train(e, tokens, c, usd_per_gpu_hour, ramp_extra_tokens=extra) if tokens else None
    rel = None
    if with_failures and ttt:
        from clustertwin.reliability.train_run import time_to_train_with_failures

        rel = time_to_train_with_failures(e, tokens + extra, c, m, usd_per_gpu_hour=usd_per_gpu_hour,
                                          async_checkpoint=async_checkpoint, hot_spares=hot_spares,
                                          trials=trials, seed=seed)
    return e, ttt, rel, m, c


def _ramp_extra(text: str | None, tokens: float, m: Any, c: Any, e: Any, par: Any) -> float:
    """Steady-step tokens ``--batch-ramp`` adds to ``tokens`` (0 without one)."""
    if not text:
        return 0.0
    from clustertwin.train.ramp import batch_ramp, parse_batch_ramp

    start, ramp_tokens = parse_batch_ramp(text)
    if ramp_tokens >= tokens:
        raise SpecError(f"--batch-ramp: the ramp's {ramp_tokens:,.3g} tokens must be fewer than --tokens {tokens:,.3g}")
    if start > par.global_batch:
        raise SpecError(f"--batch-ramp: START {start} is above the global batch {par.global_batch}")
    return batch_ramp(m, c, e, par, start, ramp_tokens).extra_tokens


def searched_note(chosen: dict[str, Any]) -> str:
    """The line that says which layout fields the search chose (``train estimate``, ``explain``)."""
    def value(v: Any) -> str:
        return ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v).lower()

    shown = ", ".join(f"{LAYOUT_OPTIONS.get(k, k)} {value(v)}" for k, v in chosen.items())
    return f"layout fields not given, chosen by search: {shown} (--strict-layout: the literal defaults)"


def estimate_json(e: Any, ttt: Any, rel: Any) -> dict[str, Any]:
    """``train estimate --json`` of :func:`estimate_result`'s first three values."""
    d = e.to_dict()
    if ttt:
        d["time_to_train"] = ttt.to_dict()
    if rel:
        d["with_failures"] = rel.to_dict()
    return d


def write_timeline(e: Any, m: Any, path: str) -> str:
    """Write ``train estimate --timeline``'s Chrome-trace JSON of estimate ``e`` to ``path``; the line to print."""
    import json

    from clustertwin.train.timeline import step_timeline

    trace = step_timeline(e, m.layers)
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(trace, f, separators=(",", ":"))
    except OSError as err:
        raise SpecError(f"--timeline {path}: cannot write ({err.strerror})") from None
    ranks = sorted({ev["pid"] for ev in trace["traceEvents"]})
    return (f"timeline: {path} ({len(trace['traceEvents'])} events, ranks {', '.join(map(str, ranks))}; "
            f"open in https://ui.perfetto.dev)")


def search_result(*, cluster: str, model: str, gpus: int | None, global_batch: int, seq_len: int | None,
                  precision: str, top: int, tokens: float | None, usd_per_gpu_hour: float, calibration: str | None,
                  force: bool, stack: str, placement: str, dataset: str, **layout: Any) -> tuple[Any, Any]:
    """(search result, time to train of the best) of ``train search``'s arguments (shared with the web API)."""
    from clustertwin.train import search, time_to_train

    require_gpus(gpus)
    c = load_cluster(cluster)
    m = seq_model(model, seq_len)
    check_fixed(recompute=layout["recompute"], zero=layout["zero"])
    fixed = layout_from_params(layout)
    if layout["pipeline_layout"]:
        raise SpecError("--pipeline-layout fixes one stage plan: give it to train estimate, not search")
    res = search(m, c, global_batch=global_batch, gpus=gpus, precision=precision, fixed=fixed, top=top,
                 calibration=load_calibration(calibration, c, force), software_stack=stack,
                 **path_inputs(placement, dataset, c.nodes))
    return res, time_to_train(res.best, tokens, c, usd_per_gpu_hour) if (tokens and res.best) else None


def search_json(res: Any, ttt: Any) -> dict[str, Any]:
    """``train search --json`` of :func:`search_result`."""
    d = res.to_dict()
    if ttt:
        d["time_to_train"] = ttt.to_dict()
    return d


def scale_result(*, cluster: str, model: str, max_gpus: int | None, start_gpus: int | None, global_batch: int,
                 seq_len: int | None, precision: str, tokens: float | None, usd_per_gpu_hour: float,
                 calibration: str | None, placement: str, dataset: str, force: bool, stack: str = "auto",
                 **layout: Any) -> tuple[Any, list[Any]]:
    """(scaling result, time to train per point) of ``train scale``'s arguments (``layout``: the layout
    options, pinned at every GPU count as ``train search`` pins them)."""
    from clustertwin.train import scale, time_to_train

    require_gpus(max_gpus)
    require_gpus(start_gpus, "--start-gpus")
    c = load_cluster(cluster)
    m = seq_model(model, seq_len)
    check_fixed(recompute=layout.get("recompute"), zero=layout.get("zero"))
    fixed = layout_fields(**layout)
    if fixed.get("pipeline_layout"):
        raise SpecError("--pipeline-layout fixes one stage plan: give it to train estimate, not scale")
    res = scale(m, c, global_batch=global_batch, max_gpus=max_gpus, start_gpus=start_gpus, precision=precision,
                fixed=fixed or None, calibration=load_calibration(calibration, c, force), software_stack=stack,
                **path_inputs(placement, dataset, c.nodes))
    return res, [time_to_train(p.estimate, tokens, c, usd_per_gpu_hour) if (tokens and p.estimate) else None
                 for p in res.points]


def scale_json(res: Any, ttts: list[Any], tokens: float | None) -> dict[str, Any]:
    """``train scale --json`` of :func:`scale_result`."""
    d = res.to_dict()
    if tokens:
        for pd, t in zip(d["points"], ttts, strict=True):
            pd["time_to_train"] = t.to_dict() if t else None
    return d


def write_traces(e: Any, m: Any, folder: str, attention_s: float = 0.0) -> str:
    """Write ``train estimate --trace-out``'s synthesized profiler traces of estimate ``e``
    (:mod:`clustertwin.profile.synth`; ``attention_s`` of its compute as attention kernels) into ``folder``;
    the line to print."""
    import gzip
    import json
    from pathlib import Path

    from clustertwin.profile.synth import synth_traces

    docs = synth_traces(e, m.layers, attention_s=attention_s)
    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for doc in docs:
            rank = doc["distributedInfo"]["rank"]
            (out / f"rank{rank}.json.gz").write_bytes(
                gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), mtime=0))
    except OSError as err:
        raise SpecError(f"--trace-out {folder}: cannot write ({err.strerror})") from None
    ranks = [d["distributedInfo"]["rank"] for d in docs]
    return (f"profiler traces: {folder}/rank{{{','.join(map(str, ranks))}}}.json.gz (3 predicted steps each; "
            f"read with clustertwin profile)")

