"""``clustertwin serve``: the planning web app (Plan, Train, Infer, Explain, Validate pages and the JSON API
that mirrors ``--json``) on a local port; a host other than loopback needs ``--allow-remote``."""

from __future__ import annotations

import ipaddress

import typer

from clustertwin.cli.common import echo
from clustertwin.errors import SpecError

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and the loopback names."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve_command(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback unless --allow-remote)."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    allow_remote: bool = typer.Option(False, "--allow-remote",
                                      help="Allow a non-loopback --host: anyone who reaches it can use the app."),
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn log level: critical, error, warning, "
                                                                  "info, debug."),
) -> None:
    """Serve the planning web app and its JSON API (``/api/<command>``, OpenAPI at ``/docs``)."""
    if port > 65535:
        raise SpecError(f"--port must be at most 65535 (got {port})")
    if not is_loopback(host):
        if not allow_remote:
            raise SpecError(f"--host {host[:60]!r} is not a loopback address: the app has no login, so binding "
                            "it for other machines needs --allow-remote")
        echo(f"warning: serving on {host}:{port} for other machines; the app has no authentication", err=True)
    if log_level not in ("critical", "error", "warning", "info", "debug"):
        raise SpecError(f"--log-level must be critical, error, warning, info or debug (got {log_level[:40]!r})")
    try:
        import uvicorn
    except ImportError:
        raise SpecError("clustertwin serve needs the web extra: pip install 'clustertwin[web]'") from None
    from clustertwin.web import create_app

    app = create_app()
    echo(f"clustertwin web app on http://{host}:{port}/ (API: /api/..., OpenAPI: /docs); Ctrl-C to stop",
         err=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, server_header=False)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)
