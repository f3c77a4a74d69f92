"""``clustertwin exporter [--port] [--rules FILE]``: Prometheus GPU metrics from NVML, or the alert rules."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import typer

from clustertwin.cli.common import console
from clustertwin.errors import SpecError
from clustertwin.ops import exporter as ex
from clustertwin.ops.nvml import NvmlBackend, NvmlUnavailable

MAX_PORT = 65535


def exporter_command(
    port: int = typer.Option(ex.DEFAULT_PORT, "--port", help="Port to serve /metrics on (dcgm-exporter's 9400)."),
    addr: str = typer.Option("0.0.0.0", "--addr", help="Address to bind."),
    rules: Path | None = typer.Option(None, "--rules", help="Write the Prometheus alert-rules file here and exit."),
) -> None:
    """Serve GPU utilisation, memory, power, temperature, clocks, ECC, Xid, PCIe/NVLink and throttle metrics."""
    if rules is not None:
        rules.write_text(ex.alert_rules_yaml(), encoding="utf-8")
        console.print(f"alert rules written to {rules}")
        return
    if not 0 < port <= MAX_PORT:
        raise SpecError(f"--port must be 1..{MAX_PORT} (got {port})")
    try:
        backend = NvmlBackend()
    except NvmlUnavailable as e:
        raise SpecError(f"cannot export GPU metrics: {e}") from None
    watching = backend.start_xid_watch()
    server, _ = ex.start(backend, backend.hostname, port, addr)
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
