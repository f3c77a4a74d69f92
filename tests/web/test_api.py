"""The web API is the CLI's ``--json``: the same options under the same names, the same numbers (asserted
against the CLI run in-process), the CLI's one-line errors as 422, and safe by construction (catalog ids only,
pasted YAML bounded and read with the safe loader, a Content-Security-Policy on every response)."""

from __future__ import annotations

import json
import re
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
from tests.conftest import run_cli


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
    (["plan", "--node", "hgx-h800", "--nodes", "256", "--gpu", "h100-sxm", "--network-fabric", "ib-ndr", "--topology",
      "fat-tree", "--tiers", "3", "--oversubscription", "1", "--oversubscription", "2", "--storage", "weka",
      "--compare", "deepseek-v3-2048-h800"], "plan",
     "node=hgx-h800&nodes=256&gpu=h100-sxm&network_fabric=ib-ndr&topology=fat-tree&tiers=3&oversubscription=1"
     "&oversubscription=2&storage=weka&compare=deepseek-v3-2048-h800"),
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


def test_the_plan_page_builds_a_cluster_from_catalog_parts(client):
    """The parts options of ``plan`` are the Plan page's controls: catalog ids and the topologies as selects."""
    html = client.get("/plan?node=dgx-b300&topology=torus3d").text
    assert '<select id="f-node"' in html and '<option value="dgx-b300" selected>' in html
    assert '<select id="f-network_fabric"' in html and '<select id="f-storage"' in html
    assert '<option value="torus3d" selected>' in html and '<option value="dragonfly+">' in html
    for query, field, message in (("node=dgx-h10", "node", "did you mean 'dgx-h100'"),
                                  ("node=dgx-h100&topology=fat-tre", "topology", "did you mean 'fat-tree'"),
                                  ("nodes=4", None, "--nodes: the parts options build a cluster"),
                                  ("node=dgx-h100&tiers=4", None, "--tiers: ")):
        r = client.get(f"/api/plan?{query}")
        assert r.status_code == 422 and r.json()["field"] == field and message in r.json()["error"], r.text


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


# ------------------------------------------------------------------------------------------ downloads
# (API download, query, CLI argv): the same options both ways
DOWNLOAD_SAME = [
    ("sbatch", "model=llama3-8b&gpus=64&global_batch=256&tp=2",
     ["deploy", "slurm", "--model", "llama3-8b", "--gpus", "64", "-b", "256", "--tp", "2"]),
    ("sbatch", "model=llama3-70b&gpus=128&global_batch=512&tp=8&pp=2&job_name=big-run&partition=gpu"
               "&script_args=--lr&script_args=3e-4",
     ["deploy", "slurm", "--model", "llama3-70b", "--gpus", "128", "-b", "512", "--tp", "8", "--pp", "2",
      "--job-name", "big-run", "--partition", "gpu", "--", "--lr", "3e-4"]),
    ("k8s", "model=llama3-8b&gpus=64&global_batch=256&tp=2",
     ["deploy", "k8s", "--model", "llama3-8b", "--gpus", "64", "-b", "256", "--tp", "2"]),
    ("k8s", "model=llama3-8b&gpus=16&global_batch=64&kind=trainjob&namespace=ml&checkpoint_pvc=ckpt",
     ["deploy", "k8s", "--model", "llama3-8b", "--gpus", "16", "-b", "64", "--kind", "trainjob",
      "--namespace", "ml", "--checkpoint-pvc", "ckpt"]),
]
MEDIA = {"sbatch": "text/x-shellscript", "k8s": "application/yaml", "report": "text/html"}


def _attachment(r) -> str:
    """The file name of an attachment reply (asserting the header is a safe one)."""
    disposition = r.headers["content-disposition"]
    assert re.fullmatch(r'attachment; filename="[A-Za-z0-9][A-Za-z0-9._-]*"', disposition), disposition
    return disposition.split('"')[1]


@pytest.mark.parametrize(("kind", "query", "argv"), DOWNLOAD_SAME, ids=[f"{k}-{i}" for i, (k, _, _) in
                                                                         enumerate(DOWNLOAD_SAME)])
def test_downloads_are_the_cli_output_byte_for_byte(client, kind, query, argv):
    r = client.get(f"/api/download/{kind}?{query}")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith(MEDIA[kind])
    assert _attachment(r).endswith(".sbatch" if kind == "sbatch" else ".yaml")
    cli = run_cli(*argv)
    assert cli.code == 0, cli.stderr
    assert r.content == cli.stdout.encode("utf-8")  # no timestamp in either: compared whole
    cli_warnings = [line.removeprefix("warning: ") for line in cli.stderr.splitlines() if line.startswith("warning: ")]
    assert r.headers.get("x-clustertwin-warnings", "") == "; ".join(cli_warnings)
    if kind == "k8s":
        assert all(doc["kind"] for doc in yaml.safe_load_all(r.text))


def test_the_report_download_is_the_file_the_cli_writes(client, tmp_path):
    """The report holds the version (``clustertwin 0.1.0``) but no timestamp: the two files are compared whole."""
    r = client.get("/api/download/report?model=llama3-8b&global_batch=1024&tp=2&trials=200")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert _attachment(r) == "report-ref-1k-h100-llama3-8b.html"
    out = tmp_path / "report.html"
    cli = run_cli("report", "--model", "llama3-8b", "-b", "1024", "--tp", "2", "--trials", "200", "-o", str(out))
    assert cli.code == 0, cli.stderr
    assert r.content == out.read_bytes() and r.text.lstrip().lower().startswith("<!doctype html")
    assert str(tmp_path) not in r.text and "clustertwin-web-" not in r.text


def test_a_pasted_model_gives_the_catalog_models_file(client):
    text = yaml.safe_dump(raw("model", "llama3-8b"))
    pasted = client.post("/api/download/sbatch", json={"global_batch": 256, "gpus": 64, "tp": 2, "model_yaml": text})
    listed = client.get("/api/download/sbatch?model=llama3-8b&global_batch=256&gpus=64&tp=2")
    assert pasted.status_code == 200, pasted.text
    assert pasted.content == listed.content and "clustertwin-web-" not in pasted.text
    assert client.post("/api/download/k8s", json={"global_batch": 256}).status_code == 422  # neither model given


@pytest.mark.parametrize(("kind", "query", "field", "message"), [
    ("sbatch", "model=llama3-8b&global_batch=256&gpus=64&tp=0", "tp", "--tp must be >= 1"),
    ("sbatch", "model=llama3-8b&global_batch=256&precision=fp7", None, "fp7"),
    ("k8s", "model=llama3-8b&global_batch=256&kind=nope", None, "--kind must be one of"),
    ("k8s", "model=llama3-8b&global_batch=256&job_name=a%0Ab", "job_name", "control characters"),
    ("report", "model=llama3-8b&global_batch=1024&trials=100000000", "trials", "in the web app"),
    ("report", "global_batch=1024&infer_precision=fp3", None, "--infer-precision"),
    ("sbatch", "global_batch=256", None, "--model: missing option"),
])
def test_bad_download_options_get_one_line_422s(client, kind, query, field, message):
    r = client.get(f"/api/download/{kind}?{query}")
    assert r.status_code == 422, r.text[:300]
    body = r.json()
    assert body["field"] == field and body["error"].startswith("error: ") and "\n" not in body["error"]
    assert message in body["error"] and "content-disposition" not in r.headers


def test_a_download_error_is_the_cli_line(client):
    r = client.get("/api/download/sbatch?model=llama3-8b&global_batch=256&gpus=64&tp=3")
    cli = run_cli("deploy", "slurm", "--model", "llama3-8b", "-b", "256", "--gpus", "64", "--tp", "3")
    assert r.status_code == 422 and cli.code == 2
    assert r.json()["error"] == cli.stderr.strip()


@pytest.mark.parametrize(("kind", "query", "field"), [
    ("sbatch", "model=llama3-8b&global_batch=256&output={out}", "output"),
    ("k8s", "model=llama3-8b&global_batch=256&output={out}", "output"),
    ("report", "global_batch=1024&output={out}", "output"),
    ("report", "global_batch=1024&trace=/etc/passwd", "trace"),
    ("report", "global_batch=1024&model=../../etc/passwd", "model"),
    ("sbatch", "model=/etc/passwd&global_batch=256", "model"),
    ("k8s", "model=llama3-8b&global_batch=256&cluster=../x.yaml", "cluster"),
])
def test_downloads_take_no_path(client, tmp_path, kind, query, field):
    out = tmp_path / "written.txt"
    r = client.get(f"/api/download/{kind}?{query.format(out=out)}")
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert not out.exists() and "root:" not in r.text
    assert not {"output", "trace", "json_out"} & {p.name for p in params_of(f"download/{kind}")}


def test_paths_on_the_jobs_cluster_are_text_never_opened(client):
    """``--script``, ``--checkpoint-dir``, ``--log`` name files of the cluster the job runs on: they are written
    into the script as the CLI writes them, and the server reads nothing of them."""
    query = "model=llama3-8b&global_batch=256&gpus=64&tp=2&script=/etc/passwd&checkpoint_dir=/etc&log=/etc/x-%25j"
    r = client.get(f"/api/download/sbatch?{query}")
    cli = run_cli("deploy", "slurm", "--model", "llama3-8b", "-b", "256", "--gpus", "64", "--tp", "2",
                  "--script", "/etc/passwd", "--checkpoint-dir", "/etc", "--log", "/etc/x-%j")
    assert r.status_code == 200 and r.content == cli.stdout.encode("utf-8")
    assert "/etc/passwd" in r.text and "root:" not in r.text


def test_download_file_names_are_safe():
    from clustertwin.web.downloads import safe_filename

    assert safe_filename("clustertwin-train", ".sbatch") == "clustertwin-train.sbatch"
    for hostile in ('a"; filename=x.sh', "../../etc/passwd", "..", "\r\nSet-Cookie: x", "日本", "x" * 500):
        name = safe_filename(hostile, ".yaml")
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}\.yaml", name), name


def test_openapi_lists_the_downloads(client):
    schema = client.get("/openapi.json").json()
    for kind, media in MEDIA.items():
        op = schema["paths"][f"/api/download/{kind}"]
        assert media in op["get"]["responses"]["200"]["content"] and "post" in op
    params = {p["name"] for p in schema["paths"]["/api/download/sbatch"]["get"]["parameters"]}
    assert {"model", "global_batch", "tp", "job_name", "partition", "script_args"} <= params
    assert "output" not in params
