"""The web API is the CLI's ``--json``: the same options under the same names, the same numbers (asserted
against the CLI run in-process), the CLI's one-line errors as 422, and safe by construction (catalog ids only,
pasted YAML bounded and read with the safe loader, a Content-Security-Policy on every response)."""

from __future__ import annotations

import json
import warnings

import pytest
import yaml

pytest.importorskip("fastapi", reason="the web extra is not installed: pip install 'clustertwin[web]'")

with warnings.catch_warnings():  # starlette's note about its httpx transport
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient

from clustertwin.catalog import raw
from clustertwin.cli.layout_options import LAYOUT_PARAMS
from clustertwin.cli.main import main
from clustertwin.web import create_app
from clustertwin.web.commands import COMMANDS, params_of
from clustertwin.web.params import MAX_YAML_BYTES


@pytest.fixture(scope="module")
def client() -> TestClient:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return TestClient(create_app())


def cli_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    """What ``clustertwin ARGV --json`` prints, run in this process."""
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# (CLI argv, API path, API query): the example first
SAME = [
    (["train", "estimate", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--tp", "2"],
     "train/estimate", "model=llama3-8b&gpus=64&global_batch=256&tp=2"),
    (["train", "estimate", "-b", "512", "--gpus", "128", "--tp", "4", "--pp", "2", "--recompute", "selective",
      "--no-sp", "--tokens", "1e12", "--usd-per-gpu-hour", "2.5"],
     "train/estimate", "global_batch=512&gpus=128&tp=4&pp=2&recompute=selective&sp=false&tokens=1e12"
                       "&usd_per_gpu_hour=2.5"),
    (["train", "search", "--model", "llama3-70b", "--gpus", "256", "-b", "512", "--top", "3"],
     "train/search", "model=llama3-70b&gpus=256&global_batch=512&top=3"),
    (["train", "scale", "--gpus", "128", "-b", "256"], "train/scale", "max_gpus=128&global_batch=256"),
    (["plan", "--cluster", "ref-1k-h100", "--compare", "dgx-a100-1k", "--fabric", "roce-400g"], "plan",
     "cluster=ref-1k-h100&compare=dgx-a100-1k&fabric=roce-400g"),
    (["infer", "estimate", "--model", "llama3-70b", "--tp", "4", "--concurrency", "32"], "infer/estimate",
     "model=llama3-70b&tp=4&concurrency=32"),
    (["infer", "size", "--request-rate", "10", "--input-len", "512", "--output-len", "128", "--slo-ttft-ms", "500",
      "--slo-tpot-ms", "50", "--no-verify"], "infer/size",
     "request_rate=10&input_len=512&output_len=128&slo_ttft_ms=500&slo_tpot_ms=50&verify=false"),
    (["explain", "--gpus", "64", "-b", "256", "--tp", "2"], "explain", "gpus=64&global_batch=256&tp=2"),
    (["validate", "--kind", "infer"], "validate", "kind=infer"),
]


@pytest.mark.parametrize(("argv", "path", "query"), SAME, ids=[" ".join(a[:2]) for a, _, _ in SAME])
def test_api_numbers_equal_the_cli_json(client, capsys, argv, path, query):
    r = client.get(f"/api/{path}?{query}")
    assert r.status_code == 200, r.text
    assert r.json() == cli_json(capsys, argv)


def test_post_body_equals_get_query(client):
    q = client.get("/api/train/estimate?gpus=64&global_batch=256&tp=2&sp=true").json()
    b = client.post("/api/train/estimate", json={"gpus": 64, "global_batch": 256, "tp": 2, "sp": True}).json()
    assert q == b and q["gpus"] == 64 and q["layout"]["tp"] == 2


def test_every_cli_option_is_an_api_parameter():
    """The parameters come from the click commands: every layout option of train estimate is there by name."""
    names = {p.name for p in params_of("train/estimate")}
    assert set(LAYOUT_PARAMS) <= names
    assert {"global_batch", "with_failures", "usd_per_gpu_hour"} <= names
    assert "calibration" not in names and "json_out" not in names  # files and --json are not web options
    assert next(p for p in params_of("train/estimate") if p.name == "global_batch").required


@pytest.mark.parametrize("field", ["cluster", "model"])
def test_a_path_like_id_is_refused_naming_the_field(client, field):
    for method in ("get", "post"):
        args = {"global_batch": 256, field: "../../etc/passwd"}
        r = client.get("/api/train/estimate", params=args) if method == "get" else \
            client.post("/api/train/estimate", json=args)
        assert r.status_code == 422
        body = r.json()
        assert body["field"] == field and f"--{field}" in body["error"] and "catalog id" in body["error"]
        assert "root:" not in r.text and "\n" not in body["error"]


def test_plan_refuses_a_path_for_its_argument_and_its_compares(client):
    for query in ("cluster=/etc/passwd", "compare=../../etc/passwd", "fabric=/etc/hosts"):
        r = client.get(f"/api/plan?{query}")
        assert r.status_code == 422 and r.json()["field"] == query.split("=")[0], r.text
        assert "localhost" not in r.text and "root:" not in r.text


@pytest.mark.parametrize(("query", "field", "message"), [
    ("global_batch=256&gpus=0", "gpus", "--gpus must be >= 1 (got 0)"),
    ("global_batch=256&tp=-2", "tp", "--tp must be >= 1"),
    ("global_batch=256&tokens=nan", "tokens", None),
    ("global_batch=256&tokens=1e400", "tokens", None),
    ("global_batch=256&gpus=99999999999", "gpus", "--gpus must be at most"),
    ("global_batch=256&recompute=ful", "recompute", "did you mean 'full'"),
    ("global_batch=256&trials=100000000&tokens=1e12&with_failures=true", "trials", "in the web app"),
    ("gpus=64", "global_batch", "missing option"),
    ("global_batch=256&tpp=2", "tpp", "no such option"),
    ("global_batch=256&placement=a%00b", "placement", "control characters"),
])
def test_bad_options_get_one_line_422s(client, query, field, message):
    r = client.get(f"/api/train/estimate?{query}")
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["field"] == field and body["error"].startswith("error: ") and "\n" not in body["error"]
    if message:
        assert message in body["error"]


def test_model_errors_are_the_cli_line(client, capsys):
    r = client.get("/api/train/estimate?global_batch=256&gpus=64&tp=3")
    assert r.status_code == 422
    assert main(["train", "estimate", "-b", "256", "--gpus", "64", "--tp", "3"]) == 2
    assert r.json()["error"] == capsys.readouterr().err.strip()


def test_pasted_model_yaml_gives_the_catalog_numbers(client):
    text = yaml.safe_dump(raw("model", "llama3-8b"))
    pasted = client.post("/api/train/estimate", json={"global_batch": 256, "gpus": 64, "model_yaml": text})
    listed = client.get("/api/train/estimate?global_batch=256&gpus=64&model=llama3-8b")
    assert pasted.status_code == 200, pasted.text
    assert pasted.json()["step_time_s"] == listed.json()["step_time_s"]


def test_pasted_yaml_is_bounded_and_read_safely(client):
    big = client.post("/api/train/estimate", json={"global_batch": 8, "model_yaml": "a: " + "x" * MAX_YAML_BYTES})
    assert big.status_code in (413, 422) and ("bytes" in big.text or "characters" in big.text)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    for text in (bomb, "!!python/object/apply:os.system ['echo PWNED']", "name: [unclosed", "layers: -3\n"):
        r = client.post("/api/train/estimate", json={"global_batch": 8, "model_yaml": text})
        assert r.status_code == 422, (text, r.text)
        err = r.json()["error"]
        assert "\n" not in err and "clustertwin-web-" not in err and "/tmp" not in err and "model.yaml" not in err


def test_every_response_carries_the_security_headers(client):
    for url in ("/train", "/api/plan", "/api/plan?cluster=nope", "/static/app.js", "/docs", "/openapi.json"):
        r = client.get(url)
        csp = r.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp, url
        assert r.headers["x-content-type-options"] == "nosniff"


def test_hostile_strings_in_the_page_url_are_escaped(client):
    hostile = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
    r = client.get("/train", params={"placement": hostile, "pipeline_layout": "</script><script>x()</script>"})
    assert r.status_code == 200
    assert "<script>alert" not in r.text and "<img src=x" not in r.text and "</script><script>x()" not in r.text
    assert "&lt;script&gt;alert(1)" in r.text


def test_static_files_are_served_by_bare_name_only(client):
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/plotly.js").text.startswith("/**")
    for name in ("..%2Fapp.py", "app.py", "%2Fetc%2Fpasswd"):
        assert client.get(f"/static/{name}").status_code == 404


def test_openapi_lists_every_command_with_the_cli_options(client):
    schema = client.get("/openapi.json").json()
    for path in COMMANDS:
        assert f"/api/{path}" in schema["paths"]
    params = {p["name"]: p for p in schema["paths"]["/api/train/estimate"]["get"]["parameters"]}
    assert params["global_batch"]["required"] and params["gpus"]["schema"]["anyOf"][0]["minimum"] == 1
    assert "llama3-405b" in params["model"]["schema"]["anyOf"][0]["enum"]
    assert params["gpus"]["schema"]["x-cli-option"] == "--gpus"
    docs = client.get("/docs").text
    assert "/api/train/estimate" in docs and "cdn" not in docs.lower()


def test_big_bodies_are_refused():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        c = TestClient(create_app())
    r = c.post("/api/plan", content=b"{" + b" " * (2 << 20) + b"}", headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_pages_have_a_labelled_control_for_every_option(client):
    for page, path in (("train", "train/estimate"), ("plan", "plan"), ("infer", "infer/size"),
                       ("explain", "explain"), ("validate", "validate")):
        html = client.get(f"/{page}").text
        for p in params_of(path):
            assert f'<label for="f-{p.name}"' in html and f'id="f-{p.name}"' in html, (page, p.name)


def test_page_state_comes_from_the_query_string(client):
    html = client.get("/train?gpus=512&global_batch=1024&model=llama3-70b&tp=8").text
    assert 'name="gpus" value="512"' in html and '<option value="llama3-70b" selected>' in html


@pytest.mark.parametrize(("host", "ok"), [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                          ("127.8.9.10", True), ("0.0.0.0", False), ("192.168.1.4", False),
                                          ("example.com", False), ("::", False)])
def test_loopback_hosts(host, ok):
    from clustertwin.cli.serve_cmd import is_loopback

    assert is_loopback(host) is ok


def test_serve_refuses_a_remote_host_without_allow_remote(capsys):
    assert main(["serve", "--host", "0.0.0.0", "--port", "8765"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-remote" in err and "0.0.0.0" in err


def test_catalog_specs_download_as_yaml_and_only_catalog_ids(client):
    r = client.get("/api/spec/model/llama3-8b")
    assert r.status_code == 200 and yaml.safe_load(r.text) == raw("model", "llama3-8b")
    assert client.get("/api/spec/model/..%2F..%2Fetc%2Fpasswd").status_code in (404, 422)
    assert client.get("/api/spec/passwd/llama3-8b").status_code == 422
