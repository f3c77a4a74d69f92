"""The HTML report: sections from the models, escaping of user strings, inlined scripts, CLI errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clustertwin.report import ReportOptions, build_report, escape_json, render_html
from clustertwin.specs import ClusterSpec, ModelSpec, load

EVIL = "<script>alert('x')</script> & \"q\""


@pytest.fixture(scope="module")
def small():
    cluster = load(ClusterSpec, {"name": EVIL, "node": "dgx-h100", "nodes": 2,
                                 "network": {"fabric": "ib-ndr", "topology": "fat-tree"}})
    return cluster, load(ModelSpec, "llama3-8b", kind="model")


@pytest.fixture(scope="module")
def html(small) -> str:
    cluster, model = small
    return render_html(build_report(cluster, model, ReportOptions(global_batch=128, tokens=1e11, trials=50)))


def test_user_strings_are_escaped(html: str) -> None:
    """A cluster name holding markup appears only escaped, never as a tag."""
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &#34;q&#34;" in html


def test_report_is_self_contained(html: str) -> None:
    """No external script, stylesheet or image; a CSP forbids fetches; plotly.js is inlined."""
    assert not re.search(r"<(script|img|iframe)[^>]+src=", html)
    assert "<link" not in html
    assert "default-src 'none'" in html
    assert "Plotly.newPlot" in html and len(html) > 3_000_000


def test_every_section_and_figure_is_present(html: str) -> None:
    """Plan, scaling, breakdowns, collectives and reliability each render with their plots."""
    for sid in ("plan", "scaling", "breakdown", "comm", "reliability"):
        assert f'<section id="{sid}">' in html
    targets = re.findall(r'class="figure-data" data-target="([^"]+)"', html)
    assert sorted(targets) == sorted(re.findall(r'<div class="plot" id="([^"]+)"', html))
    assert {"fig-scaling", "fig-losses", "fig-step", "fig-memory", "fig-comm", "fig-walltime"} <= set(targets)


def test_figure_json_cannot_close_its_script_element() -> None:
    """Escaped figure JSON holds no '<' or '>' yet parses back to the same value."""
    value = {"title": "</script><b>&</b>\u2028"}
    text = escape_json(json.dumps(value))
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(str(text)) == value


def test_scheduler_section_with_a_trace(small, tmp_path: Path) -> None:
    """A trace adds the scheduler comparison, one column per policy."""
    cluster, model = small
    swf = tmp_path / "jobs.swf"
    swf.write_text("".join(f"{i} {i * 60} 0 {600 + 30 * i} 8 -1 -1 {1 + i % 16} 3600 -1 1 u{i % 3} 1 1 0 1 -1 -1\n"
                           for i in range(1, 40)))
    report = build_report(cluster, model, ReportOptions(global_batch=128, tokens=1e11, trials=20, trace=swf,
                                                        policies=("fifo", "backfill")))
    sched = [s for s in report.sections if s.id == "sched"]
    assert len(sched) == 1, report.omitted
    assert sched[0].tables[0].columns == ("metric", "fifo", "backfill")


def test_cli_writes_the_report(cli, tmp_path: Path) -> None:
    """``clustertwin report`` writes the file and reports its sections as JSON."""
    cluster = tmp_path / "c.yaml"
    cluster.write_text("name: tiny\nnode: dgx-h100\nnodes: 2\nnetwork: {fabric: ib-ndr, topology: fat-tree}\n")
    out = tmp_path / "r.html"
    r = cli("report", "--cluster", str(cluster), "--model", "llama3-8b", "--global-batch", "64", "--trials", "20",
            "--out", str(out), "--json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["sections"] == ["plan", "scaling", "breakdown", "comm", "reliability"]
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(("args", "message"), [
    (("--model", "llama3-70c"), "did you mean 'llama3-70b'"),
    (("--trace", "missing.swf"), "trace file not found"),
    (("--trials", "0"), "--trials must be >= 1"),
])
def test_cli_bad_input_is_one_line_exit_2(cli, tmp_path: Path, args, message) -> None:
    """Bad input exits 2 with one line naming the problem."""
    r = cli("report", "--out", str(tmp_path / "r.html"), *args)
    assert r.code == 2
    assert message in r.stderr and r.stderr.count("\n") == 1
