"""``clustertwin exporter [--port] [--rules FILE] [--json]``: Prometheus GPU metrics from NVML, the alert rules,
or one scrape as JSON."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import typer

from clustertwin.cli.common import JsonOpt, console, print_json
from clustertwin.errors import SpecError
from clustertwin.ops.health.nvml import NvmlBackend, NvmlUnavailable
from clustertwin.ops.telemetry import exporter as ex

MAX_PORT = 65535


def _write_rules(rules: Path, json_out: bool) -> None:
    text = ex.alert_rules_yaml()
    if not rules.parent.is_dir():
        raise SpecError(f"--rules: directory {rules.parent} does not exist", file=str(rules))
    try:
        rules.write_text(text, encoding="utf-8")
    except OSError as e:
        raise SpecError(f"--rules: cannot write: {e.strerror or e}", file=str(rules)) from None
    if json_out:
        doc = ex.alert_rules()
        print_json({"rules_file": str(rules), "alerts": [
            {"alert": r["alert"], "expr": r["expr"], "for": r["for"], "severity": r["labels"]["severity"]}
            for g in doc["groups"] for r in g["rules"]]})
    else:
        console.print(f"alert rules written to {rules}")


def exporter_command(
    port: int = typer.Option(ex.DEFAULT_PORT, "--port", help="Port to serve /metrics on (dcgm-exporter's 9400)."),
    addr: str = typer.Option("0.0.0.0", "--addr", help="Address to bind."),
    rules: Path | None = typer.Option(None, "--rules", help="Write the Prometheus alert-rules file here and exit."),
    job_map_dir: Path | None = typer.Option(None, "--job-map-dir", help="Directory with one file per GPU index "
                                            "holding the Slurm job id (hpc_job label), written by a prolog."),
    port_counters: bool = typer.Option(True, "--port-counters/--no-port-counters", help="Also export the "
                                       "network ports' counters (node_infiniband_*, node_ethtool_*)."),
    ports_only: bool = typer.Option(False, "--ports-only", help="Only the port counters (no GPU, no NVML)."),
    sysfs_ib: Path | None = typer.Option(None, "--sysfs-ib", help="Copy of /sys/class/infiniband to read."),
    ethtool: list[str] = typer.Option([], "--ethtool", help="IFACE=FILE: a saved 'ethtool -S IFACE' (live: the "
                                      "RoCE netdevs under /sys/class/infiniband/*/device/net)."),
    json_out: bool = JsonOpt,
) -> None:
    """Serve GPU utilisation, memory, power, temperature, clocks, ECC, Xid, PCIe/NVLink and throttle metrics,
    labelled with the job that owns each GPU, and the network port counters. With --json: one scrape (or the
    rules written) as JSON, then exit."""
    if rules is not None:
        _write_rules(rules, json_out)
        return
    if not 0 < port <= MAX_PORT:
        raise SpecError(f"--port must be 1..{MAX_PORT} (got {port})")
    if job_map_dir is not None and not job_map_dir.is_dir():
        raise SpecError(f"--job-map-dir: {job_map_dir} is not a directory")
    extra = _port_collectors(port_counters or ports_only, sysfs_ib, ethtool)
    if ports_only:
        from socket import gethostname

        host = gethostname()
        if json_out:
            print_json({"hostname": host, "samples": ex.snapshot(None, host, extra=extra)})
            return
        _serve(None, host, port, addr, None, extra)
        return
    try:
        backend = NvmlBackend()
    except NvmlUnavailable as e:
        raise SpecError(f"cannot export GPU metrics: {e} (--ports-only exports the port counters alone)") from None
    if json_out:
        try:
            print_json({"hostname": backend.hostname,
                        "samples": ex.snapshot(backend, backend.hostname, job_map_dir=job_map_dir, extra=extra)})
        finally:
            backend.close()
        return
    _serve(backend, backend.hostname, port, addr, job_map_dir, extra)


def _port_collectors(enabled: bool, sysfs_ib: Path | None, ethtool: list[str]) -> tuple[Any, ...]:
    from clustertwin.ops.health.ib import SYSFS_IB_ROOT
    from clustertwin.ops.health.nccl_env import roce_netdevs
    from clustertwin.ops.telemetry.port_exporter import PortCollector, ethtool_readers

    if not enabled:
        return ()
    files: dict[str, Path] = {}
    for item in ethtool:
        iface, sep, file = item.partition("=")
        if not sep or not iface or not file:
            raise SpecError(f"--ethtool expects IFACE=FILE (got '{item}')")
        if not Path(file).is_file():
            raise SpecError(f"--ethtool: {file}: no such file")
        files[iface] = Path(file)
    root = sysfs_ib or SYSFS_IB_ROOT
    live = [] if files or sysfs_ib is not None else sorted(roce_netdevs(root))
    return (PortCollector(root, ethtool_readers(files, live)),)


def _serve(backend: Any, hostname: str, port: int, addr: str, job_map_dir: Path | None,
           extra: tuple[Any, ...]) -> None:
    watching = backend.start_xid_watch() if backend is not None else False
    try:
        server, _ = ex.start(backend, hostname, port, addr, job_map_dir=job_map_dir, extra=extra)
    except OSError as e:
        if backend is not None:
            backend.close()
        raise SpecError(f"cannot listen on {addr}:{port}: {e.strerror or e}") from None
    what = "port counters only" if backend is None else (f"{backend.device_count()} GPUs, Xid events "
                                                         f"{'watched' if watching else 'not supported'}")
    console.print(f"serving http://{addr}:{port}/metrics ({what}); Ctrl-C to stop")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        if backend is not None:
            backend.close()


def register(app: typer.Typer) -> None:
    app.command("exporter")(exporter_command)
