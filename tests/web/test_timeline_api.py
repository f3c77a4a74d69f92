"""``/api/train/timeline``: the predicted step as Chrome-trace JSON, taking ``train/estimate``'s options. Its
events are the file ``train estimate --timeline`` writes (the CLI run in-process, compared as parsed JSON), every
representative rank's events span the estimate's step time, and bad options get the estimate's one-line 422s."""

from __future__ import annotations

import itertools
import json
import warnings

import pytest
import yaml

pytest.importorskip("fastapi", reason="the web extra is not installed: pip install 'clustertwin[web]'")

with warnings.catch_warnings():  # starlette's note about its httpx transport
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient

from clustertwin.catalog import raw
from clustertwin.cli.main import main
from clustertwin.train.timeline import STREAMS
from clustertwin.web import create_app
from clustertwin.web.commands import params_of

SPAN_REL_TOL = 1e-3
"""The brief's bound: a rank's events end at the estimate's step time within 0.1%."""

# (CLI argv after ``train estimate``, API query): data-parallel only, 1F1B over four stages, interleaved 1F1B
CASES = [
    (["--gpus", "64", "-b", "256", "--tp", "2"], "gpus=64&global_batch=256&tp=2"),
    (["--model", "llama3-70b", "--gpus", "256", "-b", "512", "--tp", "8", "--pp", "4", "--zero", "1"],
     "model=llama3-70b&gpus=256&global_batch=512&tp=8&pp=4&zero=1"),
    (["--model", "llama3-70b", "--gpus", "256", "-b", "512", "--tp", "4", "--pp", "4", "--vpp", "2",
      "--tokens", "1e12", "--with-failures", "--trials", "50"],
     "model=llama3-70b&gpus=256&global_batch=512&tp=4&pp=4&vpp=2&tokens=1e12&with_failures=true&trials=50"),
]
IDS = ["dp", "1f1b", "interleaved"]


@pytest.fixture(scope="module")
def client() -> TestClient:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return TestClient(create_app())


def cli_timeline(tmp_path, capsys, argv: list[str]) -> dict:
    """The file ``clustertwin train estimate ARGV --timeline FILE`` writes, run in this process."""
    out = tmp_path / "timeline.json"
    assert main(["train", "estimate", *argv, "--timeline", str(out)]) == 0
    capsys.readouterr()
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("argv", "query"), CASES, ids=IDS)
def test_the_timeline_is_the_file_the_cli_writes(client, tmp_path, capsys, argv, query):
    r = client.get(f"/api/train/timeline?{query}")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == cli_timeline(tmp_path, capsys, argv)


def test_post_body_and_a_pasted_model_give_the_same_timeline(client):
    got = client.get("/api/train/timeline?model=llama3-8b&gpus=64&global_batch=256&tp=2&pp=2").json()
    body = {"model": "llama3-8b", "gpus": 64, "global_batch": 256, "tp": 2, "pp": 2}
    assert client.post("/api/train/timeline", json=body).json() == got
    pasted = {**body, "model": None, "model_yaml": yaml.safe_dump(raw("model", "llama3-8b"))}
    assert client.post("/api/train/timeline", json=pasted).json() == got


@pytest.mark.parametrize(("argv", "query"), CASES, ids=IDS)
def test_each_ranks_events_span_the_estimates_step(client, argv, query):
    """Against ``/api/train/estimate`` (the other endpoint): each rank's ``step`` span is the step time, its
    other events lie inside it and the last ends at it within 0.1%, and its compute stream never overlaps."""
    step_s = client.get(f"/api/train/estimate?{query}").json()["step_time_s"]
    trace = client.get(f"/api/train/timeline?{query}").json()
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    ranks = sorted({e["pid"] for e in events})
    pp = trace["otherData"]["layout"]["pp"]
    assert len(ranks) == min(pp, 3)  # first, second and last stage
    for rank in ranks:
        mine = [e for e in events if e["pid"] == rank]
        (span,) = [e for e in mine if e["cat"] == "step"]
        assert span["ts"] == 0 and span["dur"] / 1e6 == pytest.approx(step_s, rel=SPAN_REL_TOL)
        work = [e for e in mine if e["cat"] != "step"]
        ends_s = [(e["ts"] + e["dur"]) / 1e6 for e in work]
        assert min(e["ts"] for e in work) >= 0 and max(ends_s) <= step_s * (1 + SPAN_REL_TOL)
        assert max(ends_s) == pytest.approx(step_s, rel=SPAN_REL_TOL), rank
        compute = sorted((e["ts"], e["ts"] + e["dur"]) for e in work if e["cat"] == "compute")
        assert all(b[0] >= a[1] - 1e-3 for a, b in itertools.pairwise(compute))  # 1 ns: float rounding
        assert {e["cat"] for e in mine} <= set(STREAMS)


def test_the_timeline_takes_the_estimates_options(client):
    assert params_of("train/timeline") == params_of("train/estimate")
    schema = client.get("/openapi.json").json()["paths"]
    names = [[p["name"] for p in schema[f"/api/{path}"]["get"]["parameters"]]
             for path in ("train/timeline", "train/estimate")]
    assert names[0] == names[1] and "global_batch" in names[0]


@pytest.mark.parametrize(("query", "field", "message"), [
    ("global_batch=256&gpus=64&tp=3", None, "error: "),
    ("gpus=64", "global_batch", "error: global_batch: missing option"),
    ("global_batch=256&cluster=../../etc/passwd", "cluster", "is not a cluster catalog id"),
    ("global_batch=256&gpus=-8", "gpus", "--gpus"),
    ("global_batch=256&timeline=x.json", "timeline", "error: timeline: no such option"),
    ("global_batch=256&trace_out=traces", "trace_out", "error: trace_out: no such option"),
    ("global_batch=256&gpus=64&with_failures=true", None, "--with-failures needs a token budget (--tokens)"),
    ("global_batch=256&gpus=64&trials=100000&tokens=1e12", "trials", "at most 10,000 in the web app"),
])
def test_bad_options_get_one_line_422s(client, query, field, message):
    r = client.get(f"/api/train/timeline?{query}")
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"].startswith("error: ") and message in body["error"] and "\n" not in body["error"], body
    assert body["field"] == field
    assert body == client.get(f"/api/train/estimate?{query}").json()  # the estimate's refusal, word for word
