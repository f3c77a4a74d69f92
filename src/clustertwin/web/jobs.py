"""Background jobs: long work (the report, a layout search, the validation run) started by one request, followed
by others, and cancellable.

``POST /api/jobs/<command path>`` takes the options of ``/api/<command path>`` (a JSON body, or the query string
of the GET endpoint: a download link's own query) and answers 202 with the job's ``id``; ``GET /api/jobs/{id}``
gives its state (``queued``, ``running``, ``done``, ``failed``, ``cancelled``), its progress and, when done, the
result (the ``--json`` value) or, for a download, the address of the file (``/api/jobs/{id}/file``);
``DELETE /api/jobs/{id}`` cancels it.

Each job runs in its own worker process (:mod:`.job_worker`, started as a module: the server's threads are
never forked): cancelling terminates that process, so the work really stops, and a job past :data:`MAX_JOB_S`
is stopped the same way. Progress is the command's own where it reports one (the validation run counts its cases), else the steps done
(0 of 1 until the result is in). At most :data:`MAX_RUNNING` jobs run at once, :data:`MAX_ACTIVE` may be queued
or running (one more is a 429) and :data:`MAX_RETAINED` are kept (the oldest finished one is dropped first).
Job ids are :func:`secrets.token_urlsafe` values: a job is reachable only by whoever started it.
"""

from __future__ import annotations

import atexit
import json
import queue as queues
import secrets
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from clustertwin.errors import ClusterTwinError
from clustertwin.safety import one_line
from clustertwin.web.commands import COMMANDS, DOWNLOADS, command_of, params_of
from clustertwin.web.downloads import DownloadResult
from clustertwin.web.params import request_model
from clustertwin.web.replies import download_response, error_body

MAX_RUNNING = 2
"""Jobs that run at once (each a process; the rest wait, queued)."""
MAX_ACTIVE = 4
"""Jobs queued or running at once; one more is refused (429)."""
MAX_RETAINED = 16
"""Jobs kept with their results; a new one drops the oldest finished one beyond this."""
MAX_JOB_S = 600.0
"""Seconds a job may run before it is stopped (state ``failed``)."""
STOP_WAIT_S = 5.0
"""Seconds a terminated worker has to exit before it is killed."""
FINISHED = frozenset({"done", "failed", "cancelled"})


class JobError(ClusterTwinError):
    """A job request the store refuses: ``status`` is the HTTP status (404 unknown id, 429 too many jobs)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Job:
    """One job: what it runs, where it stands, what it gave."""

    id: str
    path: str
    options: dict[str, Any]
    created: float = field(default_factory=time.time)
    state: str = "queued"
    done: int = 0
    total: int | None = 1
    result: Any = None
    file: DownloadResult | None = None
    error: str | None = None
    started: float | None = None
    finished: float | None = None
    process: subprocess.Popen[str] | None = None
    """The worker (None while queued, or cancelled before it started)."""

    def status(self) -> dict[str, Any]:
        """The job as ``GET /api/jobs/{id}`` shows it."""
        fraction = 1.0 if self.state == "done" else (min(1.0, self.done / self.total) if self.total else None)
        out: dict[str, Any] = {"id": self.id, "command": self.path, "state": self.state,
                               "progress": {"fraction": fraction, "done": self.done, "total": self.total}}
        ends = self.finished or time.time()
        out["elapsed_s"] = round(ends - self.started, 3) if self.started else 0.0
        if self.error is not None:
            out["error"] = self.error
        if self.state == "done":
            if self.path in DOWNLOADS:
                assert self.file is not None
                out["file"] = f"/api/jobs/{self.id}/file"
                out["filename"] = self.file.filename
                out["warnings"] = list(self.file.warnings)
            else:
                out["result"] = self.result
        return out


def options_from_query(path: str, query: list[tuple[str, str]]) -> dict[str, Any]:
    """The options of ``path`` given as a query string (``a=1&compare=x&compare=y``) as a request body: a
    repeatable option a list, the others their last value (the request model converts and checks them)."""
    multiple = {p.name for p in params_of(path) if p.multiple}
    out: dict[str, Any] = {}
    for k, v in query:
        if k in multiple:
            out.setdefault(k, []).append(v)
        else:
            out[k] = v
    return out


class JobStore:
    """The jobs of one application, and the worker processes that run them (module docstring)."""

    def __init__(self, running: int = MAX_RUNNING, active: int = MAX_ACTIVE, retained: int = MAX_RETAINED,
                 max_job_s: float = MAX_JOB_S) -> None:
        self.running, self.active, self.retained, self.max_job_s = running, active, retained, max_job_s
        self.jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        _STORES.add(self)

    def submit(self, path: str, options: dict[str, Any]) -> Job:
        """A new job for the command at ``path`` with ``options`` validated by its request model (queued, or
        started at once); a 429 :class:`JobError` when :attr:`active` jobs are queued or running."""
        command_of(path)
        with self._lock:
            if sum(j.state not in FINISHED for j in self.jobs.values()) >= self.active:
                raise JobError(f"error: {self.active} jobs are queued or running already; wait for one to finish "
                               "or cancel one (DELETE /api/jobs/ID)", 429)
            job = Job(secrets.token_urlsafe(16), path, options)
            self.jobs[job.id] = job
            self._forget_old()
            self._start_queued()
        return job

    def get(self, job_id: str) -> Job:
        """The job ``job_id``, or a 404 one-line error."""
        job = self.jobs.get(job_id)
        if job is None:
            raise JobError(f"error: no job {one_line(job_id)[:40]!r} (finished jobs are kept while at most "
                           f"{self.retained} are)", 404)
        return job

    def cancel(self, job_id: str) -> Job:
        """Cancel ``job_id``: a queued job never starts, a running one's worker is terminated (and reaped) before
        this returns; a finished job stays as it is."""
        job = self.get(job_id)
        with self._lock:
            if job.state in FINISHED:
                return job
            process, job.state, job.finished = job.process, "cancelled", time.time()
        if process is not None:
            _stop(process)
        with self._lock:
            self._start_queued()
        return job

    def close(self) -> None:
        """Stop every running worker (the server is shutting down)."""
        for job in list(self.jobs.values()):
            if job.state not in FINISHED:
                self.cancel(job.id)

    # ------------------------------------------------------------------ inside the lock
    def _forget_old(self) -> None:
        finished = sorted((j for j in self.jobs.values() if j.state in FINISHED), key=lambda j: j.created)
        for j in finished[:max(0, len(self.jobs) - self.retained)]:
            del self.jobs[j.id]

    def _start_queued(self) -> None:
        running = sum(j.state == "running" for j in self.jobs.values())
        for job in sorted((j for j in self.jobs.values() if j.state == "queued"), key=lambda j: j.created):
            if running >= self.running:
                return
            job.process = subprocess.Popen(
                [sys.executable, "-m", "clustertwin.web.job_worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, encoding="utf-8")
            job.state, job.started = "running", time.time()
            threading.Thread(target=self._watch, args=(job,), daemon=True).start()
            running += 1

    # ------------------------------------------------------------------ the watcher thread of one job
    def _watch(self, job: Job) -> None:
        """Follow ``job``'s worker: its progress, its outcome, its end (a worker that ends silently failed)."""
        process = job.process
        assert process is not None and process.stdin is not None
        lines: queues.Queue[str] = queues.Queue()
        threading.Thread(target=_read_lines, args=(process, lines), daemon=True).start()
        try:
            process.stdin.write(json.dumps({"path": job.path, "options": job.options}))
            process.stdin.close()
        except OSError:  # the worker ended already (cancelled at once): its end is seen below
            pass
        outcome: dict[str, Any] | None = None
        while outcome is None and job.state == "running":
            if time.time() - (job.started or 0.0) > self.max_job_s:
                outcome = {"failed": f"error: the job ran past {self.max_job_s:g} s and was stopped"}
                break
            try:
                line = lines.get(timeout=0.2)
            except queues.Empty:
                continue
            if not line:  # the end of its output, without an answer
                outcome = {"failed": f"internal error: the worker ended (exit code {process.wait()})"}
                break
            message = json.loads(line)
            if "progress" in message:
                job.done, job.total = message["progress"]
            else:
                outcome = message
        _stop(process, grace_s=1.0 if outcome is not None and "done" in outcome else 0.0)
        with self._lock:
            if outcome is not None and job.state == "running":
                if "done" in outcome:
                    value = outcome["done"]
                    if job.path in DOWNLOADS:
                        job.file = DownloadResult(value["text"], value["filename"], tuple(value["warnings"]))
                    else:
                        job.result = value
                    job.done, job.state = job.total or job.done, "done"
                else:
                    job.error, job.state = outcome["failed"], "failed"
                job.finished = time.time()
            self._start_queued()


_STORES: weakref.WeakSet[JobStore] = weakref.WeakSet()
"""Every live store, so that no worker outlives the server (:func:`_close_all` at exit)."""


@atexit.register
def _close_all() -> None:
    for store in list(_STORES):
        store.close()


def _read_lines(process: subprocess.Popen[str], lines: queues.Queue[str]) -> None:
    """Every line the worker writes, then ``""`` at its end."""
    assert process.stdout is not None
    for line in process.stdout:
        lines.put(line)
    lines.put("")


def _stop(process: subprocess.Popen[str], grace_s: float = 0.0) -> None:
    """End ``process`` for good: give it ``grace_s`` to exit by itself, then terminate it (SIGTERM), then kill
    it after :data:`STOP_WAIT_S`; reap it."""
    try:
        process.wait(grace_s)
        return
    except subprocess.TimeoutExpired:
        process.terminate()
    try:
        process.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# ---------------------------------------------------------------------------------------------- the routes
def register(app: FastAPI) -> JobStore:
    """The job routes of ``app`` (module docstring), over a new :class:`JobStore` (also ``app.state.jobs``)."""
    store = JobStore()
    app.state.jobs = store
    paths = [*COMMANDS, *DOWNLOADS]

    def failed(e: JobError) -> Response:
        return error_body(str(e), "id" if e.status == 404 else None, e.status)

    def starter(path: str) -> Any:
        async def start(request: Request) -> Response:
            body = await request.body()
            if body.strip():
                try:
                    data = json.loads(body)
                except ValueError as e:
                    return error_body(f"error: the request body is not JSON ({one_line(e)[:80]})")
            else:
                data = options_from_query(path, list(request.query_params.multi_items()))
            if not isinstance(data, dict):
                return error_body("error: the request body must be a JSON object of options")
            try:
                options = request_model(path).model_validate(data)
            except ValidationError as e:
                raise RequestValidationError(e.errors()) from None
            try:
                job = await run_in_threadpool(store.submit, path, options.model_dump())
            except JobError as e:
                return failed(e)
            return JSONResponse(job.status(), status_code=202, headers={"location": f"/api/jobs/{job.id}"})

        start.__name__ = f"job_{path.replace('/', '_')}"
        return start

    for path in paths:
        app.post(f"/api/jobs/{path}", tags=["jobs"], status_code=202,
                 summary=f"Start /api/{path} as a background job (the same options, as a JSON body or the "
                         "query string); answers its id.")(starter(path))

    @app.post("/api/jobs/{path:path}", include_in_schema=False)
    def no_such_command(path: str) -> Response:
        return error_body(f"error: no command {one_line(path)[:60]!r} to run as a job; commands: "
                          f"{', '.join(paths)}", "path", 404)

    @app.get("/api/jobs/{job_id}", tags=["jobs"], summary="A job's state, progress and, when done, its result.")
    def status(job_id: str) -> Response:
        try:
            return JSONResponse(store.get(job_id).status())
        except JobError as e:
            return failed(e)

    @app.get("/api/jobs/{job_id}/file", tags=["jobs"], summary="The file of a finished download job.",
             response_class=Response)
    def job_file(job_id: str) -> Response:
        try:
            job = store.get(job_id)
        except JobError as e:
            return failed(e)
        if job.path not in DOWNLOADS:
            return error_body(f"error: job {job_id[:40]!r} ({job.path}) gives JSON, not a file: GET /api/jobs/ID",
                              "id", 404)
        if job.state != "done" or job.file is None:
            return error_body(f"error: job {job_id[:40]!r} is {job.state}; its file comes when it is done",
                              "id", 409)
        return download_response(job.path, job.file)

    @app.delete("/api/jobs/{job_id}", tags=["jobs"], summary="Cancel a job (its worker process is stopped).")
    def cancel(job_id: str) -> Response:
        try:
            return JSONResponse(store.cancel(job_id).status())
        except JobError as e:
            return failed(e)

    return store
