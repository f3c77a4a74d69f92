"""The worker process of one background job (:mod:`clustertwin.web.jobs`): ``python -m
clustertwin.web.job_worker`` reads ``{"path": ..., "options": {...}}`` (JSON) on stdin, runs that command as the
API does and writes JSON lines on stdout: ``{"progress": [done, total]}`` while it runs (the command's own
progress, :data:`~clustertwin.web.commands.JOB_PROGRESS`), then one ``{"done": value}`` (a download:
``{"done": {"text", "filename", "warnings"}}``) or ``{"failed": "one line"}``.

A process of its own per job, started as a module (not forked, and never re-importing the server's main
script), so cancelling it is terminating it. What the command itself prints goes to stderr, never into the
answer.
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from clustertwin.errors import ClusterTwinError
from clustertwin.safety import one_line


def run(path: str, options: dict[str, Any], out: IO[str]) -> None:
    """Run the command at ``path`` for ``options`` (validated again by its request model), reporting on ``out``."""
    from clustertwin.web.commands import DOWNLOADS, JOB_PROGRESS
    from clustertwin.web.downloads import download
    from clustertwin.web.params import request_model
    from clustertwin.web.replies import run_command

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message, separators=(",", ":")) + "\n")
        out.flush()

    JOB_PROGRESS.set(lambda done, total: send({"progress": [done, total]}))
    try:
        model = request_model(path).model_validate(options)
        if path in DOWNLOADS:
            got = download(path, model)
            send({"done": {"text": got.text, "filename": got.filename, "warnings": list(got.warnings)}})
        else:
            send({"done": run_command(path, model)})
    except ClusterTwinError as e:
        send({"failed": f"error: {one_line(e)}"})
    except Exception as e:  # an internal failure: one line, no traceback
        send({"failed": f"internal error: {type(e).__name__}: {one_line(e)[:300]}"})


def main() -> None:
    request = json.loads(sys.stdin.read())
    answer, sys.stdout = sys.stdout, sys.stderr  # the command's own printing stays out of the answer
    run(str(request["path"]), dict(request["options"]), answer)


if __name__ == "__main__":
    main()
