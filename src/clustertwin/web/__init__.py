"""``clustertwin serve``: the twin as a local web app (pages per question, and a JSON API that mirrors the
CLI's ``--json``: ``/api/<command path>`` takes the command's options under their parameter names).

The parameters of every endpoint and form are read from the CLI commands themselves (``commands.py``: the
click options of ``train estimate``, ``plan``, ...; the layout options are ``cli/layout_options.py``'s), and
every payload comes from the CLI modules' own functions (``cli/train_run.py``, ``plan_cmd.plans_of``, ...), so
the API and the CLI give the same numbers by construction. FastAPI and uvicorn are the optional extra ``web``
and are imported only by :func:`create_app` and the ``serve`` command.
"""

from __future__ import annotations

from typing import Any


def create_app() -> Any:
    """The FastAPI application (imports FastAPI now; a one-line error when the ``web`` extra is missing)."""
    from clustertwin.web.app import build_app

    return build_app()
