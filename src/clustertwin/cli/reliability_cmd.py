"""``clustertwin reliability``: failure rates, checkpoint cost and interval, and the distribution of a run's
wall time and ETTR (analytical expectation and Monte Carlo)."""

from __future__ import annotations

import math

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

from clustertwin.cli.common import (
    ClusterOpt,
    JsonOpt,
    console,
    load_cluster,
    load_model,
    print_json,
    table,
)
from clustertwin.cli.terminal import styled
from clustertwin.errors import SpecError
from clustertwin.reliability import estimate
from clustertwin.reliability.failures import COMPONENT_CLASSES
from clustertwin.reliability.model import ReliabilityResult
from clustertwin.reliability.sites import RateRange, fleet_model, job_mttf_curve, node_rate_per_1000_node_days
from clustertwin.units import DAY_S, GB, HOUR_S, MINUTE_S

MAX_TRIAL_EVENTS = 500_000_000
"""Default work cap of the Monte Carlo: trial-interruptions it may simulate (~4 minutes on one core)."""
MTTF_GPUS: tuple[int, ...] = (8, 1024, 16384)
"""Job sizes whose MTTF the command reports (one node, a mid-size job, the Llama 3 job)."""
PROGRESS_MIN_TRIAL_EVENTS = 2_000_000
"""Show a progress bar above this many trial-interruptions (about one second on one core, see
benchmarks/test_reliability_bench.py)."""


def _interval_s(text: str) -> float | None:
    if text.strip().lower() in ("auto", "daly"):
        return None
    try:
        v = float(text)
    except ValueError:
        raise SpecError(f"--checkpoint-interval-min must be a number of minutes or 'auto' (got {text!r})") from None
    if not (v > 0 and math.isfinite(v)):
        raise SpecError(f"--checkpoint-interval-min must be > 0 (got {text!r})")
    return v * MINUTE_S


def _run_times(days: float | None, tokens: float | None, tokens_per_s: float | None,
               window_days: float | None) -> tuple[float | None, float | None]:
    """(failure-free run seconds, wall-clock window seconds) from the options; exactly one is set."""
    given = [days is not None, tokens is not None or tokens_per_s is not None, window_days is not None]
    if sum(given) != 1:
        raise SpecError("give exactly one of --days, --tokens with --tokens-per-s, or --window-days")
    if days is not None:
        if not (days > 0 and math.isfinite(days)):
            raise SpecError(f"--days must be > 0 (got {days})")
        return days * DAY_S, None
    if window_days is not None:
        if not (window_days > 0 and math.isfinite(window_days)):
            raise SpecError(f"--window-days must be > 0 (got {window_days})")
        return None, window_days * DAY_S
    if tokens is None or tokens_per_s is None:
        raise SpecError("--tokens needs --tokens-per-s (and the other way round)")
    if not (tokens > 0 and tokens_per_s > 0):
        raise SpecError(f"--tokens and --tokens-per-s must be > 0 (got {tokens}, {tokens_per_s})")
    return tokens / tokens_per_s, None


def reliability_command(
    cluster: str = ClusterOpt,
    model: str | None = typer.Option(None, "--model", "-m", help="Model preset id or file (checkpoint size)."),
    gpus: int | None = typer.Option(None, "--gpus", "-g", help="GPUs of the job (default: the whole cluster)."),
    days: float | None = typer.Option(None, "--days", help="Failure-free length of the run, days."),
    tokens: float | None = typer.Option(None, "--tokens", help="Tokens to train (with --tokens-per-s)."),
    tokens_per_s: float | None = typer.Option(None, "--tokens-per-s", help="Failure-free training throughput."),
    window_days: float | None = typer.Option(None, "--window-days",
                                             help="A wall-clock window instead of a run (e.g. a 54-day snapshot)."),
    interval: str = typer.Option("auto", "--checkpoint-interval-min",
                                 help="Compute minutes between checkpoints, or 'auto' (Daly)."),
    checkpoint_gb: float | None = typer.Option(None, "--checkpoint-gb",
                                               help="Checkpoint size, GB (default: from --model, 14 B/param)."),
    async_checkpoint: bool = typer.Option(False, "--async-checkpoint",
                                          help="Snapshot to host memory, write in the background."),
    hot_spares: int | None = typer.Option(None, "--hot-spares", help="Hot-spare nodes (implies --policy spares)."),
    policy: str | None = typer.Option(None, "--policy", help="restart | spares | elastic (default restart)."),
    recovery: str = typer.Option("requeue", "--recovery",
                                 help="requeue | in_memory | warm_standby (detection, restart, checkpoint path)."),
    site: str = typer.Option("auto", "--site",
                             help="Failure-rate site: 'auto' (median of the GPU generation's measured sites, "
                                  "Monte Carlo draws the site) or a site id (e.g. llama3-405b)."),
    trials: int = typer.Option(1000, "--trials", help="Monte Carlo trials (0: analytical only)."),
    seed: int = typer.Option(0, "--seed", help="Random seed (results repeat bit for bit)."),
    max_events: float = typer.Option(MAX_TRIAL_EVENTS, "--max-events",
                                     help="Work cap: most trial-interruptions the Monte Carlo may simulate."),
    json_out: bool = JsonOpt,
) -> None:
    """Failure rates by cause, checkpoint interval (Young/Daly), wall time and ETTR (analytical, Monte Carlo)."""
    ideal_s, window_s = _run_times(days, tokens, tokens_per_s, window_days)
    spec = load_cluster(cluster)
    mspec = load_model(model) if model else None
    if checkpoint_gb is not None and not (checkpoint_gb > 0 and math.isfinite(checkpoint_gb)):
        raise SpecError(f"--checkpoint-gb must be > 0 (got {checkpoint_gb})")
    site_id = None if site.strip().lower() == "auto" else site.strip()
    fm, rr = fleet_model(spec.node.gpu.arch, site_id)
    kw = dict(model=mspec, checkpoint_bytes=checkpoint_gb * GB if checkpoint_gb is not None else None,
              ideal_time_s=ideal_s, horizon_s=window_s, interval_s=_interval_s(interval),
              async_checkpoint=async_checkpoint, policy=policy, hot_spares=hot_spares, trials=trials, seed=seed,
              failure_model=fm, recovery=recovery, rate_range=rr if site_id is None else None)
    # size the progress bar's need from the analytical interruption count (cheap: trials=0)
    quick = estimate(spec, gpus, **{**kw, "trials": 0})  # type: ignore[arg-type]
    # with a site spread, the busiest trials are at the factor's p90
    a = quick.analytic_range[1] if quick.analytic_range is not None else quick.analytic
    per_trial = sum(math.inf if v is None else float(v) for v in (a.unexpected_interruptions,
                                                                  a.planned_interruptions)) + 1
    events = trials * per_trial
    if trials and not math.isfinite(events):  # the job never completes: a Monte Carlo would run to its horizon
        typer.echo("note: Monte Carlo skipped: the run never completes (interruptions arrive faster than it "
                   "recovers); analytical figures only", err=True)
        trials, kw["trials"] = 0, 0
    elif trials and events > max_events:
        raise SpecError(f"the Monte Carlo would simulate ~{events:,.0f} interruptions ({trials:,} trials x "
                        f"{per_trial:,.0f}), more than --max-events {max_events:,.0f}; lower --trials or raise "
                        "--max-events")
    if trials and not json_out and console.is_terminal and events > PROGRESS_MIN_TRIAL_EVENTS:
        cols = (TextColumn("Monte Carlo"), BarColumn(), TaskProgressColumn(), TimeRemainingColumn())
        with Progress(*cols, console=console, transient=True) as prog:
            task = prog.add_task("trials", total=trials)
            res = estimate(spec, gpus, progress=lambda d, _n: prog.update(task, completed=d),
                           **kw)  # type: ignore[arg-type]
    else:
        res = estimate(spec, gpus, **kw) if trials else quick  # type: ignore[arg-type]
    sizes = _sizes(res, rr)
    if json_out:
        print_json({**res.to_dict(), **sizes})
        return
    _render(res)
    _render_sizes(sizes)


def _sizes(res: ReliabilityResult, rr: RateRange) -> dict[str, object]:
    """Node-rate range and job MTTF at :data:`MTTF_GPUS` on this cluster's node type."""
    gpn = max(1, math.ceil(res.gpus / res.nodes))
    ports = res.rates.units["nic_port"] // res.nodes if res.nodes else 0
    return {
        "node_rate_per_1000_node_days": {**node_rate_per_1000_node_days(gpn, ports, rr),
                                         "generation": rr.generation, "sites": list(rr.sites)},
        "job_mttf_h": job_mttf_curve(list(MTTF_GPUS), gpn, ports, rr),
    }


def _render_sizes(sizes: dict[str, object]) -> None:
    nr: dict = sizes["node_rate_per_1000_node_days"]  # type: ignore[assignment]
    console.print(table("site spread: unexpected interruptions per 1,000 node-days (one-node job)",
                        ["generation", "sites", "p10", "p50", "p90"],
                        [[nr["generation"] or "all", ", ".join(nr["sites"]), nr["p10"], nr["p50"], nr["p90"]]]))
    rows: list = sizes["job_mttf_h"]  # type: ignore[assignment]
    console.print(table("job MTTF by size (h)", ["GPUs", "p10", "median", "p90", "independent nodes"],
                        [[f"{r['gpus']:,}", r["mttf_h_p10"], r["mttf_h"], r["mttf_h_p90"], r["independent_nodes_h"]]
                         for r in rows]))


def _render(res: ReliabilityResult) -> None:
    a, mc, ck = res.analytic, res.monte_carlo, res.checkpoint
    run = (f"{res.ideal_time_s / DAY_S:,.1f} failure-free days" if res.ideal_time_s is not None
           else f"a {res.horizon_s / DAY_S:,.1f}-day wall-clock window")  # type: ignore[operator]
    spares = f", {res.hot_spares} hot spares" if res.policy == "spares" else ""
    console.print(styled((f"{res.gpus:,} GPUs", "bold"), f" ({res.nodes:,} nodes of {res.cluster}), {run}; "
                         f"policy {res.policy}{spares}; {'asynchronous' if res.async_checkpoint else 'synchronous'} "
                         f"checkpoints; recovery {res.params.recovery}"))

    horizon_h = (a.wall_s if res.ideal_time_s is not None else res.horizon_s) / HOUR_S  # type: ignore[operator]
    by_class = res.rates.by_class_per_h()
    unexp = res.rates.unexpected_per_h
    rows = [[c, by_class[c] * 24.0, by_class[c] * horizon_h,
             f"{by_class[c] / unexp:.1%}" if c != "planned" and unexp > 0 else "-"]
            for c in COMPONENT_CLASSES if by_class.get(c, 0.0) > 0]
    rows.append(["unexpected (all)", unexp * 24.0, unexp * horizon_h, "100%"])
    console.print(table(f"failures (job MTBF {res.rates.mtbf_h:.2f} h)",
                        ["class", "per day", "expected in run", "share of unexpected"], rows))
    top = sorted(res.rates.by_cause_per_h().items(), key=lambda kv: -kv[1])
    mc_cause = mc.by_cause_mean if mc is not None else {}
    console.print(table("by cause", ["cause", "per day", "expected in run", "Monte Carlo mean"],
                        [[n, r * 24.0, r * horizon_h, mc_cause.get(n)] for n, r in top if r > 0]))

    console.print(table("checkpoint", ["item", "value"], [
        ["size (GB)", ck.bytes / GB], ["size source", res.checkpoint_size_source],
        ["write (s)", ck.write_s], ["load (s)", ck.load_s], ["snapshot to host (s)", ck.snapshot_s],
        ["stall per checkpoint (s)", res.stall_s],
        ["Young interval (min)", res.young_interval_s / MINUTE_S],
        ["Daly interval (min)", res.daly_interval_s / MINUTE_S],
        ["interval used (min)", res.interval_s / MINUTE_S], ["interval source", res.interval_source],
        ["mean restart (min)", a.mean_restart_s / MINUTE_S],
    ]))

    def pct(key: str, scale: float = 1.0) -> list[float | None]:
        if mc is None:
            return [None, None, None, None]
        s = mc.summary()[key]
        return [s["mean"] / scale, s["p10"] / scale, s["p50"] / scale, s["p90"] / scale]  # type: ignore[index]

    rows = [
        ["wall time (days)", a.wall_s / DAY_S, *pct("wall_s", DAY_S)],
        ["productive (days)", a.productive_s / DAY_S, *pct("productive_s", DAY_S)],
        ["ETTR", a.ettr, *pct("ettr")],
        ["unexpected interruptions", a.unexpected_interruptions, *pct("unexpected_interruptions")],
        ["planned interruptions", a.planned_interruptions, *pct("planned_interruptions")],
        ["lost GPU-hours", (a.wall_s - a.productive_s) * res.gpus / HOUR_S, *pct("lost_gpu_hours")],
        ["checkpoint stalls (h)", a.checkpoint_s / HOUR_S, *pct("checkpoint_s", HOUR_S)],
        ["restarts (h)", a.downtime_s / HOUR_S, *pct("downtime_s", HOUR_S)],
        ["rework (h)", a.rework_s / HOUR_S, *pct("rework_s", HOUR_S)],
    ]
    title = "outcome" + (f" (Monte Carlo: {mc.trials:,} trials, seed {mc.seed})" if mc is not None else "")
    console.print(table(title, ["", "analytical", "MC mean", "p10", "p50", "p90"], rows))


def register(app: typer.Typer) -> None:
    app.command("reliability")(reliability_command)
