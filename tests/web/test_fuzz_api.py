"""Property-based tests of the API from its own OpenAPI schema (schemathesis, seeded, bounded): whatever the
options, no server error, every refusal is a 422 with one ``error:`` line, and no request echoes markup back
as markup (JSON only, never sniffed as HTML); plus the hostile-string corpus of the deploy and report tests in every string option."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed: pip install 'clustertwin[web]'")
schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (the web extra)")

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient

from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from clustertwin.web import create_app  # noqa: E402
from clustertwin.web.commands import params_of  # noqa: E402

APP = create_app()
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP)
FUZZED = SCHEMA.include(method="GET", path_regex=r"^/api/(train/estimate|plan)$")
"""The quick commands (an estimate is milliseconds); search, scale, explain and validate are driven by
the hostile-string test below and by their own equality tests."""
HOSTILE = ["../../etc/passwd", "/etc/passwd", "<script>alert(1)</script>", "\"'><img src=x onerror=alert(1)>",
           "$(touch /tmp/PWNED)", "`id`", "a\nb", "\u2028", "{{7*7}}", "${7*7}", "%00", "x" * 2000, "", " ",
           "-1", "nan", "1e999", "NaN", "0x10", "１２", "ref-1k-h100\n", "llama3-8b; rm -rf /"]


def _one_line_error(response) -> None:
    if response.status_code == 422:
        body = response.json()
        assert body["error"].startswith("error: ") and "\n" not in body["error"], body


@FUZZED.parametrize()
@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
def test_no_server_error_from_schema_examples(case):
    response = case.call_and_validate(checks=[not_a_server_error])
    assert response.status_code < 500, (case.path, case.query, response.text[:300])
    _one_line_error(response)


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(APP)


@pytest.mark.parametrize("path", ["train/estimate", "train/timeline", "train/search", "train/scale", "plan", "infer/estimate",
                                  "infer/size", "explain"])
def test_hostile_strings_in_every_string_option(client, path):
    base = {"train/estimate": {"global_batch": 8, "gpus": 8}, "train/timeline": {"global_batch": 8, "gpus": 8},
            "train/search": {"global_batch": 8, "gpus": 8},
            "train/scale": {"global_batch": 8, "max_gpus": 8}, "infer/size": {"slo_ttft_ms": 500},
            "explain": {"global_batch": 8, "gpus": 8, "tp": 8}}.get(path, {})
    strings = [p.name for p in params_of(path) if p.kind == "str"]
    assert strings
    for name in strings:
        for value in HOSTILE:
            r = client.get(f"/api/{path}", params={**base, name: value})
            assert r.status_code in (200, 422), (path, name, value, r.text[:300])
            _one_line_error(r)
            # data, never markup: JSON that a browser may not sniff as HTML, and nothing of a file
            assert r.headers["content-type"] == "application/json" and r.headers["x-content-type-options"] == "nosniff"
            assert "root:x:" not in r.text


@pytest.mark.parametrize("kind", ["sbatch", "k8s"])
def test_hostile_strings_in_every_deploy_option_of_the_downloads(client, kind):
    """The options the downloads add to train estimate's: a 200 is the file (never sniffed as HTML, nothing of
    a local file in it), a refusal one ``error:`` line; the layout options are driven above."""
    base = {"model": "llama3-8b", "global_batch": 8, "gpus": 8}
    estimate = {p.name for p in params_of("train/estimate")}
    strings = [p.name for p in params_of(f"download/{kind}") if p.kind == "str" and p.name not in estimate]
    assert {"job_name", "script", "checkpoint_dir"} <= set(strings)
    for name in strings:
        for value in HOSTILE:
            r = client.get(f"/api/download/{kind}", params={**base, name: value})
            assert r.status_code in (200, 422), (kind, name, value, r.text[:300])
            _one_line_error(r)
            assert r.headers["x-content-type-options"] == "nosniff" and "root:x:" not in r.text
            if r.status_code == 200:
                assert r.headers["content-type"].split(";")[0] in ("text/x-shellscript", "application/yaml")
                assert r.headers["content-disposition"].startswith('attachment; filename="')
