"""The HTML report: sections from the models, escaping of user strings, inlined scripts, CLI errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import clustertwin.infer as infer_api
from clustertwin.report import (
    InferSettings,
    ReportOptions,
    build_report,
    escape_json,
    render_html,
)
from clustertwin.report.sections import infer_section
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
    """Plan, scaling, breakdowns, collectives, reliability and inference each render with their plots."""
    for sid in ("plan", "scaling", "breakdown", "comm", "reliability", "infer"):
        assert f'<section id="{sid}">' in html
    targets = re.findall(r'class="figure-data" data-target="([^"]+)"', html)
    assert sorted(targets) == sorted(re.findall(r'<div class="plot" id="([^"]+)"', html))
    assert {"fig-scaling", "fig-losses", "fig-step", "fig-memory", "fig-comm", "fig-walltime", "fig-infer-throughput",
            "fig-infer-tpot"} <= set(targets)


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
            "--output", str(out), "--json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["sections"] == ["plan", "scaling", "breakdown", "path", "comm", "reliability",
                                                    "infer", "hpc"]
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(("args", "message"), [
    (("--model", "llama3-70c"), "did you mean 'llama3-70b'"),
    (("--trace", "missing.swf"), "trace file not found"),
    (("--trials", "0"), "--trials must be >= 1"),
    (("--request-rate", "0"), "--request-rate must be > 0"),  # the CLI-wide numeric guard answers first
    (("--qps", "0"), "--request-rate must be > 0 (got 0) (given as --qps)"),  # the old spelling, checked the same
    (("--input-len", "0"), "--input-len must be >= 1"),
    (("--infer-precision", "fp7"), "unsupported precision 'fp7'"),
])
def test_cli_bad_input_is_one_line_exit_2(cli, tmp_path: Path, args, message) -> None:
    """Bad input exits 2 with one line naming the problem."""
    r = cli("report", "--output", str(tmp_path / "r.html"), "-b", "64", *args)
    assert r.code == 2
    assert message in r.stderr and r.stderr.count("\n") == 1


def test_inference_section_per_tp_and_sizing(small) -> None:
    """One row per TP degree; more TP leaves more KV cache per GPU (weights split), so the largest batch grows;
    throughput per GPU and TPOT curves rise with batch; the sizing answer serves the requested rate."""
    cluster, model = small
    settings = InferSettings(qps=20.0, slo_ttft_ms=800.0, slo_tpot_ms=40.0)
    section = infer_section(model, cluster, settings, infer_api)
    per_tp, best, candidates = section.tables
    assert [r[0] for r in per_tp.rows] == ["1", "2", "4", "8"]
    max_batch = [int(r[4].replace(",", "")) for r in per_tp.rows]
    assert max_batch == sorted(max_batch) and max_batch[0] < max_batch[-1]
    throughput, tpot = (json.loads(f.json) for f in section.figures)
    assert [tr["name"] for tr in throughput["data"]] == ["TP 1", "TP 2", "TP 4", "TP 8"]
    for tr in throughput["data"] + tpot["data"]:
        assert tr["x"][0] == 1 and tr["y"][-1] > tr["y"][0]
    sized = dict(best.rows)
    replicas = int(sized["deployment"].split(", ")[-1].split(" ")[0])
    assert replicas * float(sized["requests/s per replica"]) >= settings.qps
    assert sized["meets the SLOs in simulation"] == "yes"
    assert any(r[2] == "yes" for r in candidates.rows)


def test_inference_section_when_nothing_fits() -> None:
    """A model too large for every TP degree of the node: rows say why, no plot, a note instead."""
    cluster = load(ClusterSpec, {"node": "dgx-h100", "nodes": 1, "network": {"fabric": "ib-ndr", "topology": "single"}})
    model = load(ModelSpec, "llama3-405b", kind="model")
    section = infer_section(model, cluster, InferSettings(), infer_api)
    assert section.figures == ()
    assert all("does not fit" in r[-1] for r in section.tables[0].rows)
    assert any("fits no TP degree" in n for n in section.notes)


def test_no_infer_leaves_the_section_out(small) -> None:
    """``infer=None`` (``--no-infer``) builds the report without the inference section."""
    cluster, model = small
    report = build_report(cluster, model, ReportOptions(global_batch=128, tokens=1e11, trials=20, infer=None))
    assert "infer" not in [s.id for s in report.sections]
    assert report.omitted == ()


def test_path_view_highlights_the_bottleneck_and_escapes(small) -> None:
    """The path section: storage -> network -> HBM -> compute -> collectives -> scheduler boxes, exactly one
    marked as the bottleneck, drawn inline and escaped."""
    from dataclasses import replace

    from clustertwin.report.html import render_html

    cluster, model = small
    report = build_report(cluster, model, ReportOptions(global_batch=128, tokens=1e11, trials=20, infer=None))
    path = next(s for s in report.sections if s.id == "path")
    assert [b.name for b in path.path] == ["storage", "network", "HBM", "compute", "collectives", "scheduler"]
    marked = [b.name for b in path.path if b.bottleneck]
    assert len(marked) <= 1 and (not marked or marked[0] in path.intro)
    evil = replace(path, path=(replace(path.path[0], detail="<script>alert(1)</script>", bottleneck=True),
                               *path.path[1:]))
    html = render_html(replace(report, sections=tuple(evil if s.id == "path" else s for s in report.sections)))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert 'class="path-box bottleneck"' in html and "http://" not in html.split("<script>")[0]
