"""The report in a real browser: headless Chromium loads the file, runs its scripts and draws every plot
without a console error or a network request, and the layout holds at 1280 and 1920 px: nothing is wider than
the viewport, no two table boxes overlap, every plot's caption and axis titles are inside its frame. Screenshots
are kept in test-artifacts/ (CI keeps them as artifacts)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from clustertwin.report import ReportOptions, build_report, write_report
from clustertwin.specs import ClusterSpec, ModelSpec, load

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--remote-debugging-pipe", "--window-size=1200,900")
TIMEOUT_S = 60.0
LAYOUT_WIDTHS_PX = (1280, 1920)
"""Viewport widths the layout must hold at (a laptop and a desktop screen)."""
RESIZE_JS = """new Promise(function (done) {
  document.querySelectorAll('.plot').forEach(function (p) { Plotly.Plots.resize(p); });
  setTimeout(done, 300);
})"""


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Cdp:
    """A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out,
    NUL-terminated JSON messages)."""

    def __init__(self, binary: str, user_data_dir: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire() -> None:
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=wire, pass_fds=(3, 4))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self) -> dict[str, Any]:
        while b"\0" not in self._buf:
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            reply = self._read_message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)
        raise TimeoutError(method)

    def wait_event(self, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        for e in self.events:
            if e.get("method") == method:
                return e
        while time.monotonic() < deadline:
            e = self._read_message()
            self.events.append(e)
            if e.get("method") == method:
                return e
        raise TimeoutError(method)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, OSError, TimeoutError):
            self.send("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


def _problems(events: list[dict[str, Any]]) -> list[str]:
    """Console errors/warnings, uncaught exceptions, and log errors (CSP violations, failed loads)."""
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
            out.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p.get('args', [])]}")
        elif m == "Runtime.exceptionThrown":
            out.append(f"exception: {p['exceptionDetails'].get('text')} "
                       f"{p['exceptionDetails'].get('exception', {}).get('description', '')}")
        elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
            out.append(f"log {p['entry']['level']}: {p['entry']['text']} {p['entry'].get('url', '')}")
    return out


DRAWN_JS = """JSON.stringify(Array.from(document.querySelectorAll('.plot')).map(function (d) {
  return {id: d.id, svg: d.querySelectorAll('svg.main-svg').length, canvas: d.querySelectorAll('canvas').length,
          traces: d.querySelectorAll('g.trace, g.barlayer .point').length};
}))"""


LAYOUT_JS = """(function () {
  var vw = document.documentElement.clientWidth, out = {viewport: vw,
      page_width: document.documentElement.scrollWidth, too_wide: [], overlaps: [], plots: []};
  function inBox(el) { return el.closest('.table-box') !== null && !el.classList.contains('table-box'); }
  function r(el) { var b = el.getBoundingClientRect(); return {l: b.left, t: b.top + window.scrollY,
      r: b.right, b: b.bottom + window.scrollY, w: b.width, h: b.height}; }
  document.querySelectorAll('body *').forEach(function (el) {
    if (inBox(el) || el.closest('.modebar-container')) return;
    var b = el.getBoundingClientRect();
    if (b.width > 0 && b.right > vw + 1) out.too_wide.push(el.tagName + '.' + el.className + ' right=' + b.right);
  });
  var boxes = Array.from(document.querySelectorAll('.table-box')).map(r);
  for (var i = 0; i < boxes.length; i++) for (var j = i + 1; j < boxes.length; j++) {
    var a = boxes[i], c = boxes[j];
    if (a.l < c.r - 1 && c.l < a.r - 1 && a.t < c.b - 1 && c.t < a.b - 1) out.overlaps.push([i, j]);
  }
  document.querySelectorAll('figure.plot-frame').forEach(function (fig) {
    var plot = fig.querySelector('.plot'), svg = plot.querySelector('svg.main-svg'), cap = fig.querySelector('figcaption');
    var frame = r(fig), p = {id: plot.id, caption: cap ? cap.textContent : '', problems: []};
    if (!cap || r(cap).h === 0) p.problems.push('no caption');
    var bar = plot.querySelector('.modebar');
    if (cap && bar) { var m = r(bar), k = r(cap);
      if (m.l < k.r && k.l < m.r && m.t < k.b && k.t < m.b && m.w > 0) p.problems.push('caption under toolbar'); }
    var s = svg ? r(svg) : null;
    plot.querySelectorAll('.g-xtitle text, .g-ytitle text, .g-y2title text').forEach(function (t) {
      if (!t.textContent) return;
      var b = r(t);
      if (b.w === 0 || b.l < Math.max(s.l, frame.l) - 1 || b.r > Math.min(s.r, frame.r) + 1 ||
          b.t < s.t - 1 || b.b > s.b + 1) p.problems.push('axis title clipped: ' + t.textContent);
    });
    out.plots.push(p);
  });
  return JSON.stringify(out);
})()"""
"""Layout facts of the page at the current viewport: overflow, table-box overlaps, plot captions and axis titles."""

EXPECTED_PLOTS = {"fig-scaling", "fig-losses", "fig-step", "fig-memory", "fig-comm", "fig-walltime",
                  "fig-infer-throughput", "fig-infer-tpot"}
"""Every plot of a report without a trace, inference section included."""


@pytest.fixture(scope="module")
def report_file(tmp_path_factory) -> Path:
    cluster = load(ClusterSpec, {"name": "lab <b>&</b> 'q'", "node": "dgx-h100", "nodes": 4,
                                 "network": {"fabric": "ib-ndr", "topology": "fat-tree"}})
    model = load(ModelSpec, "llama3-8b", kind="model")
    report = build_report(cluster, model, ReportOptions(global_batch=256, tokens=1e12, trials=200))
    return write_report(report, tmp_path_factory.mktemp("report") / "report.html")


def test_report_draws_every_plot_in_headless_chromium(report_file: Path, tmp_path: Path) -> None:
    """Chromium runs the report's scripts with no console error, every plot has an SVG, and a screenshot is saved."""
    binary = _chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI installs the Debian package 'chromium')")
        pytest.skip("chromium is not installed")
    cdp = Cdp(binary, tmp_path / "profile")
    try:
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            cdp.send(f"{domain}.enable", session=session)
        cdp.send("Page.navigate", {"url": report_file.as_uri()}, session=session)
        cdp.wait_event("Page.loadEventFired")
        drawn = json.loads(cdp.send("Runtime.evaluate", {"expression": DRAWN_JS, "returnByValue": True},
                                    session=session)["result"]["value"])
        layouts = {}
        for width in LAYOUT_WIDTHS_PX:
            cdp.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000, "deviceScaleFactor": 1,
                                                            "mobile": False}, session=session)
            cdp.send("Runtime.evaluate", {"expression": RESIZE_JS, "awaitPromise": True}, session=session)
            layouts[width] = json.loads(cdp.send("Runtime.evaluate", {"expression": LAYOUT_JS, "returnByValue": True},
                                                 session=session)["result"]["value"])
            wshot = cdp.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                             session=session)
            ARTIFACTS.mkdir(exist_ok=True)
            (ARTIFACTS / f"report-{width}px.png").write_bytes(base64.b64decode(wshot["data"]))
        metrics = cdp.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
        shot = cdp.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                   "clip": {"x": 0, "y": 0, "width": metrics["width"],
                                                            "height": min(metrics["height"], 12000), "scale": 1}},
                        session=session)
        cdp.send("Emulation.setEmulatedMedia", {"media": "print"}, session=session)
        pdf = cdp.send("Page.printToPDF", {"printBackground": False}, session=session)
        requests = [e["params"]["request"]["url"] for e in cdp.events if e.get("method") == "Network.requestWillBeSent"]
        problems = _problems(cdp.events)
    finally:
        cdp.close()
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "report.png").write_bytes(base64.b64decode(shot["data"]))
    (ARTIFACTS / "report.pdf").write_bytes(base64.b64decode(pdf["data"]))
    assert problems == []
    assert {d["id"] for d in drawn} == EXPECTED_PLOTS, drawn
    assert all(d["svg"] > 0 and d["traces"] > 0 for d in drawn), drawn
    assert all(u.startswith("file://") for u in requests), requests
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000
    for width, lay in layouts.items():
        assert lay["page_width"] <= lay["viewport"], (width, lay["page_width"], lay["too_wide"][:5])
        assert lay["too_wide"] == [], (width, lay["too_wide"][:5])
        assert lay["overlaps"] == [], (width, lay["overlaps"])
        assert {p["id"] for p in lay["plots"]} == EXPECTED_PLOTS, width
        assert all(p["caption"] and not p["problems"] for p in lay["plots"]), (width, lay["plots"])
