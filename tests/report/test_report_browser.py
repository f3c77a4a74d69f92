"""The report in a real browser: headless Chromium loads the file, runs its scripts and draws every plot
without a console error or a network request; a screenshot is kept in test-artifacts/."""

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
