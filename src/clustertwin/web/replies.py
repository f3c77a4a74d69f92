"""The replies the API and its background jobs share (:mod:`.app`, :mod:`.jobs`, :mod:`.job_worker`): the
one-line error body, a command's ``--json`` value, and a download as an attachment."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from clustertwin.cli.common import jsonable
from clustertwin.safety import one_line
from clustertwin.web.commands import COMMANDS
from clustertwin.web.downloads import FORMATS, DownloadResult, run_with_options, warnings_header


def error_body(message: str, field: str | None = None, status: int = 422) -> JSONResponse:
    """The one-line error reply: the CLI's message and the option it names (422 unless ``status``)."""
    return JSONResponse({"error": one_line(message), "field": field}, status_code=status)


def run_command(path: str, options: BaseModel) -> Any:
    """The ``--json`` value of the command at ``path`` for the validated ``options``."""
    return run_with_options(path, options, lambda args: jsonable(COMMANDS[path].run(args)))


def download_response(path: str, got: DownloadResult) -> Response:
    """The file ``got`` of the download at ``path`` as an attachment, the CLI's warnings in
    ``x-clustertwin-warnings`` (also the reply of a finished download job)."""
    headers = {"content-disposition": f'attachment; filename="{got.filename}"'}
    if got.warnings:
        headers["x-clustertwin-warnings"] = warnings_header(got.warnings)
    return Response(got.text.encode("utf-8"), media_type=f"{FORMATS[path].media_type}; charset=utf-8",
                    headers=headers)
