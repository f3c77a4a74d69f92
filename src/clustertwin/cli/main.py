"""The ``clustertwin`` entry point: registers one typer app per command group and turns errors
into one-line messages (exit 2 for bad input, 1 for internal failures), never a traceback."""

from __future__ import annotations

import importlib
import os
import sys

import typer

from clustertwin import __version__
from clustertwin.errors import ClusterTwinError

app = typer.Typer(
    name="clustertwin",
    help="A calibrated digital twin of AI compute clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"clustertwin {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show version."),
) -> None:
    """clustertwin: plan, simulate, check and operate AI compute clusters."""


#: command groups, one module each under clustertwin.cli, each exposing ``register(app)``
COMMAND_MODULES: tuple[str, ...] = (
    "catalog_cmd", "comm_cmd", "deploy_cmd", "diagnose_cmd", "explain_cmd", "exporter_cmd", "infer_cmd", "node_cmd",
    "plan_cmd", "reliability_cmd", "report_cmd", "sched_cmd", "sweep_cmd", "train_cmd", "validate_cmd",
)


def _register() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"clustertwin.cli.{name}").register(app)


_register()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; bad input -> exit 2 with one line on stderr; internal errors -> exit 1."""
    try:
        app(args=argv, standalone_mode=False)
    except ClusterTwinError as e:
        typer.echo(f"error: {e}", err=True)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 1
    except SystemExit as e:  # click usage errors already printed
        return int(e.code or 0)
    except Exception as e:  # click.UsageError and friends
        # typer >= 0.2x vendors click (typer._click): match click exceptions by interface (UsageError: exit 2)
        if callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            e.show()  # type: ignore[attr-defined]
            return e.exit_code  # type: ignore[attr-defined]
        if os.environ.get("CLUSTERTWIN_DEBUG"):
            raise
        typer.echo(f"internal error: {type(e).__name__}: {e} (set CLUSTERTWIN_DEBUG=1 for a traceback)", err=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
