"""The web app in a real browser: ``clustertwin serve`` on a free loopback port, driven by Playwright with the
system Chromium (never a downloaded one). Every page loads and draws without a console error or a request
beyond the server; changing a control recomputes, and the numbers on screen equal ``--json`` of the CLI; the
layout holds at 390, 1280 and 1920 px (nothing wider than the viewport); every control has a label.
Screenshots go to test-artifacts/web/ (and to docs/img/ with ``CLUSTERTWIN_DOC_SCREENSHOTS=1``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed: pip install 'clustertwin[web]'")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the web extra)")

from clustertwin.cli.main import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "web"
DOC_IMAGES = ROOT / "docs" / "img"
WIDTHS_PX = (390, 1280, 1920)
PAGES = ("plan", "train", "infer", "explain", "validate")
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (apt-get install chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server() -> Any:
    port = _free_port()
    code = "import sys; from clustertwin.cli.main import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", code, "serve", "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/plan", timeout=5).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"clustertwin serve did not start: {proc.stderr.read().decode()[-500:]}")
            time.sleep(0.3)
    yield base
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)
    if proc.poll() is None:
        proc.kill()


@pytest.fixture(scope="module")
def browser() -> Any:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


class Watched:
    """A page whose console errors, page errors and requests beyond the server are recorded."""

    def __init__(self, browser: Any, base: str, width: int) -> None:
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.problems: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))

        def route(r: Any) -> None:
            if r.request.url.startswith(base):
                r.continue_()
            else:
                self.problems.append(f"request beyond the server: {r.request.url}")
                r.abort()

        self.page.route("**/*", route)

    def open(self, url: str) -> None:
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready]", timeout=60_000)

    def changed(self, selector: str, value: str) -> None:
        before = self.page.evaluate("document.body.dataset.ready")
        self.page.fill(selector, value)
        self.page.dispatch_event(selector, "change")
        self.until(f"document.body.dataset.ready !== {json.dumps(before)}")

    def until(self, expression: str, timeout_s: float = 60.0) -> None:
        """Poll ``expression`` (the page's CSP forbids the eval behind ``wait_for_function``)."""
        deadline = time.monotonic() + timeout_s
        while not self.page.evaluate(expression):
            assert time.monotonic() < deadline, f"timed out waiting for {expression}: {self.page.inner_text('#status')}"
            time.sleep(0.05)

    def last(self, api: str) -> dict[str, Any]:
        return self.page.evaluate(f"window.clustertwinLast[{json.dumps(api)}]")

    def layout_problems(self) -> list[str]:
        return self.page.evaluate("""() => {
          const out = [];
          const w = document.documentElement.clientWidth;
          if (document.documentElement.scrollWidth > w + 1) out.push('page scrolls sideways: ' +
              document.documentElement.scrollWidth + ' > ' + w);
          document.querySelectorAll('main > *, fieldset, .card, .plot, .control').forEach(e => {
            const r = e.getBoundingClientRect();
            if (r.right > w + 1) out.push((e.id || e.className || e.tagName) + ' ends at ' + Math.round(r.right));
          });
          document.querySelectorAll('form input, form select, form textarea').forEach(e => {
            if (!e.id || !document.querySelector('label[for="' + e.id + '"]')) out.push('unlabelled control ' + e.name);
          });
          return out;
        }""")

    def close(self) -> None:
        self.page.close()


def cli_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _screenshot(w: Watched, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = min(1400, w.page.evaluate("document.documentElement.scrollHeight"))
    w.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True,
                      clip={"x": 0, "y": 0, "width": 1280, "height": height})
    if os.environ.get("CLUSTERTWIN_DOC_SCREENSHOTS") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(ARTIFACTS / f"{name}.png", DOC_IMAGES / f"{name}.png")


@pytest.mark.parametrize("page", PAGES)
def test_each_page_loads_draws_and_holds_its_layout(server, browser, page):
    for width in WIDTHS_PX:
        w = Watched(browser, server, width)
        try:
            w.open(f"{server}/{page}")
            assert w.page.locator("#results > *").count() > 0, f"{page} drew nothing"
            assert not w.page.locator("#status.error").count(), w.page.inner_text("#status")
            if page not in ("validate",):
                assert w.page.locator(".plot .main-svg").count() > 0 or page in ("plan", "infer"), "no plot drawn"
            assert w.layout_problems() == [], (page, width)
            assert w.problems == [], (page, width)
            if width == 1280:
                _screenshot(w, f"web-{page}")
        finally:
            w.close()


def test_train_recomputes_on_change_and_equals_the_cli(server, browser, capsys):
    w = Watched(browser, server, 1280)
    try:
        w.open(f"{server}/train?gpus=64&global_batch=256&tp=2")
        first = w.last("train/estimate")
        assert first == cli_json(capsys, ["train", "estimate", "--gpus", "64", "-b", "256", "--tp", "2"])
        w.changed("#f-gpus", "128")
        second = w.last("train/estimate")
        assert second["gpus"] == 128 and second != first
        assert second == cli_json(capsys, ["train", "estimate", "--gpus", "128", "-b", "256", "--tp", "2"])
        assert "gpus=128" in w.page.url  # the state is in the address
        shown = w.page.inner_text('[data-key="step time (s)"]')
        assert float(shown) == pytest.approx(second["step_time_s"], rel=0.01)
        w.page.click("#search")
        w.until("window.clustertwinLast['train/search'] !== undefined")
        top = w.page.locator("#extra table tbody tr")
        assert top.count() == 10
        assert w.problems == []
    finally:
        w.close()


def test_explain_highlights_the_bottleneck_and_equals_the_cli(server, browser, capsys):
    w = Watched(browser, server, 1280)
    try:
        w.open(f"{server}/explain?gpus=64&global_batch=256&tp=2")
        got = w.last("explain")
        assert got == cli_json(capsys, ["explain", "--gpus", "64", "-b", "256", "--tp", "2"])
        assert w.page.inner_text("tr.bottleneck td:first-child") == got["bottleneck"]
        assert w.problems == []
    finally:
        w.close()


def test_an_error_shows_the_cli_line(server, browser):
    w = Watched(browser, server, 1280)
    try:
        w.open(f"{server}/train?gpus=64&global_batch=256&tp=2")
        w.page.fill("#f-tp", "3")
        w.page.dispatch_event("#f-tp", "change")
        w.page.wait_for_selector("#status.error", timeout=60_000)
        assert w.page.inner_text("#status").startswith("error: ")
    finally:
        w.close()


def test_train_download_links_carry_the_controls(server, browser):
    """The sbatch / k8s / report links carry the form's options each download takes (the report has no --gpus:
    it covers the whole cluster) and, for the layout options left empty, the layout the estimate on screen
    resolved; they follow a change, serve the CLI's file of the layout shown, and are off while a model is
    pasted."""
    from urllib.parse import parse_qs, parse_qsl, urlsplit

    import yaml

    from clustertwin.catalog import raw
    from clustertwin.web.commands import params_of
    from tests.conftest import run_cli

    w = Watched(browser, server, 1280)
    try:
        w.open(f"{server}/train?gpus=64&global_batch=256&tp=2")
        w.changed("#f-gpus", "128")
        shown = w.last("train/estimate")
        layout = shown["layout"]
        for kind in ("sbatch", "k8s", "report"):
            href = w.page.get_attribute(f"#download-{kind}", "href")
            url = urlsplit(href)
            assert url.path == f"/api/download/{kind}", href
            q = parse_qs(url.query)
            assert q["global_batch"] == ["256"] and q["tp"] == ["2"] and q["model"] == ["llama3-8b"], href
            assert q.get("gpus") == (None if kind == "report" else ["128"]), href
            assert q["micro_batch"] == [str(layout["micro_batch"])] and q["zero"] == [str(layout["zero"])], href
            assert q["dp"] == [str(layout["dp"])] and q["recompute"] == [layout["recompute"]], href
            assert "with_failures" not in q  # train estimate's own options stay behind
            assert q.get("stack", ["auto"]) == ["auto"], href  # the estimate's stack (deploy and report take it)
        href = w.page.get_attribute("#download-sbatch", "href")
        r = w.page.request.get(server + href)
        assert r.status == 200 and r.headers["content-disposition"].startswith("attachment;")
        option = {p.name: p.option for p in params_of("download/sbatch")}
        argv = ["deploy", "slurm"]
        for k, v in parse_qsl(urlsplit(href).query):
            argv += [option[k]] if v == "true" else [option[k], v]
        cli = run_cli(*argv)
        assert cli.code == 0, cli.stderr
        assert r.body() == cli.stdout.encode("utf-8")
        assert f"step time {shown['step_time_s']:.3f} s" in r.text()  # the file is of the layout on screen
        w.page.click(".paste summary")
        w.changed("#f-model_yaml", yaml.safe_dump(raw("model", "llama3-8b")))
        assert w.page.get_attribute("#download-k8s", "aria-disabled") == "true"
        assert w.page.get_attribute("#download-k8s", "href") is None
        assert w.problems == []
    finally:
        w.close()


def test_train_draws_the_predicted_timeline_and_refreshes_it(server, browser, tmp_path, capsys):
    """After each estimate the Train page draws ``/api/train/timeline`` (the file of ``train estimate
    --timeline``): one row per (rank, stream) and one bar trace per stream present, of the estimate shown."""
    w = Watched(browser, server, 1280)
    try:
        w.open(f"{server}/train?gpus=64&global_batch=256&tp=2&pp=2")
        w.until("document.body.dataset.timeline !== undefined")
        for gpus in ("64", "128"):
            got = w.last("train/timeline")
            out = tmp_path / f"timeline-{gpus}.json"
            assert main(["train", "estimate", "--gpus", gpus, "-b", "256", "--tp", "2", "--pp", "2",
                         "--timeline", str(out)]) == 0
            capsys.readouterr()
            assert got == json.loads(out.read_text(encoding="utf-8"))
            assert got["otherData"]["step_time_s"] == w.last("train/estimate")["step_time_s"]
            events = [e for e in got["traceEvents"] if e["ph"] == "X"]
            streams = sorted({e["cat"] for e in events})
            drawn = w.page.evaluate("Array.from(document.getElementById('plot-timeline').data, "
                                    "t => [t.type, t.name, Array.from(new Set(t.y)).length])")
            assert sorted(name for _, name, _ in drawn) == streams and {t for t, _, _ in drawn} == {"bar"}
            assert sum(rows for _, _, rows in drawn) == len({(e["pid"], e["cat"]) for e in events})
            assert w.page.locator("#plot-timeline .barlayer .trace").count() == len(streams)
            assert len({e["pid"] for e in events}) == 2  # both stages of pp=2
            if gpus == "64":
                before = w.page.evaluate("document.body.dataset.timeline")
                w.changed("#f-gpus", "128")
                w.until(f"document.body.dataset.timeline !== {json.dumps(before)}")
        assert w.layout_problems() == [] and w.problems == []
        w.page.set_viewport_size({"width": 390, "height": 900})  # the plot follows a narrow screen
        w.until("document.getElementById('plot-timeline').getBoundingClientRect().right <= "
                "document.documentElement.clientWidth + 1")
        assert w.layout_problems() == [] and w.problems == []
    finally:
        w.close()


def test_the_plan_page_builds_a_cluster_from_parts_and_equals_the_cli(server, browser, capsys):
    w = Watched(browser, server, 1280)
    try:
        w.open(f"{server}/plan?node=hgx-h800&nodes=128")
        w.page.select_option("#f-topology", "fat-tree")
        before = w.page.evaluate("document.body.dataset.ready")
        w.page.dispatch_event("#f-topology", "change")
        w.until(f"document.body.dataset.ready !== {json.dumps(before)}")
        argv = ["plan", "--node", "hgx-h800", "--nodes", "128", "--topology", "fat-tree"]
        assert w.last("plan") == cli_json(capsys, argv)
        assert "128 x hgx-h800" in w.page.inner_text("#results")
        assert w.problems == []
    finally:
        w.close()


def test_the_report_runs_as_a_job_with_progress_and_saves_its_file(server, browser):
    """The report link starts a background job: a progress bar with Cancel while it runs, the file when done."""
    w = Watched(browser, server, 1280)
    try:
        w.open(f"{server}/train?gpus=64&global_batch=256&tp=2")
        href = w.page.get_attribute("#download-report", "href")
        with w.page.expect_download(timeout=120_000) as got:
            w.page.click("#download-report")
            w.until("!document.getElementById('job').hidden")
        w.until("document.body.dataset.job === 'done'", 120.0)
        direct = w.page.request.get(server + href)
        with open(got.value.path(), "rb") as f:
            assert f.read() == direct.body()
        assert got.value.suggested_filename == "report-ref-1k-h100-llama3-8b.html"
        assert w.page.get_attribute("#job-progress", "value") == "1"
        w.page.click("#download-report")  # again, and cancelled this time
        w.until("document.body.dataset.job === 'running' || document.body.dataset.job === 'queued'", 60.0)
        w.page.click("#job-cancel")
        w.until("document.body.dataset.job === 'cancelled'", 30.0)
        assert w.page.inner_text("#job-text").startswith("cancelled")
        assert w.problems == []
    finally:
        w.close()
