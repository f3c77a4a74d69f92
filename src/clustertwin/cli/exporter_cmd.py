"""``clustertwin exporter [--port] [--rules FILE] [--json]``: Prometheus GPU metrics from NVML, the alert rules,
or one scrape as JSON."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import typer

from clustertwin.cli.common import JsonOpt, console, print_json
from clustertwin.errors import SpecError
from clustertwin.ops import exporter as ex
from clustertwin.ops.nvml import NvmlBackend, NvmlUnavailable

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
    json_out: bool = JsonOpt,
) -> None:
    """Serve GPU utilisation, memory, power, temperature, clocks, ECC, Xid, PCIe/NVLink and throttle metrics,
    labelled with the job that owns each GPU. With --json: one scrape (or the rules written) as JSON, then exit."""
    if rules is not None:
        _write_rules(rules, json_out)
        return
    if not 0 < port <= MAX_PORT:
        raise SpecError(f"--port must be 1..{MAX_PORT} (got {port})")
    if job_map_dir is not None and not job_map_dir.is_dir():
        raise SpecError(f"--job-map-dir: {job_map_dir} is not a directory")
    try:
        backend = NvmlBackend()
    except NvmlUnavailable as e:
        raise SpecError(f"cannot export GPU metrics: {e}") from None
    if json_out:
        try:
            print_json({"hostname": backend.hostname,
                        "samples": ex.snapshot(backend, backend.hostname, job_map_dir=job_map_dir)})
        finally:
            backend.close()
        return
    watching = backend.start_xid_watch()
    try:
        server, _ = ex.start(backend, backend.hostname, port, addr, job_map_dir=job_map_dir)
    except OSError as e:
        backend.close()
        raise SpecError(f"cannot listen on {addr}:{port}: {e.strerror or e}") from None
    console.print(f"serving http://{addr}:{port}/metrics ({backend.device_count()} GPUs, Xid events "
                  f"{'watched' if watching else 'not supported'}); Ctrl-C to stop")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        backend.close()


def register(app: typer.Typer) -> None:
    app.command("exporter")(exporter_command)
