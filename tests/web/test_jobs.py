"""Background jobs (``/api/jobs/...``): a job gives what the direct endpoint gives, reports its progress, is
cancelled for real (its worker process ends), and the store's caps and unknown ids are one-line errors."""

from __future__ import annotations

import signal
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed: pip install 'clustertwin[web]'")

with warnings.catch_warnings():  # starlette's note about its httpx transport
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient

from clustertwin.web import create_app
from clustertwin.web.jobs import FINISHED, JobStore

WAIT_S = 180.0
"""Longest a test waits for a job (a worker process starts, imports the twin, runs)."""


@pytest.fixture
def client() -> Iterator[TestClient]:
    """A fresh application (its own job store) per test, its workers stopped afterwards."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        c = TestClient(create_app())
    yield c
    store(c).close()


def store(c: TestClient) -> JobStore:
    return c.app.state.jobs


def wait(c: TestClient, job_id: str, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll ``GET /api/jobs/{id}`` until ``until(status)``; the statuses seen in ``wait.seen``."""
    t0 = time.monotonic()
    while True:
        r = c.get(f"/api/jobs/{job_id}")
        assert r.status_code == 200, r.text
        s = r.json()
        wait.seen.append(s)
        if until(s):
            return s
        assert time.monotonic() - t0 < WAIT_S, s
        time.sleep(0.1)


wait.seen = []  # type: ignore[attr-defined]


def finished(s: dict[str, Any]) -> bool:
    return s["state"] in FINISHED


def test_a_job_runs_to_done_with_progress_and_gives_the_direct_apis_result(client):
    r = client.post("/api/jobs/validate", json={"kind": ["infer"]})
    assert r.status_code == 202, r.text
    job = r.json()
    assert r.headers["location"] == f"/api/jobs/{job['id']}" and job["state"] in ("queued", "running")
    assert len(job["id"]) >= 20  # secrets.token_urlsafe(16): 22 characters
    wait.seen.clear()
    s = wait(client, job["id"], finished)
    assert s["state"] == "done", s
    assert s["result"] == client.get("/api/validate?kind=infer").json()
    total = s["progress"]["total"]
    assert total == len(s["result"]["cases"]) and s["progress"] == {"fraction": 1.0, "done": total, "total": total}
    fractions = [x["progress"]["fraction"] for x in wait.seen if x["progress"]["fraction"] is not None]
    assert fractions == sorted(fractions)  # progress only grows
    assert store(client).get(job["id"]).process.poll() == 0  # the worker ended by itself


def test_the_report_job_gives_the_file_of_the_report_download(client):
    """The page's report link is ``/api/download/report?...``; the same query string starts its job."""
    query = "model=llama3-8b&global_batch=1024&tp=2&trials=200"
    r = client.post(f"/api/jobs/download/report?{query}")
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert client.get(f"/api/jobs/{job_id}/file").status_code in (409, 200)
    s = wait(client, job_id, finished)
    assert s["state"] == "done", s
    assert s["file"] == f"/api/jobs/{job_id}/file" and s["filename"] == "report-ref-1k-h100-llama3-8b.html"
    assert s["progress"]["fraction"] == 1.0 and "result" not in s
    got, direct = client.get(s["file"]), client.get(f"/api/download/report?{query}")
    assert got.status_code == 200 and got.content == direct.content
    for header in ("content-type", "content-disposition"):
        assert got.headers[header] == direct.headers[header]
    assert s["warnings"] == [w for w in direct.headers.get("x-clustertwin-warnings", "").split("; ") if w]


def test_cancel_stops_a_long_job_and_its_worker(client):
    job_id = client.post("/api/jobs/validate", json={}).json()["id"]  # every shipped case: seconds of work
    s = wait(client, job_id, lambda s: s["progress"]["done"] > 0 or finished(s))
    assert s["state"] == "running" and s["progress"]["total"] > s["progress"]["done"] > 0
    r = client.delete(f"/api/jobs/{job_id}")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    worker = store(client).get(job_id).process
    assert worker.poll() == -signal.SIGTERM  # terminated, and reaped
    done = r.json()["progress"]["done"]
    time.sleep(1.0)
    after = client.get(f"/api/jobs/{job_id}").json()
    assert after["state"] == "cancelled" and after["progress"]["done"] == done and "result" not in after
    assert client.delete(f"/api/jobs/{job_id}").json()["state"] == "cancelled"  # cancelling again: as it is


def test_jobs_beyond_the_caps_wait_or_are_refused(client):
    jobs = store(client)
    jobs.running, jobs.active = 1, 2
    first = client.post("/api/jobs/validate", json={}).json()
    second = client.post("/api/jobs/validate", json={"kind": ["infer"]}).json()
    assert second["state"] == "queued" and store(client).get(second["id"]).process is None
    r = client.post("/api/jobs/plan", json={})
    assert r.status_code == 429 and "\n" not in r.json()["error"]
    assert r.json()["error"].startswith("error: 2 jobs are queued or running already")
    assert client.delete(f"/api/jobs/{second['id']}").json()["state"] == "cancelled"  # never started
    assert store(client).get(second["id"]).process is None
    client.delete(f"/api/jobs/{first['id']}")
    assert client.post("/api/jobs/plan", json={}).status_code == 202  # room again


def test_finished_jobs_beyond_the_retained_cap_are_forgotten(client):
    store(client).retained = 1
    first = client.post("/api/jobs/plan?cluster=dgx-a100-1k").json()["id"]
    assert wait(client, first, finished)["result"] == client.get("/api/plan?cluster=dgx-a100-1k").json()
    second = client.post("/api/jobs/plan", json={"cluster": "ref-1k-h100"}).json()["id"]
    assert client.get(f"/api/jobs/{first}").status_code == 404
    assert wait(client, second, finished)["state"] == "done"


def test_unknown_ids_and_commands_are_404_and_bad_options_422_on_one_line(client):
    for method, url in (("get", "/api/jobs/nope"), ("delete", "/api/jobs/nope"), ("get", "/api/jobs/nope/file"),
                        ("post", "/api/jobs/train/nope")):
        r = getattr(client, method)(url)
        assert r.status_code == 404 and r.json()["error"].startswith("error: no ") and "\n" not in r.text, url
    direct = client.get("/api/train/search?global_batch=256&gpus=0")
    r = client.post("/api/jobs/train/search", json={"global_batch": 256, "gpus": 0})
    assert r.status_code == 422 and r.json() == direct.json()
    r = client.post("/api/jobs/plan", json={"cluster": "../../etc/passwd"})
    assert r.status_code == 422 and r.json()["field"] == "cluster"
    assert client.post("/api/jobs/plan", content=b"[1]", headers={"content-type": "application/json"}).status_code == 422
    assert not store(client).jobs  # nothing refused was started


def test_a_failing_job_is_failed_with_the_cli_line_and_a_json_job_has_no_file(client):
    bad = client.post("/api/jobs/train/estimate", json={"global_batch": 256, "gpus": 64, "tp": 3}).json()["id"]
    s = wait(client, bad, finished)
    direct = client.get("/api/train/estimate?global_batch=256&gpus=64&tp=3")
    assert s["state"] == "failed" and s["error"] == direct.json()["error"] and "result" not in s
    r = client.get(f"/api/jobs/{bad}/file")
    assert r.status_code == 404 and "gives JSON, not a file" in r.json()["error"]
